"""The project: the Django project's wiring at the top, the parts that run without it below.

Owns: ``settings``, ``urls``, ``asgi`` and ``celery`` (the Django project, which may import
anything); ``contracts`` (the cross-process names and layouts); the packages ``routing``
(the engine), ``fleetfile``, ``geoip``, ``runtime``, ``requestpath``, ``sim``, the processes
``dns``, ``gateway``, ``epp``, ``simserver`` and the harness ``topology``. The import
direction between them is docs/architecture.md's and ``tests/architecture/layers.py``'s.
"""
