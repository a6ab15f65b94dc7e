"""The monitor's view of the expert store: what a registration must name, and the experts
the evaluated mixture may serve (resolved through the store's LRU on every lookup)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from worx.checks import check_id
from worx.records import RecordError


def check_stored(store: Any, expert_id: str, domain_id: str, sha256: str = "") -> None:
    """Refuse a registration the store does not back: an unsafe or unknown id, a manifest
    of another domain or (when given) another sha256. Raises :class:`RecordError`."""
    check_id("expert_id", expert_id)
    if expert_id not in store:
        raise RecordError(
            f"expert {expert_id} is registered but not in the store at {store.root}",
            reason="unknown_expert",
        )
    try:
        manifest = store.manifest(expert_id)
    except Exception as exc:  # noqa: BLE001 - any refusal by the store is the finding
        raise RecordError(
            f"expert {expert_id}: the store refuses its manifest ({exc})",
            reason=str(getattr(exc, "reason", "bad_manifest")),
        ) from exc
    if manifest.domain_id != domain_id:
        raise RecordError(
            f"expert {expert_id} is registered for domain {domain_id}, its manifest says "
            f"{manifest.domain_id}",
            reason="domain_mismatch",
        )
    if sha256 and manifest.sha256 != sha256:
        raise RecordError(
            f"expert {expert_id}: the registration names sha256 {sha256[:12]}..., the store "
            f"holds {manifest.sha256[:12]}...",
            reason="sha256_mismatch",
        )


class StoreExperts(Mapping[str, Any]):
    """The experts the mixture may serve, by id, each resolved through the store's LRU on
    lookup: nothing is held here, so loaded experts stay within the store's byte budget
    (an evicted one is loaded, and verified, again when next used)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._ids: set[str] = set()

    def add(self, expert_id: str) -> None:
        self._ids.add(expert_id)

    def discard(self, expert_id: str) -> None:
        self._ids.discard(expert_id)

    def __getitem__(self, expert_id: str) -> Any:
        if expert_id not in self._ids:
            raise KeyError(expert_id)
        return self.store.get(expert_id)

    def __contains__(self, expert_id: object) -> bool:
        return expert_id in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._ids))

    def __len__(self) -> int:
        return len(self._ids)
