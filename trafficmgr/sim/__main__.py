"""``python -m trafficmgr.sim``: see ``trafficmgr.sim.cli``."""

from __future__ import annotations

from trafficmgr.sim.cli import main

if __name__ == "__main__":
    main()
