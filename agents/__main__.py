"""Run the agent: ``python -m agents``."""

from __future__ import annotations

from agents.cli import main

raise SystemExit(main())
