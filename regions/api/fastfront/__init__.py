"""The ASGI front of the hot paths (heartbeats, decisions, completions) ahead of Django
(``front``), with the HTTP rules it keeps as Django would (``http``). Imports the API's shared
plumbing and the features; never another ``regions.api`` feature package.
"""
