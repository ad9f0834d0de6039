"""The alerts API: channels, notifications (``views``) and silences (``silences``).
Imports the API's shared plumbing and ``regions.alerts``; never another ``regions.api``
feature package.
"""
