"""The write-once expert store: ``<root>/<expert_id>/weights.safetensors`` + ``manifest.json``.

The root is a directory or an S3-compatible bucket (:mod:`experts.store_open` picks one
from ``experts.store_url``); this module holds every rule, a backend only moves bytes
(:mod:`experts.store_files`, :mod:`experts.object_store`).

* Write-once: the directory backend renames a complete, fsynced temporary directory onto
  ``<root>/<expert_id>``; the bucket backend puts each object with ``If-None-Match: *``,
  the manifest last. Either way, of two writers of one id exactly one wins, and readers see
  all of an entry or nothing. Putting an existing id with the same sha256 is a no-op; with
  another sha256 it is refused.
* Verified on every load: the weights file (the store's own, or the bucket backend's local
  copy) is memory-mapped, its size and sha256 are checked against the manifest, and the
  tensors are views of that same mapping (no second read, nothing between the check and
  the use). A local copy that fails is fetched again before anything is refused.
* Refusals (:class:`ExpertRefused`) carry one ``reason`` of :data:`REASONS`. An entry that
  fails its integrity checks (hash, size, undecodable bytes) is quarantined: moved to
  ``<root>/.quarantine/<name>-<ms>/`` with ``reason.json``. An intact entry this reader
  cannot use (:data:`SKIPPED`: another trunk's, or a newer manifest schema) is skipped,
  logged once and listed by :meth:`ExpertStore.skipped`, and never moved: the store may be
  shared by readers of several trunks and builds.
* Housekeeping on open: temporary entries of writers that are gone are removed; the
  quarantine keeps a bounded number of entries.
* Loaded experts sit in an LRU cache bounded in bytes, so the store can hold far more
  experts than memory.

(Over 400 lines on purpose: the write path, the verified read path, the quarantine and the
safetensors header parser share one set of refusal reasons and checks; split apart, each
check would live far from the guarantee it keeps.)

Example
-------
>>> store = ExpertStore(tmp, trunk.fingerprint, lru_budget_bytes=64 << 20)  # doctest: +SKIP
>>> manifest = store.put("legal-1", expert, "legal", centroid)  # doctest: +SKIP
>>> store.get("legal-1")  # verified, memory-mapped  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as save_safetensors

from experts.expert import Expert, ExpertConfigError
from experts.manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, NewerManifest
from experts.store_files import (
    MANIFEST,
    QUARANTINE,  # noqa: F401 - part of this module's interface
    WEIGHTS,
    DirectoryBackend,
    StoreBackend,
    StoreUnavailable,
    WriteConflict,
)
from worx.ids import UnsafeIdError, validate_id

log = logging.getLogger(__name__)

REASONS = (
    "corrupt",
    "truncated",
    "bad_manifest",
    "unsafe_id",
    "wrong_trunk",
    "newer_schema",
    "duplicate_id",
    "missing",
)
SKIPPED = frozenset({"wrong_trunk", "newer_schema"})  # intact entries this reader cannot use
# safetensors dtype names -> torch dtypes (also used by trainer/mmap_weights.py)
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
MAX_MANIFEST_READ = MAX_MANIFEST_BYTES + 1  # one byte past the limit: "too large" is seen
MAX_HEADER_BYTES = 1 << 20  # a safetensors header larger than this is not one of ours


class ExpertRefused(Exception):
    """An expert that will not be stored or loaded, and why.

    Attributes
    ----------
    reason : str
        One of :data:`REASONS`.
    expert_id : str
        The id as given (possibly unsafe: never use it as a path).
    quarantined : Path, str or None
        Where the refused entry was moved (a directory, or an ``s3://`` prefix), if it was.
    """

    def __init__(
        self, reason: str, expert_id: str, detail: str, quarantined: Path | str | None = None
    ) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        self.expert_id = expert_id
        self.detail = detail
        self.quarantined = quarantined
        super().__init__(reason, expert_id, detail)

    def __str__(self) -> str:
        where = f" (quarantined to {self.quarantined})" if self.quarantined else ""
        return f"expert {self.expert_id!r} refused [{self.reason}]: {self.detail}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "expert_id": self.expert_id,
            "reason": self.reason,
            "detail": self.detail,
            "quarantined": str(self.quarantined) if self.quarantined else None,
        }


@dataclass
class VerifyReport:
    """Outcome of re-hashing every expert in the store."""

    ok: list[str] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)  # ExpertRefused.to_dict() items

    @property
    def checked(self) -> int:
        return len(self.ok) + len(self.refused)

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "ok": self.ok, "refused": self.refused}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _header_length(prefix: bytes, size: int) -> int:
    """The safetensors header length the 8-byte ``prefix`` announces, checked against
    :data:`MAX_HEADER_BYTES` and the file's ``size``; ValueError if it does not fit."""
    if size < 8 or len(prefix) < 8:
        raise ValueError(f"file of {size} bytes is too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", prefix[:8])
    if header_len > min(MAX_HEADER_BYTES, size - 8):
        raise ValueError(
            f"header length {header_len} does not fit in a file of {size} bytes "
            f"(at most {MAX_HEADER_BYTES} bytes of header are read)"
        )
    return header_len


def check_safetensors_header(path: str | os.PathLike[str]) -> None:
    """Refuse (ValueError) a file whose header is too long to parse, before a library does."""
    with open(path, "rb") as handle:
        _header_length(handle.read(8), os.fstat(handle.fileno()).st_size)


def _parse_safetensors(buf: Any, size: int) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors viewing ``buf`` (a writable buffer of ``size`` bytes) and the file's metadata.

    Raises ValueError describing the first structural problem found (other exceptions
    are possible for hostile headers; the caller treats any of them as corruption).
    """
    header_len = _header_length(bytes(buf[:8]), size)
    try:
        header = json.loads(bytes(buf[8 : 8 + header_len]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + header_len
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        try:
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"tensor {name!r} has a malformed header entry") from exc
        count = 1
        for dim in shape:
            count *= dim
        itemsize = torch.empty((), dtype=dtype).element_size()
        if begin < 0 or end != begin + count * itemsize or base + end > size:
            raise ValueError(f"tensor {name!r} data [{begin}, {end}) is out of bounds or mis-sized")
        flat = (
            torch.frombuffer(buf, dtype=dtype, count=count, offset=base + begin)
            if count
            else torch.empty(0, dtype=dtype)
        )
        tensors[name] = flat.view(shape)
    return tensors, metadata


class _Damaged(Exception):
    """Weights bytes that fail a check: (reason, detail); refused by the caller."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(reason, detail)


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
        self.lru_budget_bytes = int(lru_budget_bytes)
        self.quarantine_enabled = quarantine
        self.quarantine_keep = int(quarantine_keep)
        self.quarantine_max_age_s = float(quarantine_max_age_s)
        self._skipped: dict[str, ExpertRefused] = {}  # expert_id -> why this reader skips it
        self._cache: OrderedDict[str, tuple[Expert, int]] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self.loads = 0  # verified loads (cache misses)
        self.hits = 0
        self.refetches = 0  # local copies that failed their checks and were fetched again
        if self.backend.exists():
            self.backend.housekeeping(stale_tmp_after_s)
            self._prune_quarantine()

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
        if self.trunk_fingerprint is None:
            raise ValueError("this store was opened without a trunk fingerprint; it cannot write")
        try:
            validate_id(expert_id, kind="expert_id")
        except UnsafeIdError as exc:
            raise ExpertRefused("unsafe_id", str(expert_id), str(exc)) from exc
        tensors = expert.tensors()
        # One metadata key only: safetensors writes metadata from a hash map, so with several
        # keys their order (and the file's sha256) would change from one write to the next.
        described = {
            "expert_id": expert_id,
            "config": expert.config.to_dict(),
            "hidden_size": expert.hidden_size,
        }
        metadata = {"worx_expert": json.dumps(described, sort_keys=True)}
        data = save_safetensors(tensors, metadata=metadata)
        sha = hashlib.sha256(data).hexdigest()
        manifest = Manifest(
            expert_id=expert_id,
            domain_id=domain_id,
            centroid=[float(v) for v in centroid],
            trunk_fingerprint=self.trunk_fingerprint,
            config=expert.config.to_dict(),
            hidden_size=expert.hidden_size,
            sha256=sha,
            size_bytes=len(data),
            num_params=expert.num_params(),
            parent_expert_id=parent_expert_id,
            job_id=job_id,
            summary=dict(summary or {}),
            created_ms=_now_ms() if created_ms is None else int(created_ms),
        )
        try:
            manifest.check()
        except ManifestError as exc:
            raise ExpertRefused("bad_manifest", expert_id, str(exc)) from exc
        if self.backend.has(expert_id):
            return self._same_or_refuse(expert_id, sha)
        body = json.dumps(manifest.to_dict(), indent=2, sort_keys=True).encode()
        try:
            written = self.backend.write_once(expert_id, data, body, sha)
        except WriteConflict as exc:
            detail = f"{exc}; experts are write-once: register it under a new id"
            raise ExpertRefused("duplicate_id", expert_id, detail) from exc
        if not written:  # another writer got there first
            return self._same_or_refuse(expert_id, sha)
        log.info(
            "stored expert %s (%d params, sha256 %s)", expert_id, manifest.num_params, sha[:12]
        )
        return manifest

    def _same_or_refuse(self, expert_id: str, sha: str) -> Manifest:
        existing = self.manifest(expert_id)
        if existing.sha256 != sha:
            raise ExpertRefused(
                "duplicate_id",
                expert_id,
                f"an expert with this id is already stored with sha256 {existing.sha256[:12]}..., "
                f"this one has {sha[:12]}...; experts are write-once: register it under a new id",
            )
        log.info("expert %s already stored with the same sha256: no-op", expert_id)
        return existing

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
        try:
            validate_id(expert_id, kind="expert_id")
        except UnsafeIdError as exc:
            refused = ExpertRefused("unsafe_id", str(expert_id), str(exc))
            if isinstance(expert_id, str) and expert_id in self:
                refused = self._refuse(refused)
            raise refused from exc
        if not self.backend.has(expert_id):
            raise ExpertRefused(
                "missing", expert_id, f"no expert {expert_id!r} in store {self.where}"
            )
        try:
            manifest = Manifest.parse(self.backend.read_manifest(expert_id, MAX_MANIFEST_READ))
        except FileNotFoundError:
            raise self._refuse(
                ExpertRefused("bad_manifest", expert_id, f"{MANIFEST} is missing")
            ) from None
        except NewerManifest as exc:
            raise self._refuse(ExpertRefused("newer_schema", expert_id, str(exc))) from exc
        except ManifestError as exc:
            raise self._refuse(ExpertRefused("bad_manifest", expert_id, str(exc))) from exc
        except StoreUnavailable:
            raise  # the bucket, not the entry: nothing to refuse
        except OSError as exc:  # a directory named manifest.json, unreadable bytes
            detail = f"{MANIFEST} cannot be read: {exc}"
            raise self._refuse(ExpertRefused("bad_manifest", expert_id, detail)) from exc
        if manifest.expert_id != expert_id:
            detail = (
                f"manifest names expert {manifest.expert_id!r} but sits in directory {expert_id!r}"
            )
            raise self._refuse(ExpertRefused("bad_manifest", expert_id, detail))
        if (
            self.trunk_fingerprint is not None
            and manifest.trunk_fingerprint != self.trunk_fingerprint
        ):
            detail = (
                f"built on trunk {manifest.trunk_fingerprint[:12]}..., this trunk is "
                f"{self.trunk_fingerprint[:12]}...; an expert only loads onto its own trunk"
            )
            raise self._refuse(ExpertRefused("wrong_trunk", expert_id, detail))
        self._skipped.pop(expert_id, None)
        return manifest

    def get(self, expert_id: str) -> Expert:
        """The expert, from the LRU cache or loaded (memory-mapped, sha256-verified).

        Raises
        ------
        ExpertRefused
            Any reason of :meth:`manifest`, or ``truncated``/``corrupt`` weights
            (quarantined). Nothing is cached for a refused expert.
        """
        with self._lock:
            cached = self._cache.get(expert_id)
            if cached is not None:
                self._cache.move_to_end(expert_id)
                self.hits += 1
                return cached[0]
        expert, nbytes = self._load(expert_id)
        with self._lock:
            if expert_id not in self._cache:
                self._cache[expert_id] = (expert, nbytes)
                self._cached_bytes += nbytes
                self.loads += 1
            self._cache.move_to_end(expert_id)
            while self._cached_bytes > self.lru_budget_bytes and len(self._cache) > 1:
                _, (_, evicted) = self._cache.popitem(last=False)
                self._cached_bytes -= evicted
            return self._cache[expert_id][0]

    def _load(self, expert_id: str, refresh: bool = False) -> tuple[Expert, int]:
        """Verified load; ``refresh``: a caching backend fetches the bytes afresh."""
        manifest = self.manifest(expert_id)
        while True:
            try:
                path, fresh = self.backend.weights_file(expert_id, manifest.size_bytes, refresh)
            except FileNotFoundError:
                raise self._refuse(
                    ExpertRefused("truncated", expert_id, f"{WEIGHTS} is missing")
                ) from None
            try:
                return self._load_verified(path, manifest)
            except _Damaged as damage:
                if not fresh:  # a local copy: the bucket's bytes decide, not the copy's
                    log.warning(
                        "local copy of expert %s failed its checks (%s): fetching it again",
                        expert_id,
                        damage.detail,
                    )
                    self.refetches += 1
                    refresh = True
                    continue
                raise self._refuse(ExpertRefused(damage.reason, expert_id, damage.detail)) from None
            except Exception as exc:  # noqa: BLE001 - whatever hostile bytes raise is corruption
                detail = f"{WEIGHTS} cannot be loaded ({type(exc).__name__}: {exc})"
                raise self._refuse(ExpertRefused("corrupt", expert_id, detail)) from exc

    @staticmethod
    def _load_verified(path: Path, manifest: Manifest) -> tuple[Expert, int]:
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            raise _Damaged("truncated", f"{WEIGHTS} is missing") from None
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size < manifest.size_bytes:
                detail = f"{WEIGHTS} has {size} bytes, the manifest says {manifest.size_bytes}"
                raise _Damaged("truncated", detail)
            if size > manifest.size_bytes:
                detail = (
                    f"{WEIGHTS} has {size} bytes, more than the manifest's {manifest.size_bytes}"
                )
                raise _Damaged("corrupt", detail)
            try:  # the header length, before hashing or parsing anything
                _header_length(handle.read(8), size)
            except ValueError as exc:
                raise _Damaged("corrupt", str(exc)) from exc
            mapped = mmap.mmap(
                handle.fileno(), 0, access=mmap.ACCESS_COPY
            )  # private: never writes back
        sha = hashlib.sha256(mapped).hexdigest()
        if sha != manifest.sha256:
            detail = (
                f"sha256 of {WEIGHTS} is {sha[:12]}..., the manifest says {manifest.sha256[:12]}..."
            )
            raise _Damaged("corrupt", detail)
        try:
            tensors, _ = _parse_safetensors(mapped, size)
            expert = Expert.from_tensors(manifest.expert_config(), manifest.hidden_size, tensors)
        except ValueError as exc:  # ExpertConfigError is a ValueError
            reason = "bad_manifest" if isinstance(exc, ExpertConfigError) else "corrupt"
            raise _Damaged(reason, str(exc)) from exc
        return expert, size

    def weights_path(self, expert_id: str) -> Path:
        """The local file holding ``expert_id``'s weights, unverified (:meth:`get` verifies):
        the store's own, or a bucket's local copy, fetched first if there is none.

        Raises UnsafeIdError for an id that could name a path outside the store, and
        ExpertRefused (a bucket's entry only) as :meth:`manifest` does.
        """
        validate_id(expert_id, kind="expert_id")
        if not self.backend.caches:
            return self.root / expert_id / WEIGHTS
        size = self.manifest(expert_id).size_bytes
        try:
            return self.backend.weights_file(expert_id, size, refresh=False)[0]
        except FileNotFoundError:
            return self.root / expert_id / WEIGHTS  # the caller finds it missing

    def cache_info(self) -> dict[str, int]:
        with self._lock:
            return {
                "cached_experts": len(self._cache),
                "cached_bytes": self._cached_bytes,
                "budget_bytes": self.lru_budget_bytes,
                "loads": self.loads,
                "hits": self.hits,
                "refetches": self.refetches,
            }

    def cached_ids(self) -> list[str]:
        """Ids held in the LRU cache, least recently used first."""
        with self._lock:
            return list(self._cache)

    def evict(self, expert_id: str) -> None:
        with self._lock:
            cached = self._cache.pop(expert_id, None)
            if cached is not None:
                self._cached_bytes -= cached[1]

    # ------------------------------------------------------------------ verify / quarantine
    def verify(self, quarantine: bool | None = None) -> VerifyReport:
        """Re-hash and re-validate every entry (bypassing the cache and any local copy);
        report each outcome. ``quarantine`` overrides the store's setting for this call.
        """
        saved = self.quarantine_enabled
        if quarantine is not None:
            self.quarantine_enabled = quarantine
        report = VerifyReport()
        try:
            for expert_id in self.ids():
                try:
                    self._load(expert_id, refresh=True)
                except ExpertRefused as exc:
                    report.refused.append(exc.to_dict())
                else:
                    report.ok.append(expert_id)
        finally:
            self.quarantine_enabled = saved
        return report

    def skipped(self) -> list[dict[str, Any]]:
        """Intact entries this reader leaves alone (:data:`SKIPPED` reasons), as last seen."""
        return [self._skipped[k].to_dict() for k in sorted(self._skipped)]

    def _refuse(self, refused: ExpertRefused) -> ExpertRefused:
        """Quarantine the entry behind ``refused`` (if enabled and present, and the reason
        is an integrity failure), or note it as skipped; return it."""
        self.evict(refused.expert_id)
        name = refused.expert_id
        if refused.reason in SKIPPED:
            if name not in self._skipped:
                log.warning("%s; left in place", refused)
            self._skipped[name] = refused
            return refused
        if not self.quarantine_enabled or name not in self:
            log.warning("%s", refused)
            return refused
        try:
            dest = self.backend.quarantine(name)
        except OSError as exc:  # another process moved it first
            log.warning("could not quarantine %s in %s: %s", name, self.where, exc)
            return refused
        if dest is None:
            return refused
        refused.quarantined = dest
        self.backend.write_reason(dest, {**refused.to_dict(), "quarantined_ms": _now_ms()})
        log.error("%s", refused)
        self._prune_quarantine()
        return refused

    def _prune_quarantine(self) -> None:
        self.backend.prune_quarantine(self.quarantine_keep, self.quarantine_max_age_s)

    def quarantined(self) -> list[dict[str, Any]]:
        """``reason.json`` of every quarantined entry."""
        return self.backend.quarantined()


def sha256_of(path: str | os.PathLike[str]) -> str:
    """sha256 hex of a file (what the manifest records for ``weights.safetensors``)."""
    return _sha256_file(Path(path))
