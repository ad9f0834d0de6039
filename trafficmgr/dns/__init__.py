"""Authoritative GeoDNS server for the fleet's zone (asyncio, dnspython, geoip2; no Django).

``DnsServer`` and ``serve`` in ``server``; the query handler as a pure function is
``Responder.handle`` in ``responder`` (also ``DnsServer.handle``).

Owns: the server, its responder and zone, the table and fleet sources, and ``publishers`` (the
table pushed into external DNS servers).
Imports: the engine (``trafficmgr.routing``, ``contracts``, ``fleetfile``, ``geoip``) and the
runtime; never another process nor Django: the control plane reaches it through Redis.
"""
