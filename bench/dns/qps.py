"""Measure the GeoDNS server alone: queries per second, lost queries, latency p50/p99.

    .venv/bin/python -m bench.dns.qps [--duration 20] [--workers 1,2] [--latency-seconds 10]
        [--swap-every 1 [--swap-moves 0.25] [--base-root DIR] [--rate QPS]]

The same run as ``python -m bench.dns.geodns`` (``bench/dns/geodns/``: start on a free
loopback port, check the geo answers with dig, one warm-up pass, dnsperf at full rate, then at
half that rate with every answer timed), for this project's server only. The comparison with
PowerDNS and gdnsd, with the ratio table, is ``python -m bench.dns.geodns``. ``--swap-every``
swaps the routing table under the server while it is measured (see ``bench/dns/geodns/swaps.py``);
``--base-root`` runs the server of another tree alongside, for a before/after comparison.
"""

from __future__ import annotations

import sys

from bench.dns.geodns.__main__ import main

if __name__ == "__main__":
    sys.argv[1:1] = ["--servers", "trafficmgr"]
    sys.exit(main())
