"""Drills: prove failover with numbers. The spec and its guardrails, the runner that injects
the fault and measures detection, table and DNS change and recovery, the report, its plot, and
the Celery tasks that run, reap and schedule drills."""
