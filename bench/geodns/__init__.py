"""Three-way GeoDNS benchmark: this project's server, PowerDNS (geoip backend) and gdnsd.

Run from the repository root: ``.venv/bin/python -m bench.geodns`` (see ``__main__``). Not
``bench/dns``: the scripts in ``bench/`` run with that directory on ``sys.path``, where a
``dns`` package would hide dnspython from them.
"""
