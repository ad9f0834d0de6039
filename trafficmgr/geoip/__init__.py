"""Locate clients by IP address over a GeoIP (MaxMind) database.

Owns: ``locator`` (``Locator``: a City or Country database read through geoip2, answers cached
per prefix; ``default_database_path``: the GeoLite2 copy maxminddb-geolite2 ships).
Imports: the engine (``trafficmgr.routing``: the ``ClientLocation`` it returns) and geoip2;
kept out of the engine because it reads a file, which the engine never does.
"""

from __future__ import annotations

from trafficmgr.geoip.locator import Locator, default_database_path

__all__ = ["Locator", "default_database_path"]
