"""``python -m trafficmgr.dns.publishers``: see ``cli``."""

from __future__ import annotations

import sys

from trafficmgr.dns.publishers.cli import main

if __name__ == "__main__":
    sys.exit(main())
