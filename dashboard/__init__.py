"""The operator's dashboard: pages, the live feed over WebSocket (Channels) and the map.

Imports: ``regions`` (models, services, API views) and the engine; nothing but the Django project
imports it.
"""
