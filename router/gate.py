"""The inference gate: document embedding -> its domain -> that domain's experts.

A document is first given a domain exactly as the route stage gives it one
(:meth:`router.table.DomainTable.decide`: the nearest active domain, if the similarity
reaches that domain's own threshold; otherwise novel). Only that domain's experts can
serve it: among them the ``top_k`` whose centroids are most similar to the document
(ties: the newest expert first) get weights ``softmax(similarity / temperature)``. A
novel document, or one whose domain has no expert (a domain the trunk serves), gets
``{}``: the trunk alone.

What stays invariant: a document's weights are a function of (its domain decision, the
experts of that domain) only. Registering an expert of domain ``D`` changes the weights of
documents decided to ``D`` and of no other; adding or updating a domain changes only the
documents whose decision it changes, i.e. whose nearest active domain it becomes or was.
A trunk-served domain therefore stays on the trunk whatever experts arrive later.

Example
-------
>>> import numpy as np
>>> from router.records import DomainRecord
>>> from router.table import DomainTable
>>> table = DomainTable()
>>> for name, centroid in (("code", [1.0, 0.0]), ("prose", [0.0, 1.0])):
...     _ = table.apply(DomainRecord(name, centroid, 0.5, 10, 0.8))
>>> experts = DomainExperts([GateExpert("code-e1", "code", [1.0, 0.0])])
>>> Gate().route(np.array([0.9, 0.1], np.float32), table, experts)
{'code-e1': 1.0}
>>> Gate().route(np.array([0.1, 0.9], np.float32), table, experts)  # prose: trunk only
{}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from router.table import DomainTable


class CentroidIndex:
    """Unit-norm centroids as one ``(E, dim)`` float32 matrix, rows in the order given.

    Parameters
    ----------
    ids : sequence of str
        Expert ids (unique).
    centroids : array-like, shape (E, dim)
        One centroid per id (normalised here; a zero row is similar to nothing).
    """

    def __init__(
        self, ids: Sequence[str], centroids: np.ndarray | Sequence[Sequence[float]]
    ) -> None:
        if len(set(ids)) != len(ids):
            raise ValueError("expert ids in a centroid index must be unique")
        try:
            matrix = np.asarray(centroids, dtype=np.float32)
        except ValueError as exc:  # ragged rows
            raise ValueError(
                "centroids of different dimensions: every expert's centroid must come from "
                "the same embedder"
            ) from exc
        matrix = matrix.reshape(len(ids), matrix.shape[-1] if matrix.size else 0)  # (E, dim)
        self.ids: list[str] = list(ids)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)  # (E, 1)
        self.matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        self.dim = matrix.shape[1] if len(ids) else 0

    def __len__(self) -> int:
        return len(self.ids)

    def similarities(self, embedding: np.ndarray) -> np.ndarray:
        """Cosine similarities ``(E,)`` of a unit-norm ``embedding (dim,)`` to every row."""
        if embedding.shape[-1] != self.dim:
            raise ValueError(
                f"embedding dimension {embedding.shape[-1]} != centroid dimension {self.dim}: "
                "the gate and the experts' centroids must use the same embedder"
            )
        return self.matrix @ embedding  # (E,)


@dataclass(frozen=True)
class GateExpert:
    """What the gate needs to know of one registered expert (from its manifest)."""

    expert_id: str
    domain_id: str
    centroid: Sequence[float] = field(repr=False)
    created_ms: int = 0  # the newest expert of a domain wins ties


class DomainExperts:
    """``domain_id -> its experts``, immutable: one :class:`CentroidIndex` per domain.

    A domain's rows are ordered newest first (``created_ms``, then id), which is the order
    ties are broken in. A drifted domain may hold several experts; every expert of the
    same domain is a candidate for that domain's documents, and for no other's.
    """

    def __init__(self, experts: Iterable[GateExpert]) -> None:
        grouped: dict[str, list[GateExpert]] = {}
        seen: set[str] = set()
        for expert in experts:
            if expert.expert_id in seen:
                raise ValueError(f"expert {expert.expert_id!r} is listed twice")
            seen.add(expert.expert_id)
            grouped.setdefault(expert.domain_id, []).append(expert)
        self._index: dict[str, CentroidIndex] = {}
        for domain_id, members in sorted(grouped.items()):
            members.sort(key=lambda e: (-e.created_ms, e.expert_id))
            self._index[domain_id] = CentroidIndex(
                [e.expert_id for e in members], [list(e.centroid) for e in members]
            )
        self.expert_domain = {e: d for d, index in self._index.items() for e in index.ids}

    @classmethod
    def from_manifests(cls, manifests: Iterable[Any]) -> DomainExperts:
        """From :class:`experts.manifest.Manifest` objects (or anything with those fields)."""
        return cls(
            GateExpert(m.expert_id, m.domain_id, m.centroid, m.created_ms) for m in manifests
        )

    def of(self, domain_id: str | None) -> CentroidIndex | None:
        """The domain's experts (newest first), or None when it has none."""
        return None if domain_id is None else self._index.get(domain_id)

    def domains(self) -> list[str]:
        return list(self._index)

    def __len__(self) -> int:
        return len(self.expert_domain)


