"""Whether a process is still there, by its id (signal 0: nothing is sent)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Tell whether process ``pid`` exists (one of another user's counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
