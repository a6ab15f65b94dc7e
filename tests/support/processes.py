"""Process checks shared by the tests that stop stages and jobs."""

from __future__ import annotations

import os


def gone(pid: int) -> bool:
    """The process has ended (no such pid, or a zombie waiting for its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] == "Z"
