"""Supervised child processes: start stages as separate processes, restart a crashed one,
and stop everything on exit, on Ctrl-C and on the death of the supervisor itself.

Each child runs in its own process group and asks the kernel (PR_SET_PDEATHSIG) to SIGTERM
it when the supervisor dies, so no stage is left behind even after a SIGKILL.

Logs rotate by size: past ``log_max_bytes`` (checked at every start and :meth:`poll`),
``<name>.log`` is copied to ``<name>.log.1`` (older copies shift up to ``log_keep``, the
oldest is dropped) and truncated in place. The child keeps its descriptor, opened for
appending, so it goes on writing at the new end (logrotate's copytruncate: a line
written during the copy itself can be lost, never the file).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    os.setpgid(0, 0)


@dataclass
class ChildSpec:
    name: str
    argv: list[str]  # e.g. [sys.executable, "-m", "topology.commands", "trainer"]
    env: dict[str, str] = field(default_factory=dict)
    restart: bool = True  # restart when it exits non-zero (a crashed stage re-runs alone)
    # at most max_restarts restarts within any restart_window_s: a crash loop ends the
    # child, crashes far apart (a long-running loop's) never use the budget up
    max_restarts: int = 3
    restart_window_s: float = 600.0
    oneshot: bool = False  # expected to exit by itself (e.g. an ingest replay)
    # SIGTERM only the child, which stops its own processes first (the Flink client cancels
    # its job, then its JVM and Python workers end); whatever of its group outlives the
    # stop timeout is SIGKILLed either way
    term_leader_only: bool = False
    stop_timeout_s: float = 10.0  # at least this long between SIGTERM and SIGKILL


@dataclass
class Child:
    spec: ChildSpec
    process: subprocess.Popen
    log_path: Path
    restarts: int = 0  # over its whole life
    recent_restarts: list[float] = field(default_factory=list)  # when, within the window
    started_at: float = field(default_factory=time.monotonic)


class Supervisor:
    """Start, watch and stop a set of child processes; logs go to ``log_dir/<name>.log``
    (rotated past ``log_max_bytes``, ``log_keep`` old copies kept)."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        base_env: dict[str, str] | None = None,
        log_max_bytes: int = 20 << 20,
        log_keep: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.log_max_bytes = log_max_bytes
        self.log_keep = log_keep
        self.children: dict[str, Child] = {}

    def start(self, spec: ChildSpec) -> Child:
        log_path = self.log_dir / f"{spec.name}.log"
        rotate_log(log_path, self.log_max_bytes, self.log_keep)
        env = {**self.base_env, **spec.env, "PYTHONUNBUFFERED": "1"}
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                spec.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_child_setup,  # noqa: PLW1509 - only sets a signal and the group
            )
        previous = self.children.get(spec.name)
        child = Child(spec, process, log_path)
        if previous is not None:
            child.restarts, child.recent_restarts = previous.restarts, previous.recent_restarts
        self.children[spec.name] = child
        log.info("started %s (pid %d), log %s", spec.name, process.pid, log_path)
        return child

    def poll(self) -> list[str]:
        """Restart crashed children that may be restarted; return names that ended for good."""
        ended = []
        for name, child in list(self.children.items()):
            rotate_log(child.log_path, self.log_max_bytes, self.log_keep)
            code = child.process.poll()
            if code is None:
                continue
            if code == 0 and child.spec.oneshot:
                ended.append(name)
                continue
            now = self.clock()
            window = child.spec.restart_window_s
            child.recent_restarts[:] = [t for t in child.recent_restarts if now - t < window]
            if child.spec.restart and len(child.recent_restarts) < child.spec.max_restarts:
                child.restarts += 1
                child.recent_restarts.append(now)
                log.warning(
                    "%s exited with %s; restart %d/%d within %.0fs (%d in all)",
                    name,
                    code,
                    len(child.recent_restarts),
                    child.spec.max_restarts,
                    window,
                    child.restarts,
                )
                self.start(child.spec)
            else:
                ended.append(name)
        return ended

    def alive(self, name: str) -> bool:
        child = self.children.get(name)
        return child is not None and child.process.poll() is None

    def exit_code(self, name: str) -> int | None:
        child = self.children.get(name)
        return None if child is None else child.process.poll()

    def stop(self, name: str, timeout_s: float = 10.0) -> None:
        child = self.children.get(name)
        if child is None:
            return
        _terminate(child)
        _wait_or_kill(child, time.monotonic() + max(timeout_s, child.spec.stop_timeout_s))

    def stop_all(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every child, then wait for each one's whole process group; SIGKILL what
        is left of a group past its deadline (``timeout_s`` or the child's own, if longer)."""
        started = time.monotonic()
        for child in self.children.values():
            _terminate(child)
        for child in self.children.values():
            _wait_or_kill(child, started + max(timeout_s, child.spec.stop_timeout_s))

    def pids(self) -> list[int]:
        return [child.process.pid for child in self.children.values()]

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def rotate_log(path: Path, max_bytes: int, keep: int) -> bool:
    """Copy-truncate ``path`` if it is larger than ``max_bytes``; True if it rotated."""
    try:
        if not path.exists() or path.stat().st_size <= max_bytes:
            return False  # a stage's first start: no log yet
        for index in range(keep - 1, 0, -1):
            older = path.with_name(f"{path.name}.{index}")
            if older.exists():
                os.replace(older, path.with_name(f"{path.name}.{index + 1}"))
        if keep > 0:
            shutil.copyfile(path, path.with_name(f"{path.name}.1"))
        os.truncate(path, 0)
    except OSError as exc:
        log.warning("could not rotate %s: %s", path, exc)
        return False
    return True


def _terminate(child: Child) -> None:
    if child.process.poll() is not None:
        return
    if child.spec.term_leader_only:
        child.process.send_signal(signal.SIGTERM)
    else:
        _signal_group(child.process, signal.SIGTERM)


def _wait_or_kill(child: Child, deadline: float) -> None:
    """Wait until the child and every process of its group ended; SIGKILL the group past
    ``deadline`` (a stage's own subprocess, e.g. a JVM, must not outlive the loop)."""
    try:
        child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        log.warning("%s ignored SIGTERM; killing its process group", child.spec.name)
        _signal_group(child.process, signal.SIGKILL)
        child.process.wait()
    while _group_alive(child.process.pid):
        if time.monotonic() >= deadline:
            log.warning("processes of %s outlived it; killing its process group", child.spec.name)
            _signal_group(child.process, signal.SIGKILL)
            deadline = time.monotonic() + 5.0  # for the kernel to end them (or: zombies)
            while _group_alive(child.process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            return
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group id was reused by another user's processes
        return False
    return True


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def worx_argv(*args: str) -> list[str]:
    """argv that runs a `worx` subcommand with this interpreter (no PATH lookup needed)."""
    return [sys.executable, "-m", "topology.commands", *args]
