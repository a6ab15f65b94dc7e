"""Reading an expert from the store, verified: its manifest validated, its weights
memory-mapped, size and sha256 checked against the manifest, and the tensors views of that
same mapping (no second read, nothing between the check and the use). A local copy that
fails is fetched again before anything is refused."""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING

from experts.expert import Expert, ExpertConfigError
from experts.manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, NewerManifest
from experts.store_files import MANIFEST, WEIGHTS, StoreUnavailable
from experts.store_refusals import ExpertRefused
from experts.store_safetensors import header_length, parse_safetensors
from worx.ids import UnsafeIdError, validate_id

if TYPE_CHECKING:
    from experts.store import ExpertStore

log = logging.getLogger("experts.store")

MAX_MANIFEST_READ = MAX_MANIFEST_BYTES + 1  # one byte past the limit: "too large" is seen


def manifest(store: ExpertStore, expert_id: str) -> Manifest:
    """:meth:`experts.store.ExpertStore.manifest`."""
    try:
        validate_id(expert_id, kind="expert_id")
    except UnsafeIdError as exc:
        refused = ExpertRefused("unsafe_id", str(expert_id), str(exc))
        if isinstance(expert_id, str) and expert_id in store:
            refused = store._refuse(refused)
        raise refused from exc
    if not store.backend.has(expert_id):
        raise ExpertRefused("missing", expert_id, f"no expert {expert_id!r} in store {store.where}")
    try:
        found = Manifest.parse(store.backend.read_manifest(expert_id, MAX_MANIFEST_READ))
    except FileNotFoundError:
        raise store._refuse(
            ExpertRefused("bad_manifest", expert_id, f"{MANIFEST} is missing")
        ) from None
    except NewerManifest as exc:
        raise store._refuse(ExpertRefused("newer_schema", expert_id, str(exc))) from exc
    except ManifestError as exc:
        raise store._refuse(ExpertRefused("bad_manifest", expert_id, str(exc))) from exc
    except StoreUnavailable:
        raise  # the bucket, not the entry: nothing to refuse
    except OSError as exc:  # a directory named manifest.json, unreadable bytes
        detail = f"{MANIFEST} cannot be read: {exc}"
        raise store._refuse(ExpertRefused("bad_manifest", expert_id, detail)) from exc
    if found.expert_id != expert_id:
        detail = f"manifest names expert {found.expert_id!r} but sits in directory {expert_id!r}"
        raise store._refuse(ExpertRefused("bad_manifest", expert_id, detail))
    if store.trunk_fingerprint is not None and found.trunk_fingerprint != store.trunk_fingerprint:
        detail = (
            f"built on trunk {found.trunk_fingerprint[:12]}..., this trunk is "
            f"{store.trunk_fingerprint[:12]}...; an expert only loads onto its own trunk"
        )
        raise store._refuse(ExpertRefused("wrong_trunk", expert_id, detail))
    store._skipped.pop(expert_id, None)
    return found


def load(store: ExpertStore, expert_id: str, refresh: bool = False) -> tuple[Expert, int]:
    """Verified load; ``refresh``: a caching backend fetches the bytes afresh."""
    entry = store.manifest(expert_id)
    while True:
        try:
            path, fresh = store.backend.weights_file(expert_id, entry.size_bytes, refresh)
        except FileNotFoundError:
            raise store._refuse(
                ExpertRefused("truncated", expert_id, f"{WEIGHTS} is missing")
            ) from None
        try:
            return load_verified(path, entry)
        except Damaged as damage:
            if not fresh:  # a local copy: the bucket's bytes decide, not the copy's
                log.warning(
                    "local copy of expert %s failed its checks (%s): fetching it again",
                    expert_id,
                    damage.detail,
                )
                store.refetches += 1
                refresh = True
                continue
            raise store._refuse(ExpertRefused(damage.reason, expert_id, damage.detail)) from None
        except Exception as exc:  # noqa: BLE001 - whatever hostile bytes raise is corruption
            detail = f"{WEIGHTS} cannot be loaded ({type(exc).__name__}: {exc})"
            raise store._refuse(ExpertRefused("corrupt", expert_id, detail)) from exc


class Damaged(Exception):
    """Weights bytes that fail a check: (reason, detail); refused by the caller."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(reason, detail)


def load_verified(path: Path, manifest: Manifest) -> tuple[Expert, int]:
    """The expert in ``path`` and its size, checked against ``manifest``; else
    :class:`Damaged`."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise Damaged("truncated", f"{WEIGHTS} is missing") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size < manifest.size_bytes:
            detail = f"{WEIGHTS} has {size} bytes, the manifest says {manifest.size_bytes}"
            raise Damaged("truncated", detail)
        if size > manifest.size_bytes:
            detail = f"{WEIGHTS} has {size} bytes, more than the manifest's {manifest.size_bytes}"
            raise Damaged("corrupt", detail)
        try:  # the header length, before hashing or parsing anything
            header_length(handle.read(8), size)
        except ValueError as exc:
            raise Damaged("corrupt", str(exc)) from exc
        mapped = mmap.mmap(
            handle.fileno(), 0, access=mmap.ACCESS_COPY
        )  # private: never writes back
    sha = hashlib.sha256(mapped).hexdigest()
    if sha != manifest.sha256:
        detail = (
            f"sha256 of {WEIGHTS} is {sha[:12]}..., the manifest says {manifest.sha256[:12]}..."
        )
        raise Damaged("corrupt", detail)
    try:
        tensors, _ = parse_safetensors(mapped, size)
        expert = Expert.from_tensors(manifest.expert_config(), manifest.hidden_size, tensors)
    except ValueError as exc:  # ExpertConfigError is a ValueError
        reason = "bad_manifest" if isinstance(exc, ExpertConfigError) else "corrupt"
        raise Damaged(reason, str(exc)) from exc
    return expert, size


def weights_path(store: ExpertStore, expert_id: str) -> Path:
    """:meth:`experts.store.ExpertStore.weights_path`."""
    validate_id(expert_id, kind="expert_id")
    if not store.backend.caches:
        return store.root / expert_id / WEIGHTS
    size = store.manifest(expert_id).size_bytes
    try:
        return store.backend.weights_file(expert_id, size, refresh=False)[0]
    except FileNotFoundError:
        return store.root / expert_id / WEIGHTS  # the caller finds it missing
