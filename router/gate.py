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

Short texts (the length-aware rule). The domains' thresholds are learned on whole
documents, and the cosine of a text to its domain's centroid shrinks with the text's
length (on the bundled corpus the median in-domain cosine at 256 characters is ~0.58 of
the whole document's), so a prompt falls under the threshold of its own domain. When the
caller gives the text's length (``chars``) and the route stage's rule finds no domain, the
gate takes the nearest domain ``b`` anyway if

* ``sim_b >= floor * cohesion_b * min(1, (chars / ref_chars) ** power)``: the text is
  at least ``floor`` of as close as the domain's own members are on average
  (``cohesion``), scaled down for a short text by a power law in its length; and
* ``sim_b >= margin * sim_second``: it is clearly nearer to ``b`` than to any other
  domain (a text between two domains stays on the trunk).

A document the route stage assigns keeps that domain (the rule only adds decisions to
texts the table calls novel). With ``chars=None`` the gate decides exactly as the route
stage does. Under the rule, the experts' invariance above holds as before; a new domain
can take a short text (it became its nearest) or leave it to the trunk (it is now a close
second), never send it to a third domain's expert.

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
>>> short = np.array([0.45, 0.05], np.float32)  # a prompt of 200 characters, near code
>>> Gate().route(short, table, experts), Gate().route(short, table, experts, chars=200)
({}, {'code-e1': 1.0})
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
        self._since: dict[str, int] = {}
        for domain_id, members in sorted(grouped.items()):
            members.sort(key=lambda e: (-e.created_ms, e.expert_id))
            self._since[domain_id] = min(e.created_ms for e in members)
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

    def since(self, domain_id: str) -> int:
        """When the domain's first expert was registered (``created_ms``; 0: unknown)."""
        return self._since.get(domain_id, 0)

    def domains(self) -> list[str]:
        return list(self._index)

    def __len__(self) -> int:
        return len(self.expert_domain)


class DomainChoice(NamedTuple):
    """Which domain the gate's first step gave a text, and by which rule."""

    domain_id: str | None  # None: novel
    similarity: float  # to the chosen (or, when novel, the nearest) domain's centroid
    version: int  # the domain table's version read
    rule: str  # "threshold" | "length_rule" | "below_threshold" | "between_domains" |
    # "no_domains" (see Gate.choose_domain)


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
    floor, ref_chars, power, margin : float
        The length-aware rule for texts the table calls novel (module docstring): the
        nearest domain if its similarity reaches ``floor * cohesion * min(1, (chars /
        ref_chars) ** power)`` and ``margin`` times the second domain's. Measured with
        ``bench/route_recall.py`` (docs/experts.md); ``floor=inf`` turns it off.
    """

    def __init__(
        self,
        top_k: int = 1,
        temperature: float = 0.1,
        *,
        floor: float = 0.6,
        ref_chars: float = 2000.0,
        power: float = 0.35,
        margin: float = 1.25,
    ) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if floor <= 0 or ref_chars <= 0 or power < 0 or margin < 1:
            raise ValueError(
                f"length-aware rule: need floor > 0, ref_chars > 0, power >= 0, margin >= 1; "
                f"got floor={floor}, ref_chars={ref_chars}, power={power}, margin={margin}"
            )
        self.top_k = int(top_k)
        self.temperature = float(temperature)
        self.floor = float(floor)
        self.ref_chars = float(ref_chars)
        self.power = float(power)
        self.margin = float(margin)

    def decide(
        self,
        embedding: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        chars: int | None = None,
    ) -> GateDecision:
        """The domain and the weights for one document embedding ``(dim,)``.

        ``chars``: the text's length in characters; given, a text the route stage's rule
        calls novel may still get its nearest domain by the length-aware rule. None: the
        route stage's rule alone.
        """
        x = np.asarray(embedding, dtype=np.float32).reshape(-1)  # (dim,)
        domain_id, similarity, version, _ = self.choose_domain(x, domains, chars)
        return GateDecision(
            domain_id, similarity, self.domain_weights(x, experts, domain_id), version
        )

    def domain_weights(
        self, embedding: np.ndarray, experts: DomainExperts, domain_id: str | None
    ) -> dict[str, float]:
        """The second step of :meth:`decide`: the weights of ``domain_id``'s experts for
        ``embedding (dim,)`` (``{}``, the trunk alone, when the domain has none)."""
        index = experts.of(domain_id)
        if index is None:
            return {}
        return self._mix(np.asarray(embedding, dtype=np.float32).reshape(-1), index)

    def length_scale(self, chars: int) -> float:
        """How much closer than ``floor * cohesion`` a text of ``chars`` must come (<= 1)."""
        return min(1.0, (max(int(chars), 1) / self.ref_chars) ** self.power)

    def choose_domain(
        self, embedding: np.ndarray, domains: DomainTable, chars: int | None = None
    ) -> DomainChoice:
        """The first step of :meth:`decide`: the text's domain, and the rule that gave it.

        ``rule``: ``threshold`` (the route stage's rule assigned it), ``length_rule``
        (below the threshold, taken by the length-aware rule), ``below_threshold`` (novel:
        too far from its nearest domain), ``between_domains`` (novel: close enough by the
        length-aware rule but not clearly nearer than the second domain), ``no_domains``.
        """
        x = np.asarray(embedding, dtype=np.float32).reshape(-1)  # (dim,)
        try:
            if chars is None:
                domain_id, sim, _, version = domains.decide(x)
                if domain_id is None and not domains.scores(x)[0]:
                    return DomainChoice(None, 0.0, version, "no_domains")
                rule = "threshold" if domain_id is not None else "below_threshold"
                return DomainChoice(domain_id, sim, version, rule)
            return self._domain(x, domains, chars)
        except ValueError as exc:  # a matmul of mismatched shapes
            raise ValueError(
                f"embedding dimension {x.shape[0]} does not match the domain table's "
                "centroids: the gate and the route stage must use the same embedder"
            ) from exc

    def length_floor(self, cohesion: float, threshold: float, chars: int) -> float:
        """The similarity the length-aware rule asks of a text of ``chars`` to a domain."""
        # a row without cohesion falls back to its threshold as the typical member cosine
        return self.floor * max(cohesion, threshold) * self.length_scale(chars)

    def _domain(self, x: np.ndarray, domains: DomainTable, chars: int) -> DomainChoice:
        """The route stage's rule, else the length-aware one, both on one consistent read of
        the table."""
        ids, sims, thresholds, cohesions, version = domains.scores(x)  # sims: (K,)
        if not ids:
            return DomainChoice(None, 0.0, version, "no_domains")
        best = int(np.argmax(sims))
        sim = float(sims[best])
        if sim >= thresholds[best]:  # the route stage's decision (DomainTable.decide)
            return DomainChoice(ids[best], sim, version, "threshold")
        second = float(np.partition(sims, -2)[-2]) if len(ids) > 1 else 0.0
        need = self.length_floor(float(cohesions[best]), float(thresholds[best]), chars)
        close = sim > 0 and sim >= need
        apart = sim >= self.margin * max(second, 0.0)
        if close and apart:
            return DomainChoice(ids[best], sim, version, "length_rule")
        return DomainChoice(None, sim, version, "between_domains" if close else "below_threshold")

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
        self,
        embedding: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        chars: int | None = None,
    ) -> dict[str, float]:
        """Weights for one document embedding ``(dim,)`` (``chars``: see :meth:`decide`)."""
        return self.decide(embedding, domains, experts, chars).weights

    def decide_many(
        self,
        embeddings: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        chars: Sequence[int] | None = None,
    ) -> list[GateDecision]:
        """One decision per row of ``embeddings (N, dim)``; ``chars``: one length per row."""
        rows = np.asarray(embeddings)
        if chars is None:
            return [self.decide(row, domains, experts) for row in rows]
        if len(chars) != len(rows):
            raise ValueError(f"{len(chars)} lengths for {len(rows)} embeddings: give one per row")
        return [self.decide(r, domains, experts, c) for r, c in zip(rows, chars, strict=True)]

    def route_many(
        self,
        embeddings: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        chars: Sequence[int] | None = None,
    ) -> list[dict[str, float]]:
        """Weights for each row of ``embeddings (N, dim)``."""
        return [d.weights for d in self.decide_many(embeddings, domains, experts, chars)]
