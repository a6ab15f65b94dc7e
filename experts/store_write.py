"""Writing an expert into the store once: its safetensors bytes (deterministic), its
manifest, and the write-once rule (the same sha256 again is a no-op, another is refused)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from safetensors.torch import save as save_safetensors

from experts.expert import Expert
from experts.manifest import Manifest, ManifestError
from experts.store_files import WriteConflict
from experts.store_refusals import ExpertRefused
from worx.ids import UnsafeIdError, validate_id

if TYPE_CHECKING:
    from experts.store import ExpertStore

log = logging.getLogger("experts.store")


def put(
    store: ExpertStore,
    expert_id: str,
    expert: Expert,
    domain_id: str,
    centroid: Sequence[float],
    parent_expert_id: str | None = None,
    summary: dict | None = None,
    job_id: str | None = None,
    created_ms: int | None = None,
) -> Manifest:
    """:meth:`experts.store.ExpertStore.put`."""
    if store.trunk_fingerprint is None:
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
        trunk_fingerprint=store.trunk_fingerprint,
        config=expert.config.to_dict(),
        hidden_size=expert.hidden_size,
        sha256=sha,
        size_bytes=len(data),
        num_params=expert.num_params(),
        parent_expert_id=parent_expert_id,
        job_id=job_id,
        summary=dict(summary or {}),
        created_ms=int(time.time() * 1000) if created_ms is None else int(created_ms),
    )
    try:
        manifest.check()
    except ManifestError as exc:
        raise ExpertRefused("bad_manifest", expert_id, str(exc)) from exc
    if store.backend.has(expert_id):
        return _same_or_refuse(store, expert_id, sha)
    body = json.dumps(manifest.to_dict(), indent=2, sort_keys=True).encode()
    try:
        written = store.backend.write_once(expert_id, data, body, sha)
    except WriteConflict as exc:
        detail = f"{exc}; experts are write-once: register it under a new id"
        raise ExpertRefused("duplicate_id", expert_id, detail) from exc
    if not written:  # another writer got there first
        return _same_or_refuse(store, expert_id, sha)
    log.info("stored expert %s (%d params, sha256 %s)", expert_id, manifest.num_params, sha[:12])
    return manifest


def _same_or_refuse(store: ExpertStore, expert_id: str, sha: str) -> Manifest:
    existing = store.manifest(expert_id)
    if existing.sha256 != sha:
        raise ExpertRefused(
            "duplicate_id",
            expert_id,
            f"an expert with this id is already stored with sha256 {existing.sha256[:12]}..., "
            f"this one has {sha[:12]}...; experts are write-once: register it under a new id",
        )
    log.info("expert %s already stored with the same sha256: no-op", expert_id)
    return existing
