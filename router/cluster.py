"""Online clustering of novel documents: a sliding buffer, shared-nearest-neighbour cores.

Raw cosine between two hashed TF-IDF vectors is noisy (two documents of one domain share
few rare features), so a fixed similarity cut either chains domains together or splits
them. Shared nearest neighbours (Jarvis-Patrick) is robust to that: two documents are
linked when each is among the other's ``knn`` nearest and they share at least
``shared * knn`` of their neighbours. Connected components of those links are dense
cores; a core's count grows with the data (no number of clusters is fixed), and a core
that is large, cohesive and stable over ``stable_runs`` consecutive runs is a candidate
for promotion (the discover stage decides).

The buffer holds at most ``capacity`` documents (oldest dropped first) and clustering
runs on the whole buffer: ``O(capacity**2 * dim)`` per run, about 20 ms at 600 x 1024.

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> def blob(center, n):
...     v = center + 0.3 * rng.standard_normal((n, 32))
...     return v / np.linalg.norm(v, axis=1, keepdims=True)
>>> cl = NoveltyClusterer(dim=32, knn=8, min_size=20, stable_runs=1)
>>> centers = rng.standard_normal((2, 32))
>>> for i, v in enumerate(np.vstack([blob(centers[0], 40), blob(centers[1], 40)])):
...     _ = cl.add(v.astype(np.float32), {"doc_id": f"d{i}"})
>>> cores = cl.run()
>>> len(cores), all(max(c.members) < 40 or min(c.members) >= 40 for c in cores)
(2, True)
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    """A dense core of the buffer after one clustering run."""

    members: list[int]  # buffer positions
    centroid: np.ndarray  # (dim,) unit norm
    cohesion: float  # mean cosine of members to the centroid
    sims: np.ndarray  # (len(members),) member cosines to the centroid
    stable: int  # consecutive runs this core has been seen (Jaccard >= 0.5)
    parts: list[Candidate] = field(default_factory=list)  # its groups, if it chains several


class NoveltyClusterer:
    """Sliding buffer of novel documents and their shared-nearest-neighbour cores.

    Parameters
    ----------
    dim : int
        Embedding dimension.
    capacity : int
        Most documents held; the oldest are dropped first.
    knn : int
        Neighbours per document in the shared-nearest-neighbour graph.
    shared : float
        Fraction of ``knn`` two linked documents must have in common.
    min_size : int
        Cores smaller than this are not reported.
    stable_runs : int
        Runs a core must persist (by Jaccard overlap of its members) before it counts as
        stable; reported in :attr:`Candidate.stable`.
    split_similarity, min_split : float
        A core whose spherical 2-means halves have centroids at cosine below
        ``split_similarity`` (and whose smaller half holds at least ``min_split`` of it)
        chains two groups, reported as its ``parts``.
    coarse_knn : int
        Second, coarser resolution: the documents in no core are clustered again with this
        many neighbours (0: off). A domain made of many unrelated sources (web pages of
        many sites) has no dense core at ``knn`` for hundreds of documents; at a coarser
        graph it does, while the cores found at ``knn`` stay exactly as they are.
    """

    def __init__(
        self,
        dim: int,
        capacity: int = 600,
        knn: int = 20,
        shared: float = 0.3,
        min_size: int = 40,
        stable_runs: int = 2,
        split_similarity: float = 0.5,
        min_split: float = 0.15,
        coarse_knn: int = 0,
    ) -> None:
        self.dim = dim
        self.capacity = capacity
        self.knn = knn
        self.shared = shared
        self.min_size = min_size
        self.stable_runs = stable_runs
        self.split_similarity = split_similarity  # halves less similar than this: two groups
        self.min_split = min_split  # ...when the smaller half has at least this share
        self.coarse_knn = coarse_knn
        self.min_group = max(5, min_size // 4)  # smallest group reported (to be absorbed)
        self.items: list[dict[str, Any]] = []  # per buffered doc: doc_id, label, position...
        self._texts: set[str] = set()  # the buffered documents' content ids
        self._previous: list[tuple[frozenset[str], int]] = []  # last run's cores: ids, stable
        # rows [0, n) hold the buffer; allocated ahead so that adding a document costs one
        # row of cosines, O(n * dim), not a copy of the buffer
        self._vectors = np.zeros((0, dim), dtype=np.float32)  # (allocated, dim)
        self._sims = np.zeros((0, 0), dtype=np.float32)  # (allocated, allocated) cosines

    def __len__(self) -> int:
        return len(self.items)

    @property
    def vectors(self) -> np.ndarray:
        """The buffered documents' vectors, ``(n, dim)`` (a view: do not keep it)."""
        return self._vectors[: len(self.items)]

    def add(self, vector: np.ndarray, item: dict[str, Any]) -> bool:
        """Buffer one novel document (``item`` must hold a unique ``doc_id``); returns
        whether it was buffered. Beyond ``capacity`` the oldest are dropped at the next
        :meth:`run`.

        A document whose text (``item["content"]``, when given) is already buffered is not:
        copies of one text are each other's nearest neighbours, so a text a stream repeats
        would make a core of its own, a domain of one text beside its kind's.
        """
        text = item.get("content")
        if text and text in self._texts:
            return False
        if text:
            self._texts.add(text)
        n = len(self.items)
        if n == self._vectors.shape[0]:
            self._grow(max(64, 2 * n))
        row = vector.astype(np.float32)
        self._vectors[n] = row
        cosines = self._vectors[:n] @ row  # (n,)
        self._sims[n, :n] = cosines
        self._sims[:n, n] = cosines
        self._sims[n, n] = 1.0
        self.items.append(item)
        return True

    def _grow(self, allocated: int) -> None:
        n = len(self.items)
        vectors = np.zeros((allocated, self.dim), dtype=np.float32)
        vectors[:n] = self._vectors[:n]
        sims = np.zeros((allocated, allocated), dtype=np.float32)
        sims[:n, :n] = self._sims[:n, :n]
        self._vectors, self._sims = vectors, sims

    def _keep(self, keep: list[int] | np.ndarray) -> None:
        """Keep only the buffer positions ``keep`` (ascending), in that order."""
        keep = np.asarray(keep, dtype=np.int64)
        m = keep.size
        self._vectors[:m] = self._vectors[keep]
        self._sims[:m, :m] = self._sims[np.ix_(keep, keep)]
        self.items = [self.items[i] for i in keep.tolist()]
        self._texts = {item["content"] for item in self.items if item.get("content")}

    def expire(self, oldest_seq: int) -> int:
        """Drop documents whose ``seq`` is below ``oldest_seq``; returns how many."""
        old = [i for i, item in enumerate(self.items) if item.get("seq", oldest_seq) < oldest_seq]
        if old:
            self.remove(old)
        return len(old)

    def remove(self, positions: list[int]) -> list[dict[str, Any]]:
        """Take the documents at ``positions`` out of the buffer; returns their items."""
        gone = set(positions)
        keep = [i for i in range(len(self.items)) if i not in gone]
        taken = [self.items[i] for i in sorted(gone)]
        self._keep(keep)
        return taken

    def run(self) -> list[Candidate]:
        """Cluster the buffer; returns cores of at least ``min_size``, largest first.

        A core that chains groups (see :meth:`_split`) lists them in :attr:`Candidate.parts`
        (those of at least ``min_group`` documents): the caller may hand a part that
        belongs to a known domain back to it, and judge the rest on its own.
        """
        if len(self.items) > self.capacity:  # the oldest go first
            self._keep(np.arange(len(self.items) - self.capacity, len(self.items)))
        n = len(self.items)
        sims = self._sims[:n, :n].copy()  # (n, n)
        np.fill_diagonal(sims, -np.inf)
        cores = [(m, self._split(m)) for m in self._cores(sims, np.arange(n), self.knn)]
        if self.coarse_knn > self.knn:
            clustered = np.concatenate([m for m, _ in cores]) if cores else np.empty(0, np.int64)
            rest = np.setdiff1d(np.arange(n), clustered)  # (r,) in no core
            for members in self._cores(sims[np.ix_(rest, rest)], rest, self.coarse_knn):
                groups = self._split(members)
                if len(groups) == 1:  # a coarse core that chains groups is not reported
                    cores.append((members, groups))
        cores.sort(key=lambda core: (-core[0].size, self.items[int(core[0][0])]["doc_id"]))
        found = []
        current: list[tuple[frozenset[str], int]] = []
        for members, groups in cores:
            ids = frozenset(self.items[int(i)]["doc_id"] for i in members)
            stable = 1 + max(
                (count for prev, count in self._previous if _jaccard(ids, prev) >= 0.5), default=0
            )
            current.append((ids, stable))
            core = self._candidate(members, stable)
            if len(groups) > 1:
                core.parts = [self._candidate(g, 0) for g in groups if g.size >= self.min_group]
            found.append(core)
        self._previous = current
        return found

    def _cores(self, sims: np.ndarray, positions: np.ndarray, knn: int) -> list[np.ndarray]:
        """Components of at least ``min_size`` of the shared-nearest-neighbour graph of
        ``positions`` (``sims``: their ``(r, r)`` cosines, diagonal -inf); returns arrays
        of buffer positions."""
        r = positions.size
        k = min(knn, r - 1)
        if r < self.min_size or k < 2:
            return []
        neighbours = np.argpartition(-sims, k, axis=1)[:, :k]  # (r, k)
        roots = _components(r, _shared_links(neighbours, self.shared * k))
        cores = []
        for root in np.unique(roots):
            members = np.flatnonzero(roots == root)
            if members.size >= self.min_size:
                cores.append(positions[members])
        return cores

    def _candidate(self, members: np.ndarray, stable: int) -> Candidate:
        centroid = _unit(self.vectors[members].mean(axis=0))  # (dim,)
        member_sims = self.vectors[members] @ centroid  # (m,)
        return Candidate(
            members=[int(i) for i in members],
            centroid=centroid.astype(np.float32),
            cohesion=float(member_sims.mean()),
            sims=member_sims.astype(np.float32),
            stable=stable,
        )

    def _split(self, members: np.ndarray, depth: int = 0) -> list[np.ndarray]:
        """Split a core that chains groups (spherical 2-means, recursively, depth <= 2).

        Halves of one domain have centroids at cosine ~0.9; two chained domains ~0.3. Each
        group is reported on its own, so a known domain's leftovers chained to the first
        documents of a new domain can be told apart.
        """
        if self.split_similarity <= 0 or depth >= 2 or members.size < 2 * self.min_group:
            return [members]
        vectors = self.vectors[members]  # (m, dim)
        centroid = _unit(vectors.mean(axis=0))
        first = int(np.argmin(vectors @ centroid))  # the member farthest from the centre
        second = int(np.argmin(vectors @ vectors[first]))  # and the one farthest from it
        centres = np.stack([vectors[first], vectors[second]])  # (2, dim)
        side = np.zeros(members.size, dtype=np.int64)
        for _ in range(8):
            side = np.argmax(vectors @ centres.T, axis=1)  # (m,)
            if side.min() == side.max():
                return [members]
            centres = np.stack([_unit(vectors[side == g].mean(axis=0)) for g in (0, 1)])
        smaller = min(int((side == 0).sum()), int((side == 1).sum()))
        if float(centres[0] @ centres[1]) >= self.split_similarity:
            return [members]
        if smaller < self.min_split * members.size:
            return [members]
        return [part for g in (0, 1) for part in self._split(members[side == g], depth + 1)]

    def forget_core(self, doc_ids: set[str]) -> None:
        """Drop stability history of cores overlapping ``doc_ids`` (after a promotion)."""
        self._previous = [(ids, n) for ids, n in self._previous if not ids & doc_ids]

    def snapshot(self) -> dict[str, Any]:
        return {
            "vectors_f32le_b64": base64.b64encode(self.vectors.astype("<f4").tobytes()).decode(),
            "items": self.items,
            "previous": [[sorted(ids), n] for ids, n in self._previous],
        }

    def restore(self, state: dict[str, Any]) -> None:
        raw = base64.b64decode(state["vectors_f32le_b64"])
        vectors = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(-1, self.dim)
        items = list(state["items"])
        if len(items) != vectors.shape[0]:
            raise ValueError("corrupt clusterer snapshot: items and vectors differ in count")
        self.items = []
        self._texts = set()
        self._vectors = np.zeros((0, self.dim), dtype=np.float32)
        self._sims = np.zeros((0, 0), dtype=np.float32)
        self._grow(max(64, len(items)))
        for vector, item in zip(vectors, items, strict=True):
            self.add(vector, item)
        self._previous = [(frozenset(ids), int(n)) for ids, n in state["previous"]]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(1, len(a | b))


