"""``python -m trafficmgr.epp``: the endpoint picker over a fleet file."""

from __future__ import annotations

import sys

from trafficmgr.epp.cli import main

sys.exit(main())
