"""Three-way GeoDNS benchmark: this project's server, PowerDNS (geoip backend) and gdnsd.

Run from the repository root: ``.venv/bin/python -m bench.dns.geodns`` (see ``__main__``);
``python -m bench.dns.qps`` runs the same for this project's server alone.
"""
