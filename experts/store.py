"""The write-once expert store: ``<root>/<expert_id>/weights.safetensors`` + ``manifest.json``.

The root is a directory or an S3-compatible bucket (:mod:`experts.store_open` picks one
from ``experts.store_url``); the store holds every rule, a backend only moves bytes
(:mod:`experts.store_files`, :mod:`experts.object_store`). :class:`ExpertStore` is the
composition its callers use; each job is a module of its own:

* Write-once (:mod:`experts.store_write`): the directory backend renames a complete,
  fsynced temporary directory onto ``<root>/<expert_id>``; the bucket backend puts each
  object with ``If-None-Match: *``, the manifest last. Either way, of two writers of one id
  exactly one wins, and readers see all of an entry or nothing. Putting an existing id with
  the same sha256 is a no-op; with another sha256 it is refused.
* Verified on every load (:mod:`experts.store_read`, :mod:`experts.store_safetensors`):
  the weights file (the store's own, or the bucket backend's local copy) is memory-mapped,
  its size and sha256 are checked against the manifest, and the tensors are views of that
  same mapping (no second read, nothing between the check and the use). A local copy that
  fails is fetched again before anything is refused.
* Refusals (:class:`ExpertRefused`, :mod:`experts.store_refusals`) carry one ``reason`` of
  :data:`REASONS`. An entry that fails its integrity checks (hash, size, undecodable bytes)
  is quarantined (:mod:`experts.store_quarantine`): moved to
  ``<root>/.quarantine/<name>-<ms>/`` with ``reason.json``. An intact entry this reader
  cannot use (:data:`SKIPPED`: another trunk's, or a newer manifest schema) is skipped,
  logged once and listed by :meth:`ExpertStore.skipped`, and never moved: the store may be
  shared by readers of several trunks and builds.
* Housekeeping on open: temporary entries of writers that are gone are removed; the
  quarantine keeps a bounded number of entries.
* Loaded experts sit in an LRU cache bounded in bytes (:mod:`experts.store_cache`), so the
  store can hold far more experts than memory.

Example
-------
>>> store = ExpertStore(tmp, trunk.fingerprint, lru_budget_bytes=64 << 20)  # doctest: +SKIP
>>> manifest = store.put("legal-1", expert, "legal", centroid)  # doctest: +SKIP
>>> store.get("legal-1")  # verified, memory-mapped  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experts import store_quarantine, store_read, store_write
from experts.expert import Expert
from experts.manifest import Manifest
from experts.store_cache import ExpertCache
from experts.store_files import MANIFEST, QUARANTINE, WEIGHTS, DirectoryBackend, StoreBackend
from experts.store_read import MAX_MANIFEST_READ
from experts.store_refusals import REASONS, SKIPPED, ExpertRefused, VerifyReport
from experts.store_safetensors import (
    MAX_HEADER_BYTES,
    SAFETENSORS_DTYPES,
    check_safetensors_header,
    sha256_of,
)

__all__ = [
    "MANIFEST",
    "MAX_HEADER_BYTES",
    "MAX_MANIFEST_READ",
    "QUARANTINE",
    "REASONS",
    "SAFETENSORS_DTYPES",
    "SKIPPED",
    "WEIGHTS",
    "ExpertRefused",
    "ExpertStore",
    "VerifyReport",
    "check_safetensors_header",
    "sha256_of",
]


class ExpertStore:
    """Write-once, verified, lazily loaded expert store rooted at ``root``.

    Parameters
    ----------
    root : path or StoreBackend
        Store directory, or a backend (:class:`experts.object_store.S3Backend`; open one
        with :func:`experts.store_open.open_store`). A directory is created if missing with
        ``create`` (writers); without (readers) it looks empty until a writer makes it.
    trunk_fingerprint : str or None
        The trunk experts must have been built on; ``None`` (inspection only) skips that
        check and forbids :meth:`put`.
    lru_budget_bytes : int
        Upper bound on the bytes of loaded experts kept in memory (the most recently used
        expert is always kept, even if alone it is larger).
    quarantine : bool
        Move entries that fail integrity checks aside (default) instead of leaving them.
    quarantine_keep, quarantine_max_age_s : int, float
        Retention of ``.quarantine``: the newest ``quarantine_keep`` entries, none older
        than ``quarantine_max_age_s`` (0: no limit), applied on open and on every move.
    stale_tmp_after_s : float
        A writer's temporary entry (a lock-less ``.tmp-*`` directory, a bucket's weights
        object no manifest committed) is removed on open once unchanged this long (a
        directory with a lock file: as soon as its writer is gone).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | StoreBackend,
        trunk_fingerprint: str | None,
        lru_budget_bytes: int = 512 << 20,
        quarantine: bool = True,
        quarantine_keep: int = 100,
        quarantine_max_age_s: float = 30 * 86400,
        stale_tmp_after_s: float = 3600,
        create: bool = True,
    ) -> None:
        if isinstance(root, (str, os.PathLike)):
            root = DirectoryBackend(root, create=create)
        self.backend: StoreBackend = root
        self.root = root.local_root  # where weights files are mapped from (a cache for a bucket)
        self.where = root.where
        self.trunk_fingerprint = trunk_fingerprint
        self.quarantine_enabled = quarantine
        self.quarantine_keep = int(quarantine_keep)
        self.quarantine_max_age_s = float(quarantine_max_age_s)
        self._skipped: dict[str, ExpertRefused] = {}  # expert_id -> why this reader skips it
        self._cache = ExpertCache(lru_budget_bytes)
        self.refetches = 0  # local copies that failed their checks and were fetched again
        if self.backend.exists():
            self.backend.housekeeping(stale_tmp_after_s)
            self._prune_quarantine()

    @property
    def lru_budget_bytes(self) -> int:
        return self._cache.budget_bytes

    @property
    def loads(self) -> int:
        """Verified loads (cache misses)."""
        return self._cache.loads

    @property
    def hits(self) -> int:
        return self._cache.hits

    # ------------------------------------------------------------------ write
    def put(
        self,
        expert_id: str,
        expert: Expert,
        domain_id: str,
        centroid: Sequence[float],
        parent_expert_id: str | None = None,
        summary: dict | None = None,
        job_id: str | None = None,
        created_ms: int | None = None,
    ) -> Manifest:
        """Write ``expert`` once; return its manifest.

        Raises
        ------
        ExpertRefused
            ``unsafe_id`` for an id that cannot name a directory, ``bad_manifest`` for
            invalid fields, ``duplicate_id`` if ``expert_id`` exists with another sha256
            (or another writer is writing it with other bytes).
        """
        return store_write.put(
            self,
            expert_id,
            expert,
            domain_id,
            centroid,
            parent_expert_id,
            summary,
            job_id,
            created_ms,
        )

    # ------------------------------------------------------------------ read
    def ids(self) -> list[str]:
        """Ids of every entry (not starting with '.'), sorted; unverified."""
        return self.backend.names()

    def __contains__(self, expert_id: object) -> bool:
        """True if ``expert_id`` names an entry directly under the root (even an unsafe name)."""
        if not isinstance(expert_id, str) or not expert_id or expert_id.startswith("."):
            return False
        if "/" in expert_id or "\\" in expert_id or "\0" in expert_id:
            return False
        return self.backend.has(expert_id)

    def manifest(self, expert_id: str) -> Manifest:
        """The validated manifest of ``expert_id``.

        Raises
        ------
        ExpertRefused
            ``unsafe_id``, ``missing``, ``bad_manifest`` (quarantined), ``newer_schema``
            (skipped, left in place) or ``wrong_trunk`` (skipped, left in place) when this
            store has a trunk fingerprint and it differs.
        """
        return store_read.manifest(self, expert_id)

    def get(self, expert_id: str) -> Expert:
        """The expert, from the LRU cache or loaded (memory-mapped, sha256-verified).

        Raises
        ------
        ExpertRefused
            Any reason of :meth:`manifest`, or ``truncated``/``corrupt`` weights
            (quarantined). Nothing is cached for a refused expert.
        """
        cached = self._cache.get(expert_id)
        if cached is not None:
            return cached
        expert, nbytes = self._load(expert_id)
        return self._cache.add(expert_id, expert, nbytes)

    def _load(self, expert_id: str, refresh: bool = False) -> tuple[Expert, int]:
        """Verified load; ``refresh``: a caching backend fetches the bytes afresh."""
        return store_read.load(self, expert_id, refresh)

    def weights_path(self, expert_id: str) -> Path:
        """The local file holding ``expert_id``'s weights, unverified (:meth:`get` verifies):
        the store's own, or a bucket's local copy, fetched first if there is none.

        Raises UnsafeIdError for an id that could name a path outside the store, and
        ExpertRefused (a bucket's entry only) as :meth:`manifest` does.
        """
        return store_read.weights_path(self, expert_id)

    def cache_info(self) -> dict[str, int]:
        return {**self._cache.info(), "refetches": self.refetches}

    def cached_ids(self) -> list[str]:
        """Ids held in the LRU cache, least recently used first."""
        return self._cache.ids()

    def evict(self, expert_id: str) -> None:
        self._cache.evict(expert_id)

    # ------------------------------------------------------------------ verify / quarantine
    def verify(self, quarantine: bool | None = None) -> VerifyReport:
        """Re-hash and re-validate every entry (bypassing the cache and any local copy);
        report each outcome. ``quarantine`` overrides the store's setting for this call.
        """
        return store_quarantine.verify(self, quarantine)

    def skipped(self) -> list[dict[str, Any]]:
        """Intact entries this reader leaves alone (:data:`SKIPPED` reasons), as last seen."""
        return [self._skipped[k].to_dict() for k in sorted(self._skipped)]

    def _refuse(self, refused: ExpertRefused) -> ExpertRefused:
        """Quarantine the entry behind ``refused`` (if enabled and present, and the reason
        is an integrity failure), or note it as skipped; return it."""
        return store_quarantine.refuse(self, refused)

    def _prune_quarantine(self) -> None:
        store_quarantine.prune(self)

    def quarantined(self) -> list[dict[str, Any]]:
        """``reason.json`` of every quarantined entry."""
        return self.backend.quarantined()
