"""The control loop: heartbeat ingest, the tick (health, failover state machines, table
compile and publish), what a tick records, history retention, operator actions (drain,
weight, pause) and the Celery tasks that drive it."""
