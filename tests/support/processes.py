"""Process helpers shared by the tests that start, stop and kill stages and jobs: whether a
process has ended, and a `worx` command whose child blocks at a chosen point (the SIGKILL
tests), its stdout lines read with a deadline."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Prepended to `worx <args>` in the child: ``BLOCK_AT`` (code defining ``install(block)``)
# wraps one function so that, at the chosen point, the child prints "blocked" and waits
# for its stdin, which never comes: the test kills it there.
_RUNNER = r"""
import sys
def block():
    print("blocked", flush=True)
    sys.stdin.read()
exec(sys.argv[1])
install(block)
from topology.commands import main
sys.exit(main(sys.argv[2:]))
"""


def start_worx(args: list[str], env: dict[str, str], log: Path, block_at: str | None = None):
    """``worx <args>`` as a process (stdout piped, stderr to ``log``); with ``block_at`` it
    blocks where that code's ``install(block)`` says."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    full_env.update(env)
    if block_at is None:
        argv = [sys.executable, "-m", "topology.commands", *args]
    else:
        argv = [sys.executable, "-c", _RUNNER, block_at, *args]
    with log.open("ab") as stderr:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )


def read_line(process: subprocess.Popen, starts: str, timeout_s: float, log: Path) -> str:
    """The first stdout line of ``process`` starting with ``starts`` (others are skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([process.stdout], [], [], max(left, 0))
        if not ready:
            raise AssertionError(
                f"no {starts!r} line within {timeout_s}s:\n{log.read_text()[-3000:]}"
            )
        line = process.stdout.readline()
        if not line:
            raise AssertionError(
                f"exited ({process.wait()}) before {starts!r}:\n{log.read_text()[-3000:]}"
            )
        if line.startswith(starts):
            return line.strip()


def gone(pid: int) -> bool:
    """The process has ended (no such pid, or a zombie waiting for its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] == "Z"
