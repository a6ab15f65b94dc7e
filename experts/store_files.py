"""The expert store's byte I/O: the interface both backends speak, and the directory one.

:class:`experts.store.ExpertStore` holds every rule (ids, manifests, sha256, refusals,
quarantine, the LRU); a backend only moves bytes. Two exist: :class:`DirectoryBackend`
(files, ``<root>/<expert_id>/``) and :class:`experts.object_store.S3Backend` (objects in
an S3-compatible bucket, read through a local cache directory).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Protocol

from experts.store_housekeeping import WriterLock, clean_stale_tmp, prune_quarantine
from worx.atomic import atomic_write_json, fsync_dir

WEIGHTS = "weights.safetensors"
MANIFEST = "manifest.json"
QUARANTINE = ".quarantine"
REASON = "reason.json"


class StoreUnavailable(OSError):
    """The store's medium cannot be used (a bucket missing, refused, unreachable): not the
    entry's fault, so nothing is refused or quarantined for it."""


class WriteConflict(Exception):
    """Another writer holds this id with other bytes and has not finished: refuse, do not wait."""


class StoreBackend(Protocol):
    """Where an expert store's bytes live. Names reach a backend unvalidated only through
    ``has``/``read_manifest``/``quarantine`` (never containing ``/``, ``\\``, NUL or a
    leading ``.``); everything else gets ids that :func:`worx.ids.validate_id` accepted."""

    where: str  # for messages: the directory or the s3:// URL
    local_root: Path  # the directory the weights files are memory-mapped from
    caches: bool  # weights_file may answer from a local copy a fresh fetch would replace

    def exists(self) -> bool: ...
    def names(self) -> list[str]: ...
    def has(self, name: str) -> bool: ...
    def read_manifest(self, name: str, limit: int) -> bytes: ...
    def weights_file(self, name: str, size_bytes: int, refresh: bool) -> tuple[Path, bool]: ...
    def write_once(self, name: str, weights: bytes, manifest: bytes, sha256: str) -> bool: ...
    def quarantine(self, name: str) -> Path | str | None: ...
    def write_reason(self, where: Path | str, reason: dict) -> None: ...
    def quarantined(self) -> list[dict]: ...
    def prune_quarantine(self, keep: int, max_age_s: float) -> None: ...
    def housekeeping(self, stale_after_s: float) -> None: ...


def now_ms() -> int:
    return int(time.time() * 1000)


def quarantine_name(name: str) -> str:
    return f"{name}-{now_ms()}-{uuid.uuid4().hex[:6]}"


class DirectoryBackend:
    """``<root>/<expert_id>/weights.safetensors`` + ``manifest.json``; write-once by renaming
    a complete, fsynced temporary directory onto the entry's name (one writer wins)."""

    caches = False

    def __init__(self, root: str | os.PathLike[str], create: bool = True) -> None:
        self.local_root = Path(root)
        self.where = str(self.local_root)
        if create:
            self.local_root.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        return self.local_root.is_dir()

    def names(self) -> list[str]:
        if not self.local_root.is_dir():
            return []
        return sorted(
            p.name for p in self.local_root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def has(self, name: str) -> bool:
        return (self.local_root / name).is_dir()

    def read_manifest(self, name: str, limit: int) -> bytes:
        with (self.local_root / name / MANIFEST).open("rb") as handle:
            return handle.read(limit)

    def weights_file(self, name: str, size_bytes: int, refresh: bool) -> tuple[Path, bool]:
        return self.local_root / name / WEIGHTS, True

    def write_once(self, name: str, weights: bytes, manifest: bytes, sha256: str) -> bool:
        """Write the entry; False if ``name`` already exists (nothing written)."""
        root = self.local_root
        root.mkdir(parents=True, exist_ok=True)
        target = root / name
        with WriterLock(root, name) as tmp:
            tmp.mkdir()
            try:
                _write_synced(tmp / WEIGHTS, weights)
                _write_synced(tmp / MANIFEST, manifest)
                fsync_dir(tmp)
                try:
                    os.rename(tmp, target)  # atomic; fails if another writer got there first
                except OSError:
                    if target.exists():
                        return False
                    raise
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        fsync_dir(root)
        return True

    def quarantine(self, name: str) -> Path:
        qdir = self.local_root / QUARANTINE
        qdir.mkdir(exist_ok=True)
        dest = qdir / quarantine_name(name)
        os.rename(self.local_root / name, dest)  # OSError: another process moved it first
        fsync_dir(self.local_root)
        return dest

    def write_reason(self, where: Path | str, reason: dict) -> None:
        atomic_write_json(Path(where) / REASON, reason)

    def quarantined(self) -> list[dict]:
        qdir = self.local_root / QUARANTINE
        out = []
        for entry in sorted(qdir.iterdir()) if qdir.is_dir() else []:
            try:
                out.append(json.loads((entry / REASON).read_text()))
            except (OSError, json.JSONDecodeError):
                out.append(
                    {"expert_id": entry.name, "reason": "unknown", "detail": "no reason.json"}
                )
        return out

    def prune_quarantine(self, keep: int, max_age_s: float) -> None:
        prune_quarantine(self.local_root / QUARANTINE, keep, max_age_s)

    def housekeeping(self, stale_after_s: float) -> None:
        if self.local_root.is_dir():
            clean_stale_tmp(self.local_root, stale_after_s)


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
