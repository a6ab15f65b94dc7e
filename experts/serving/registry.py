"""The registry of loaded experts: the current table, and registering into it.

:class:`ExpertRegistry` holds the current :class:`~experts.table.ExpertTable` behind one
reference. ``register`` verifies the expert fully (manifest, trunk, sha256, load into the
LRU cache) *before* building the next table and swapping the reference, so the first
request that is routed to a new expert finds it loaded, and a request already running
keeps the table it started with. A refused expert is reported (``refusals``) and never
enters a table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from experts.expert import Expert
from experts.manifest import Manifest
from experts.records import ExpertRegistration
from experts.store import ExpertRefused, ExpertStore
from experts.table import ExpertTable
from experts.trunk import Trunk
from worx.ids import UnsafeIdError, validate_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegisterOutcome:
    expert_id: str
    status: str  # "registered" | "unchanged" | "refused" | "removed"
    table_version: int
    elapsed_ms: float
    refusal: dict[str, Any] | None = None  # ExpertRefused.to_dict() when refused

    def to_dict(self) -> dict[str, Any]:
        return {
            "expert_id": self.expert_id,
            "status": self.status,
            "table_version": self.table_version,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "refusal": self.refusal,
        }


class ExpertRegistry:
    """The experts a server serves: verified, loaded on the trunk's device, in one table."""

    def __init__(self, trunk: Trunk, store: ExpertStore, embedder: Any) -> None:
        self.trunk = trunk
        self.store = store
        self.embedder = embedder
        self._on_device: dict[str, tuple[Any, Any]] = {}  # id -> (store's expert, device copy)
        self._device_lock = threading.Lock()
        self._table = ExpertTable({}, self.load_expert)
        self._swap_lock = threading.Lock()  # serialises registrations, never requests
        self.refusals: deque[dict[str, Any]] = deque(maxlen=1000)

    @property
    def table(self) -> ExpertTable:
        """The current table (a request should read this once and keep it)."""
        return self._table

    def rebuild_from_store(self) -> ExpertTable:
        """Start from every valid expert in the store (restart path); refusals are reported."""
        manifests: dict[str, Manifest] = {}
        for expert_id in self.store.ids():
            try:
                manifest = self.store.manifest(expert_id)
                self.check_centroid(manifest)
            except ExpertRefused as exc:
                self.record(exc)
                continue
            manifests[expert_id] = manifest
        with self._swap_lock:
            self._table = ExpertTable(manifests, self.load_expert, self._table.version + 1)
        log.info("expert table rebuilt from the store: %d experts", len(manifests))
        return self._table

    def register(self, registration: ExpertRegistration) -> RegisterOutcome:
        """Verify and load the registered expert, then swap in a table that includes it.

        Never raises for a bad expert: the outcome says ``refused`` with the reason.
        """
        start = time.perf_counter()
        expert_id = registration.expert_id
        with self._swap_lock:
            try:
                manifest = self.verify(registration)
            except ExpertRefused as exc:
                self.record(exc)
                return self._outcome(expert_id, "refused", start, exc.to_dict())
            current = self._table
            existing = current.manifests.get(expert_id)
            if existing is not None and existing.sha256 == manifest.sha256:
                return self._outcome(expert_id, "unchanged", start)
            self._table = current.with_manifest(manifest)
        outcome = self._outcome(expert_id, "registered", start)
        log.info(
            "registered expert %s (table v%d, %.1f ms)",
            expert_id,
            outcome.table_version,
            outcome.elapsed_ms,
        )
        return outcome

    def unregister(self, expert_id: str) -> RegisterOutcome:
        """Drop ``expert_id`` from the table (a tombstone on the topic); the store keeps it."""
        start = time.perf_counter()
        with self._swap_lock:
            if expert_id in self._table:
                self._table = self._table.without(expert_id)
        return self._outcome(expert_id, "removed", start)

    def verify(self, registration: ExpertRegistration) -> Manifest:
        """The registered expert's manifest, once it is verified and loaded; else
        :class:`~experts.store.ExpertRefused`."""
        expert_id = registration.expert_id
        try:
            validate_id(expert_id, kind="expert_id")
        except UnsafeIdError as exc:
            raise ExpertRefused("unsafe_id", str(expert_id), str(exc)) from exc
        if registration.trunk_fingerprint != self.trunk.fingerprint:
            if expert_id in self.store:
                self.store.manifest(expert_id)  # a stored foreign expert: skipped, left in place
            raise ExpertRefused(
                "wrong_trunk",
                expert_id,
                f"registered for trunk {registration.trunk_fingerprint[:12]}..., this server "
                f"runs {self.trunk.fingerprint[:12]}...",
            )
        manifest = self.store.manifest(expert_id)  # bad_manifest / wrong_trunk / missing
        if manifest.sha256 != registration.sha256:
            raise ExpertRefused(
                "duplicate_id",
                expert_id,
                f"the registration names sha256 {registration.sha256[:12]}..., the stored "
                f"expert with this id has {manifest.sha256[:12]}...; ids are write-once",
            )
        self.check_centroid(manifest)
        self.load_expert(expert_id)  # verify sha256 and warm the caches before any request
        return manifest

    def load_expert(self, expert_id: str) -> Any:
        """The verified expert from the store, on the trunk's device and in its dtype.

        On the CPU in the stored dtype, that is the store's memory-mapped expert itself; a
        copy is made (and kept while the store's LRU keeps the original) otherwise.
        """
        expert = self.store.get(expert_id)
        param = next(expert.parameters())
        if param.device == self.trunk.device and param.dtype == self.trunk.dtype:
            return expert
        with self._device_lock:
            held = self._on_device.get(expert_id)
            if held is None or held[0] is not expert:
                copy = Expert.from_tensors(
                    expert.config,
                    expert.hidden_size,
                    {
                        k: v.to(self.trunk.device, self.trunk.dtype)
                        for k, v in expert.state_dict().items()
                    },
                )
                held = (expert, copy)
                self._on_device[expert_id] = held
            cached = set(self.store.cached_ids())
            for stale in [k for k in self._on_device if k not in cached]:
                del self._on_device[stale]
            return held[1]

    def check_centroid(self, manifest: Manifest) -> None:
        dim = getattr(self.embedder, "dim", None)
        if dim is not None and len(manifest.centroid) != dim:
            raise ExpertRefused(
                "bad_manifest",
                manifest.expert_id,
                f"centroid has {len(manifest.centroid)} dimensions, the embedder makes {dim}: "
                "it was made with another embedder",
            )

    def record(self, exc: ExpertRefused) -> None:
        """Report a refused expert (kept in ``refusals``, logged)."""
        self.refusals.append({**exc.to_dict(), "at_ms": int(time.time() * 1000)})
        log.warning("%s", exc)

    def _outcome(
        self, expert_id: str, status: str, start: float, refusal: dict | None = None
    ) -> RegisterOutcome:
        elapsed = (time.perf_counter() - start) * 1000
        return RegisterOutcome(expert_id, status, self._table.version, elapsed, refusal)
