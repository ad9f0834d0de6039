"""Authoritative GeoDNS server for the fleet's zone (asyncio, dnspython, geoip2; no Django).

``DnsServer`` and ``serve`` in ``server``; the query handler as a pure function is
``Responder.handle`` in ``responder`` (also ``DnsServer.handle``).
"""
