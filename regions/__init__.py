"""The control plane's Django app: fleet configuration, the control loop, decisions, drills,
alerts and the HTTP API, one package per concept.

Imports: anything of ``trafficmgr`` but the harness; within the app, the direction of
``tests/architecture/layers.py`` (infrastructure < configuration < features < API < entry
points). Nothing outside the Django project imports it.
"""