def _shared_links(neighbours: np.ndarray, min_shared: float) -> np.ndarray:
    """Edges ``(e, 2)`` (i < j) of the shared-nearest-neighbour graph: i and j each among
    the other's neighbours (``neighbours`` ``(r, k)``) with at least ``min_shared``
    neighbours in common. Sparse: O(r * k**2), not the O(r**3) of a dense product."""
    r, k = neighbours.shape
    rows = np.repeat(np.arange(r, dtype=np.int64), k)  # (r*k,)
    cols = neighbours.ravel().astype(np.int64)  # (r*k,)
    known = np.sort(rows * r + cols)  # (r*k,) i*r + j for j among i's neighbours
    mutual = _contains(known, cols * r + rows) & (rows < cols)
    i, j = rows[mutual], cols[mutual]  # (e,)
    # common neighbours: m among i's (k of them) that is also among j's
    probe = j[:, None] * r + neighbours[i].astype(np.int64)  # (e, k)
    shared = _contains(known, probe.ravel()).reshape(probe.shape).sum(axis=1)  # (e,)
    keep = shared >= min_shared
    return np.stack([i[keep], j[keep]], axis=1)


def _contains(sorted_keys: np.ndarray, probe: np.ndarray) -> np.ndarray:
    at = np.searchsorted(sorted_keys, probe)
    at[at == sorted_keys.size] = 0
    return sorted_keys[at] == probe


def _components(n: int, edges: np.ndarray) -> np.ndarray:
    """Connected components (union-find); returns each node's root, ``(n,)``."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in edges.tolist():
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    return np.asarray([find(i) for i in range(n)])
