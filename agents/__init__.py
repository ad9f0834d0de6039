"""trafficmgr node agent: NVML, inference-server metrics and a model probe, pushed as heartbeats.

Standalone: imports neither Django nor the control plane, so it installs alone on a GPU node
(``agents/pyproject.toml``).

Imports: nothing of the rest of the project (it installs alone); never another process.
"""

from __future__ import annotations

__version__ = "0.1.0"
