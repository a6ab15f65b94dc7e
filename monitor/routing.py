"""Route held-out documents exactly as the server does: embedder, domain table, gate, and
the likelihood step.

Each text's length goes to the gate with its embedding (``Gate.decide(..., chars=)``), so
the length-aware rule decides a held-out document as it decides the same text in a
request; with :meth:`GateRouter.use_likelihood`, a decision the route stage's rule leaves
unsure is re-ranked by the candidate experts' likelihood of the text's head, as
``worx serve`` re-ranks it (experts/likelihood_routing.py): what the monitor reports is
what a user's request of that text would get.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from experts.likelihood_routing import LikelihoodRouter
from experts.mixture import Mixture
from router.gate import DomainExperts, Gate, GateDecision, GateExpert
from router.table import DomainTable


class GateRouter:
    """``route(texts, experts) -> [{expert_id: weight}]`` with the serving gate's rule
    (``decide``: the whole decisions, domains included).

    Parameters
    ----------
    embedder
        Anything with ``embed(texts) -> (N, dim)`` L2-normalised float32 (the router's
        default embedder in production).
    gate
        The serving :class:`router.gate.Gate` (same ``top_k`` and temperature).
    domains
        The domain table the server routes by (the monitor follows ``worx.domains`` into
        it); a document gets only its own domain's experts, or ``{}``.
    cache_size
        Embeddings (and, for the likelihood step, token ids of a text's head) kept by text
        hash: held-out documents are embedded and tokenised once, not per step.
    """

    def __init__(
        self,
        embedder: Any,
        gate: Gate,
        domains: DomainTable | None = None,
        cache_size: int = 10_000,
    ) -> None:
        self.embedder = embedder
        self.gate = gate
        self.domains = domains if domains is not None else DomainTable()
        self.cache_size = cache_size
        self._cache: dict[str, np.ndarray] = {}
        self._heads: dict[tuple[str, int], list[int]] = {}  # token ids of a text's head
        self.likelihood: LikelihoodRouter | None = None
        self._mixture: Any = None  # a Mixture, or anything with its token_losses and trunk
        self._tokenizer: Any = None

    def use_likelihood(
        self, likelihood: LikelihoodRouter | None, mixture: Mixture | Any, tokenizer: Any
    ) -> None:
        """Re-rank unsure decisions as the server does, scoring with ``mixture`` (the one the
        monitor evaluates: its experts resolve to the same stored weights the server's do;
        the evaluator's ``likelihood_mixture`` also remembers every head's losses);
        ``likelihood`` None: the gate's decision alone (the server's step is off)."""
        self.likelihood, self._mixture, self._tokenizer = likelihood, mixture, tokenizer

    def _embed(self, texts: list[str], keys: list[str]) -> np.ndarray:
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        if todo:
            fresh = self.embedder.embed([texts[i] for i in todo])  # (len(todo), dim)
            if len(self._cache) + len(todo) > self.cache_size:
                self._cache.clear()
            for i, vec in zip(todo, fresh, strict=True):
                self._cache[keys[i]] = vec
        return np.stack([self._cache[k] for k in keys])  # (N, dim)

    def route(self, texts: list[str], experts: DomainExperts) -> list[dict[str, float]]:
        return [d.weights for d in self.decide(texts, experts)]

    def decide(self, texts: list[str], experts: DomainExperts) -> list[GateDecision]:
        """Each text's whole decision: its domain (None: novel) and the weights it is
        served with; with no experts every text is the trunk's (not embedded)."""
        if not texts:
            return []
        if not len(experts):
            return [GateDecision(None, 0.0, {}, -1) for _ in texts]
        chars = [len(t) for t in texts]
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        embeddings = self._embed(texts, keys)  # (N, dim)
        decisions = self.gate.decide_many(embeddings, self.domains, experts, chars)
        if self.likelihood is not None and self._mixture is not None:
            decisions = [
                self._rerank(text, key, embedding, decision, experts)
                for text, key, embedding, decision in zip(
                    texts, keys, embeddings, decisions, strict=True
                )
            ]
        return decisions

    def _rerank(
        self,
        text: str,
        key: str,
        embedding: np.ndarray,
        decision: GateDecision,
        experts: DomainExperts,
    ) -> GateDecision:
        assert self.likelihood is not None and self._mixture is not None
        limit, device = self.likelihood.max_tokens, self._mixture.trunk.device

        def tokens() -> torch.Tensor:  # (1, T), the text's head (tokenised once per text)
            head = self._heads.get((key, limit))
            if head is None:
                head = self._tokenizer(text)["input_ids"][:limit]
                if len(self._heads) >= self.cache_size:
                    self._heads.clear()
                self._heads[(key, limit)] = head
            return torch.tensor([head], dtype=torch.long, device=device)

        chosen, _ = self.likelihood.rerank(
            self._mixture, self.gate, tokens, embedding, self.domains, experts, decision
        )
        return chosen

    def wait_for_domains(self, domain_ids: Iterable[str], timeout_s: float) -> list[str]:
        """Wait (bounded) until every one of ``domain_ids`` has a row; returns those missing."""
        wanted = set(domain_ids)
        self.domains.wait_for(
            lambda table: all(table.get(d) is not None for d in wanted), timeout=timeout_s
        )
        return sorted(d for d in wanted if self.domains.get(d) is None)


def experts_from_history(
    info: Mapping[str, Mapping[str, Any]], expert_ids: Iterable[str]
) -> DomainExperts:
    """The gate's view of ``expert_ids`` from the monitor's record of registrations
    (``{expert_id: {"domain_id", "centroid", "manifest_created_ms"?}}``)."""
    return DomainExperts(
        GateExpert(
            e, info[e]["domain_id"], info[e]["centroid"], int(info[e].get("manifest_created_ms", 0))
        )
        for e in expert_ids
    )