class GateDecision(NamedTuple):
    domain_id: str | None  # None: novel (no known domain close enough)
    similarity: float  # to the chosen (or, when novel, the nearest) domain's centroid
    weights: dict[str, float]  # {expert_id: weight}; {} = the trunk alone
    domain_version: int  # the domain table's version the decision used


class Gate:
    """Domain decision by the domain table, then top-k among that domain's experts.

    Parameters
    ----------
    top_k : int
        Largest number of one domain's experts mixed for one document (experts of other
        domains never are: see the module docstring for why).
    temperature : float
        Softmax temperature over the chosen experts' similarities (small: near one-hot).
    """

    def __init__(self, top_k: int = 1, temperature: float = 0.1) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.top_k = int(top_k)
        self.temperature = float(temperature)

    def decide(
        self, embedding: np.ndarray, domains: DomainTable, experts: DomainExperts
    ) -> GateDecision:
        """The domain and the weights for one document embedding ``(dim,)``."""
        x = np.asarray(embedding, dtype=np.float32).reshape(-1)  # (dim,)
        try:
            domain_id, similarity, _, version = domains.decide(x)
        except ValueError as exc:  # a matmul of mismatched shapes
            raise ValueError(
                f"embedding dimension {x.shape[0]} does not match the domain table's "
                "centroids: the gate and the route stage must use the same embedder"
            ) from exc
        index = experts.of(domain_id)
        if index is None:
            return GateDecision(domain_id, similarity, {}, version)
        return GateDecision(domain_id, similarity, self._mix(x, index), version)

    def _mix(self, x: np.ndarray, index: CentroidIndex) -> dict[str, float]:
        sims = index.similarities(x)  # (E,)
        # rounded so that experts sharing their domain's centroid tie exactly, whatever the
        # summation order; ties keep the index order (newest first)
        order = sorted(range(len(index)), key=lambda i: (-round(float(sims[i]), 6), i))
        chosen = order[: self.top_k]
        logits = np.array([sims[i] for i in chosen], dtype=np.float64) / self.temperature
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        return {index.ids[i]: float(p) for i, p in zip(chosen, probs, strict=True)}

    def route(
        self, embedding: np.ndarray, domains: DomainTable, experts: DomainExperts
    ) -> dict[str, float]:
        """Weights for one document embedding ``(dim,)``."""
        return self.decide(embedding, domains, experts).weights

    def decide_many(
        self, embeddings: np.ndarray, domains: DomainTable, experts: DomainExperts
    ) -> list[GateDecision]:
        """One decision per row of ``embeddings (N, dim)``."""
        return [self.decide(row, domains, experts) for row in np.asarray(embeddings)]

    def route_many(
        self, embeddings: np.ndarray, domains: DomainTable, experts: DomainExperts
    ) -> list[dict[str, float]]:
        """Weights for each row of ``embeddings (N, dim)``."""
        return [d.weights for d in self.decide_many(embeddings, domains, experts)]
