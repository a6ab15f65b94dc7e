"""Disk hygiene of the expert store: writers' temporary directories and the quarantine.

A writer (``ExpertStore.put``) holds an exclusive ``flock`` on ``.tmp-<token>.lock`` for
as long as its ``.tmp-<token>-<expert_id>/`` exists. The kernel drops the lock when the
writer's process ends, however it ends (SIGKILL included), and NFS carries such locks
between machines, so "the lock can be taken" means "the writer is gone": such a directory
is removed. A ``.tmp-*`` directory with no lock file (an older build's, or a foreign one)
is removed only once nothing in it has changed for ``grace_s``. A directory whose lock is
held is never touched, however old, nor one this process is writing (on NFS, Linux
emulates ``flock`` with POSIX locks, which a process does not see against itself).

The quarantine keeps at most ``keep`` entries and none older than ``max_age_s`` (0: no
limit); the newest are kept.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
_TMP_DIR = re.compile(r"^\.tmp-([0-9a-f]{12})-")
_TMP_LOCK = re.compile(r"^\.tmp-([0-9a-f]{12})\.lock$")
_WRITING: set[str] = set()  # lock files held by writers of this process


class WriterLock:
    """``with WriterLock(root) as tmp:`` a fresh, locked ``.tmp-<token>-<name>`` path (not
    created); the lock file is removed on exit, after the caller renamed or removed ``tmp``."""

    def __init__(self, root: Path, name: str) -> None:
        token = uuid.uuid4().hex[:12]
        self.lock_path = root / f"{TMP_PREFIX}{token}.lock"
        self.tmp = root / f"{TMP_PREFIX}{token}-{name}"
        self._fd: int | None = None

    def __enter__(self) -> Path:
        _WRITING.add(os.path.realpath(self.lock_path))
        self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self.tmp

    def __exit__(self, *exc: object) -> None:
        self.lock_path.unlink(missing_ok=True)
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None
        _WRITING.discard(os.path.realpath(self.lock_path))


def _writer_gone(lock_path: Path) -> bool | None:
    """True if the lock can be taken (its writer ended), False if held, None if no file."""
    if os.path.realpath(lock_path) in _WRITING:
        return False
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError:
        return False  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # also drops a lock just taken
    return True


def _last_change(path: Path) -> float:
    newest = path.lstat().st_mtime
    for child in path.rglob("*"):
        try:
            newest = max(newest, child.lstat().st_mtime)
        except OSError:
            continue
    return newest


def clean_stale_tmp(root: Path, grace_s: float, now: float | None = None) -> list[str]:
    """Remove the temporary entries of writers that are gone; return the names removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    # directories first: a directory's lock file is decided with it, not as an orphan
    entries.sort(key=lambda e: not e.is_dir())
    for entry in entries:
        name = entry.name
        if not name.startswith(TMP_PREFIX):
            continue
        try:
            if entry.is_dir():
                match = _TMP_DIR.match(name)
                lock = root / f"{TMP_PREFIX}{match.group(1)}.lock" if match else None
                gone = _writer_gone(lock) if lock else None
                if gone is None:
                    gone = now - _last_change(entry) > grace_s
                if not gone:
                    continue
                shutil.rmtree(entry)
                if lock is not None:
                    lock.unlink(missing_ok=True)
            elif _TMP_LOCK.match(name) and _writer_gone(entry):
                if any(root.glob(f"{name[: -len('.lock')]}-*")):
                    continue  # its directory is younger than this listing: next time
                entry.unlink(missing_ok=True)  # a writer killed before or after its directory
            else:
                continue
        except OSError as exc:  # read-only store, or another process cleaning too
            log.debug("could not remove %s: %s", entry, exc)
            continue
        removed.append(name)
    if removed:
        log.warning("removed %d temporary entries of ended writers: %s", len(removed), removed)
    return removed


def _quarantined_ms(entry: Path) -> float:
    try:
        return float(json.loads((entry / "reason.json").read_text())["quarantined_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        try:
            return entry.stat().st_mtime * 1000
        except OSError:
            return 0.0


def prune_quarantine(
    qdir: Path, keep: int, max_age_s: float, now: float | None = None
) -> list[str]:
    """Drop quarantined entries beyond the newest ``keep`` or older than ``max_age_s``."""
    if not qdir.is_dir():
        return []
    now_ms = (time.time() if now is None else now) * 1000
    entries = sorted(
        ((_quarantined_ms(e), e) for e in qdir.iterdir() if e.is_dir()),
        key=lambda pair: (pair[0], pair[1].name),
        reverse=True,  # newest first
    )
    drop = []
    for index, (stamp, entry) in enumerate(entries):
        too_many = keep > 0 and index >= keep
        too_old = max_age_s > 0 and now_ms - stamp > max_age_s * 1000
        if too_many or too_old:
            drop.append(entry)
    for entry in drop:
        shutil.rmtree(entry, ignore_errors=True)
    if drop:
        log.info("quarantine retention removed %d entries", len(drop))
    return [e.name for e in drop]
