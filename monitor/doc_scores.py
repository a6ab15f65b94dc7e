"""Held-out documents routed as the server would route them, and scored only when their
loss under that routing is not known yet (:mod:`monitor.loss_cache`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from monitor.heldout import HeldoutSets
from monitor.loss_cache import CachedMixture, LossCache, routing_key, text_sha256
from monitor.scoring import score_texts
from router.gate import DomainExperts


def mean_loss(detail: Mapping[str, Mapping[str, Any]]) -> float:
    """Token-weighted mean loss of ``{doc_id: {"loss", "tokens", ...}}`` (in its order)."""
    total = sum(v["tokens"] for v in detail.values())
    if total == 0:
        raise ValueError("held-out documents too short to score (need >= 2 tokens)")
    return sum(v["loss"] * v["tokens"] for v in detail.values()) / total


class HeldoutScorer:
    """``score(domains, experts)``: every held-out document of ``domains`` routed with the
    step's ``experts`` by ``router``, scored by ``mixture`` where its key is new.

    ``shas``: ``expert_id -> sha256`` of the verified weights (the key's expert bytes).
    ``incremental`` False: nothing is kept, every document is scored at every call.
    """

    def __init__(
        self,
        trunk: Any,
        mixture: Any,
        router: Any,
        heldout: HeldoutSets,
        shas: Mapping[str, str],
        max_tokens: int = 128,
        batch_size: int = 8,
        incremental: bool = True,
    ) -> None:
        self.trunk = trunk
        self.mixture = mixture
        self.router = router
        self.heldout = heldout
        self.shas = shas
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.losses = LossCache(enabled=incremental)  # held-out documents
        self.head_losses = LossCache(enabled=incremental)  # the likelihood step's heads
        self.likelihood_mixture = CachedMixture(mixture, shas, self.head_losses)
        self.docs_scored = 0  # held-out documents scored (cache misses) so far

    def forget(self) -> None:
        """Measured under weights a check has just found changed: nothing kept is trusted."""
        self.losses.clear()
        self.head_losses.clear()

    @contextlib.contextmanager
    def fresh(self, on: bool) -> Iterator[None]:
        """With ``on``: score everything and keep nothing (the weights are not the verified
        ones)."""
        saved = self.losses.enabled, self.head_losses.enabled
        if on:
            self.losses.enabled = self.head_losses.enabled = False
        try:
            yield
        finally:
            self.losses.enabled, self.head_losses.enabled = saved

    def score(self, domains: list[str], experts: DomainExperts) -> dict[str, dict]:
        """``{domain: {doc_id: {"loss", "tokens", "routing", "domain"}}}`` (``domain``: the
        one the document was routed to, None: novel), each domain's documents in their
        held-out order; the ones to score go through one batched pass."""
        routed: dict[str, tuple[list, dict[str, dict]]] = {}
        todo: list[tuple[str, Any, dict[str, Any], tuple]] = []  # (domain, doc, entry, key)
        for domain in domains:
            docs = self.heldout.docs(domain)
            texts = [d.text for d in docs]
            decisions = self.router.decide(texts, experts)
            known: dict[str, dict] = {}
            for doc, decision in zip(docs, decisions, strict=True):
                r = decision.weights
                key = (doc.doc_id, text_sha256(doc.text), routing_key(r, self.shas))
                hit = self.losses.get(key)
                entry = {"routing": r, "domain": decision.domain_id}
                if hit is None:
                    todo.append((domain, doc, entry, key))
                else:
                    known[doc.doc_id] = {"loss": hit[0], "tokens": hit[1], **entry}
            routed[domain] = (docs, known)
        if todo:
            scores = score_texts(
                self.mixture.token_losses,
                self.trunk.tokenizer,
                [doc.text for _, doc, _, _ in todo],
                [entry["routing"] for _, _, entry, _ in todo],
                max_tokens=self.max_tokens,
                batch_size=self.batch_size,
                device=self.trunk.device,
            )
            for (domain, doc, entry, key), loss, n in zip(
                todo, scores.doc_loss, scores.doc_tokens, strict=True
            ):
                routed[domain][1][doc.doc_id] = {"loss": loss, "tokens": n, **entry}
                self.losses.put(key, (loss, n))
            self.docs_scored += len(todo)
        return {
            domain: {doc.doc_id: known[doc.doc_id] for doc in docs}
            for domain, (docs, known) in routed.items()
        }
