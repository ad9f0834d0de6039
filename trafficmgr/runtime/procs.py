"""Whether a process, or a process group, is still there (signal 0: nothing is sent)."""

from __future__ import annotations

import os
from collections.abc import Callable


def pid_alive(pid: int) -> bool:
    """Tell whether process ``pid`` exists (one of another user's counts as existing)."""
    return _answers(os.kill, pid)


def group_alive(pgid: int) -> bool:
    """Tell whether any process of group ``pgid`` exists."""
    return _answers(os.killpg, pgid)


def _answers(send: Callable[[int, int], None], target: int) -> bool:
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # there, but another user's
    return True
