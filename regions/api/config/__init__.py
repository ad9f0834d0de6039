"""The configuration API: CRUD over regions, endpoints, GPU profiles, residency rules,
failover policies, tokens, and the event and audit history. Imports the API's shared
plumbing and lower layers; never another ``regions.api`` feature package.
"""
