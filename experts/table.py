"""The immutable expert table a serving request runs against.

A table is never changed: registering an expert builds a new table (one more manifest, a
new :class:`router.gate.DomainExperts`, ``version + 1``) and the server swaps its
reference in one assignment. A request takes the reference once, at its start, and uses
that table to the end, so a registration can never change a request in flight. Experts
themselves are resolved lazily through ``loader`` (the store's verified, LRU-cached
``get``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

from experts.expert import Expert
from experts.manifest import Manifest
from router.gate import DomainExperts
from worx.records import RecordError


class ExpertTable(Mapping[str, Expert]):
    """``expert_id -> Expert`` for the experts in ``manifests``; immutable.

    Parameters
    ----------
    manifests : Mapping[str, Manifest]
        The registered experts.
    loader : callable
        ``expert_id -> Expert`` (e.g. ``ExpertStore.get``); called on lookup.
    version : int
        Increases by one with every registration or removal.
    """

    def __init__(
        self,
        manifests: Mapping[str, Manifest],
        loader: Callable[[str], Expert],
        version: int = 0,
    ) -> None:
        self.manifests: Mapping[str, Manifest] = MappingProxyType(dict(sorted(manifests.items())))
        self.loader = loader
        self.version = version
        self.by_domain = DomainExperts.from_manifests(self.manifests.values())

    def __getitem__(self, expert_id: str) -> Expert:
        if expert_id not in self.manifests:
            raise KeyError(expert_id)
        return self.loader(expert_id)

    def __contains__(self, expert_id: object) -> bool:
        return expert_id in self.manifests

    def __iter__(self) -> Iterator[str]:
        return iter(self.manifests)

    def __len__(self) -> int:
        return len(self.manifests)

    def with_manifest(self, manifest: Manifest) -> ExpertTable:
        """A new table that also holds ``manifest`` (this one is unchanged); this very table
        when it holds that manifest already.

        Raises:
            RecordError: the table holds another expert under this id (ids are write-once).
        """
        held = self.manifests.get(manifest.expert_id)
        if held == manifest:
            return self
        if held is not None and held.sha256 != manifest.sha256:
            raise RecordError(
                f"expert {manifest.expert_id} is held with sha256 {held.sha256[:12]}...; ids "
                "are write-once",
                reason="duplicate_id",
            )
        return ExpertTable(
            {**self.manifests, manifest.expert_id: manifest}, self.loader, self.version + 1
        )

    def without(self, expert_id: str) -> ExpertTable:
        """A new table without ``expert_id`` (this one is unchanged); this very table when
        it does not hold ``expert_id`` (a tombstone for an unknown key changes nothing)."""
        if expert_id not in self.manifests:
            return self
        rest = {k: v for k, v in self.manifests.items() if k != expert_id}
        return ExpertTable(rest, self.loader, self.version + 1)
