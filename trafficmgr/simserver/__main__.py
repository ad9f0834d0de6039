"""``python -m trafficmgr.simserver``: see ``trafficmgr.simserver.cli``."""

from __future__ import annotations

from trafficmgr.simserver.cli import main

if __name__ == "__main__":
    main()
