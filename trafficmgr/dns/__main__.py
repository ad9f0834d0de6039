"""Run the GeoDNS server: ``python -m trafficmgr.dns --fleet FILE --listen HOST:PORT``."""

from __future__ import annotations

import sys

from trafficmgr.dns.cli import main

if __name__ == "__main__":
    sys.exit(main())
