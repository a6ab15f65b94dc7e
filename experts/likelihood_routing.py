"""Likelihood re-ranking: the experts' own likelihood of a prompt decides unsure routings.

The gate (:class:`router.gate.Gate`) decides a text's domain from its embedding alone. For
a prompt-length text that decision is often unsure (the route stage's threshold is not
reached) and sometimes wrong: the embedding's nearest domain of a 256-character prefix is
its own for only ~91 % of held-out documents (docs/experts.md). The experts themselves
know better what they explain, so for those texts (DEMix-style posterior routing):

```
unsure   the route stage's rule (the nearest domain's own threshold) does not assign it
cands    the `candidates` nearest active domains by cosine that have an expert
score    mean next-token loss of the prompt's first `max_tokens` tokens under the trunk
         alone (L0) and under each candidate's experts with the gate's weights (L_d):
         one batched forward of 1 + len(cands) rows
best     the candidate with the lowest L_d
take it  if L0 - L_best >= margin (nats per token), L_second - L_best >= separation
         (no other candidate's expert explains it about as well), and, when the
         embedding rule chose another domain that has an expert, L_that - L_best >= margin;
oldest   with incumbency (the default), the candidates are taken in the order their
         first expert was registered, and a newer one changes the decision only by
         winning it outright by the rules above: a text an older expert explains keeps
         it when a newcomer explains it about as well (never back to the trunk or a mix
         because a neighbour arrived)
mix them if the embedding rule left the text on the trunk (novel) and the candidates
         within separation of the best (at most `mix_top`) each beat the trunk by
         mix_margin or more: the text is clearly one the library explains, just not one
         domain's (Python source and Python docs, say), so it gets those domains' experts
         with equal shares (each domain's share split as the gate splits it) and no
         domain (``domain_id`` None)
else     the embedding rule's decision stands
```

Mixing is measured (bench/route_recall_experts.py, docs/experts.md): at mix_margin 3.0 on
the bundled corpus it moves ~3 % of 256-character prompts from the trunk to a mix that
includes their own domain's expert and sends no more to a mix without it.

A text the route stage assigns is re-ranked only when it is contested (``contest_gap``):
another domain with an expert reaches its own threshold too, as when a newly discovered
neighbour's centroid comes nearer to an old domain's documents than the old one's: the
candidates are then the nearest and those rivals, and the old domain's expert keeps its
documents unless the newcomer's explains them better by ``margin`` and ``separation``
(forgetting through routing, docs/experts.md). A text whose candidates have no expert is
never re-ranked. The rule is :func:`choose` (pure, shared with
``bench/route_recall_experts.py``).

Example
-------
>>> choose("legal", trunk_loss=6.0, losses={"legal": 5.8, "code": 4.0}, margin=0.5)
'code'
>>> choose(None, 6.0, {"legal": 4.2, "code": 4.0}, margin=0.5, separation=0.6) is None
True
>>> choose(None, trunk_loss=6.0, losses={"code": 5.9}, margin=0.5) is None  # not clear
True
>>> tied(10.0, {"code": 6.1, "docs": 6.4, "legal": 9.5}, mix_margin=3.0, separation=0.6)
['code', 'docs']
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from experts.mixture import Mixture
from router.gate import DomainExperts, Gate, GateDecision
from router.table import DomainTable

if TYPE_CHECKING:
    from experts.serving.score_batcher import BatchedMixture

log = logging.getLogger(__name__)


def choose(
    embedding_domain: str | None,
    trunk_loss: float,
    losses: Mapping[str, float],
    margin: float,
    separation: float = 0.0,
) -> str | None:
    """The domain a text goes to, from the losses of its candidates (module docstring).

    ``embedding_domain``: the gate's decision (None: novel). ``losses``: mean next-token
    loss under each candidate domain's experts; ``trunk_loss``: under the trunk alone.
    """
    if not losses:
        return embedding_domain
    ranked = sorted(sorted(losses), key=lambda d: losses[d])  # ties: the smaller id
    best = ranked[0]
    if trunk_loss - losses[best] < margin:
        return embedding_domain  # no expert explains the text clearly better than the trunk
    if len(ranked) > 1 and losses[ranked[1]] - losses[best] < separation:
        return embedding_domain  # two experts explain it about as well: still unsure
    if embedding_domain is None or best == embedding_domain:
        return best
    if embedding_domain in losses and losses[embedding_domain] - losses[best] < margin:
        return embedding_domain  # the embedding's pick is about as good: it stands
    return best


def choose_keeping(
    embedding_domain: str | None,
    trunk_loss: float,
    losses: Mapping[str, float],
    margin: float,
    separation: float,
    order: Sequence[str],
) -> str | None:
    """:func:`choose` with incumbency: the candidates arrive in ``order`` (oldest expert
    first) and a newcomer changes the decision only by winning it outright under
    :func:`choose`'s rule. A text that an older candidate's expert took, or that stayed
    with an older candidate, keeps it when a newer expert explains it about as well: it
    never falls back to the embedding's decision or a tie because a neighbour arrived
    (forgetting through routing, docs/experts.md)."""
    current, seen = embedding_domain, {}
    for newcomer in order:
        seen[newcomer] = losses[newcomer]
        decided = choose(embedding_domain, trunk_loss, seen, margin, separation)
        if current in seen and current != newcomer and decided != newcomer:
            continue  # the incumbent keeps the text
        current = decided
    return current


def tied(
    trunk_loss: float,
    losses: Mapping[str, float],
    mix_margin: float,
    separation: float,
    mix_top: int = 2,
) -> list[str]:
    """The candidates a novel text is mixed over (module docstring), best first; fewer
    than two: no mix. ``mix_margin`` inf or ``mix_top`` < 2 turns mixing off."""
    ranked = sorted(sorted(losses), key=lambda d: losses[d])  # ties: the smaller id
    if len(ranked) < 2 or mix_top < 2:
        return []
    best = losses[ranked[0]]
    close = [d for d in ranked[:mix_top] if losses[d] - best < separation]
    if len(close) < 2 or any(trunk_loss - losses[d] < mix_margin for d in close):
        return []
    return close


def mixed_weights(mixes: Mapping[str, Mapping[str, float]], domains: list[str]) -> dict:
    """``{expert_id: weight}``: each of ``domains`` an equal share, split among its own
    experts as in ``mixes[domain]`` (the gate's weights for that domain)."""
    share = 1.0 / len(domains)
    out: dict[str, float] = {}
    for d in domains:
        for expert_id, w in mixes[d].items():
            out[expert_id] = out.get(expert_id, 0.0) + share * w
    return out


@dataclass(frozen=True)
class LikelihoodRouter:
    """Re-ranks the gate's unsure decisions by the candidates' experts' likelihood.

    Parameters
    ----------
    candidates : int
        Nearest active domains (by cosine) whose experts are scored; 0 turns the step off.
    margin : float
        Nats per token by which the best candidate's expert must lower the prompt's mean
        loss below the trunk's (and below the embedding's choice, when it overrides one).
    separation : float
        Nats per token by which it must also beat every other candidate's expert (two
        experts that explain a text about as well leave the embedding's decision).
    max_tokens : int
        Tokens of the prompt scored at most (its head); bounds the extra forward's cost.
    mix_margin : float
        Nats per token by which every tied candidate's expert must beat the trunk for a
        novel text to be served by their mix (inf: never mixed).
    mix_top : int
        Tied candidates mixed at most (below 2: never mixed).
    contest_gap : float
        A text the route stage's rule assigns is re-ranked only when contested: another
        domain with an expert also reaches its own threshold, at most this much cosine
        below the nearest (0: never; inf: any such domain). Its candidates are the nearest
        domain (if it has an expert) and those rivals; overriding the nearest needs
        ``margin`` over its expert, as for any embedding decision.
    contest_waiting : bool
        A text the route stage's rule assigns to a domain without an expert (one still
        waiting for its first job, or one the trunk serves) is re-ranked as a novel text
        is: among the ``candidates`` nearest domains with an expert, whether or not the
        text reaches their thresholds (an old domain's text the newcomer's threshold took
        keeps its expert if that beats the trunk by ``margin``); ties leave it to the trunk.
    incumbent : bool
        Decide with :func:`choose_keeping` (candidates in the order their first expert was
        registered): a newer expert takes a text only by winning it outright.
        False: :func:`choose` over all candidates at once.
    """

    candidates: int = 8
    margin: float = 0.5
    separation: float = 0.6
    max_tokens: int = 64
    mix_margin: float = 3.0
    mix_top: int = 2
    contest_gap: float = 0.0
    incumbent: bool = True
    contest_waiting: bool = True

    def __post_init__(self) -> None:
        if (
            self.candidates < 0
            or min(self.margin, self.separation, self.mix_margin) < 0
            or self.max_tokens < 2
            or self.mix_top < 0
            or self.contest_gap < 0
        ):
            raise ValueError(
                "likelihood routing: need candidates >= 0 (0: off), margin >= 0, "
                "separation >= 0, max_tokens >= 2, mix_margin >= 0, mix_top >= 0 and "
                "contest_gap >= 0; got "
                f"candidates={self.candidates}, margin={self.margin}, "
                f"separation={self.separation}, max_tokens={self.max_tokens}, "
                f"mix_margin={self.mix_margin}, mix_top={self.mix_top}, "
                f"contest_gap={self.contest_gap}"
            )

    def candidate_domains(
        self,
        embedding: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        decision: GateDecision,
    ) -> list[str]:
        """The domains to score for this decision; empty: the decision is not re-ranked."""
        return self.candidates_of(embedding, domains, experts, decision)[0]

    def candidates_of(
        self,
        embedding: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        decision: GateDecision,
    ) -> tuple[list[str], bool]:
        """``(candidates, contested)``: contested when the route stage's rule assigned the
        text and a rival domain reaches its own threshold too (``contest_gap``)."""
        if self.candidates == 0:
            return [], False
        x = np.asarray(embedding, dtype=np.float32).reshape(-1)  # (dim,)
        ids, sims, thresholds, _, version = domains.scores(x)  # sims: (K,)
        if not ids or version != decision.domain_version:
            return [], False  # the table changed since the gate read it: the gate's decision
        order = np.argsort(-sims, kind="stable")  # (K,) nearest first
        nearest = order[0]
        # a text given to a domain without an expert: the trunk would serve it, as a novel one
        waiting = self.contest_waiting and experts.of(ids[nearest]) is None
        if sims[nearest] < thresholds[nearest] or waiting:
            names = [ids[i] for i in order[: self.candidates] if experts.of(ids[i]) is not None]
            return names, waiting and bool(names)
        rivals = [
            i
            for i in order[1:]
            if sims[i] >= thresholds[i]
            and sims[nearest] - sims[i] <= self.contest_gap
            and experts.of(ids[i]) is not None
        ]
        if not rivals:
            return [], False  # the route stage's own decision, uncontested: never re-ranked
        contested = [nearest, *rivals] if experts.of(ids[nearest]) is not None else rivals
        return [ids[i] for i in contested[: self.candidates]], True

    def keeper_of(self, x: np.ndarray, domains: DomainTable, experts: DomainExperts) -> str | None:
        """The domain with an expert that the route stage's rule gives the text when the
        domains still waiting for their experts are left out (the nearest domain with an
        expert, if the text reaches its threshold), else None: what may have served the
        text before a waiting domain came nearer. In :meth:`rerank` a waiting domain's text
        stays with it when its expert explains the text's head at least as well as the
        trunk, unless another expert wins the text outright. (The trunk's own domains have
        no expert either and are left out too: hence the comparison with the trunk.)"""
        ids, sims, thresholds, _, _ = domains.scores(x)  # sims: (K,)
        for i in np.argsort(-sims, kind="stable"):
            if experts.of(ids[i]) is not None:
                return ids[i] if sims[i] >= thresholds[i] else None
        return None

    def choose(
        self,
        embedding_domain: str | None,
        trunk_loss: float,
        scored: Mapping[str, float],
        experts: DomainExperts,
    ) -> str | None:
        """The domain chosen from the candidates' losses ``scored`` (module docstring);
        with ``incumbent``, the candidates in the order their first expert was registered
        (not the order the domains were promoted: a domain promoted early may get its
        expert late, and must not take what an expert registered before it serves)."""
        if not self.incumbent:
            return choose(embedding_domain, trunk_loss, scored, self.margin, self.separation)
        order = sorted(scored, key=lambda d: (experts.since(d), d))
        return choose_keeping(
            embedding_domain, trunk_loss, scored, self.margin, self.separation, order
        )

    def rerank(
        self,
        mixture: Mixture | BatchedMixture,
        gate: Gate,
        tokens: Callable[[], torch.Tensor],
        embedding: np.ndarray,
        domains: DomainTable,
        experts: DomainExperts,
        decision: GateDecision,
    ) -> tuple[GateDecision, dict[str, Any] | None]:
        """``(decision, what the step saw)``; the gate's ``decision`` when not re-ranked
        (then None). ``tokens()``: ``(1, T)`` the prompt's tokens (cut to ``max_tokens``),
        called only for a decision that is re-ranked (most are not: no tokenising then)."""
        names, contested = self.candidates_of(embedding, domains, experts, decision)
        if not names:
            return decision, None
        ids = tokens()[:, : self.max_tokens]  # (1, T)
        if ids.shape[1] < 2:
            return decision, None
        x = np.asarray(embedding, dtype=np.float32).reshape(-1)  # (dim,)
        # the weights each candidate's text would be served with (the gate's own mixing)
        mixes = {d: gate._mix(x, experts.of(d)) for d in names}
        rows = [{}] + [mixes[d] for d in names]
        batch = ids.expand(len(rows), -1)  # (1 + C, T)
        with torch.no_grad():
            losses, _ = mixture.token_losses(batch, None, rows)  # (1 + C, T-1)
        mean = losses.mean(dim=1).tolist()  # (1 + C,)
        scored = dict(zip(names, mean[1:], strict=True))
        held = decision.domain_id
        if contested and experts.of(held) is None:  # a domain waiting for its expert
            keeper = self.keeper_of(x, domains, experts)
            if keeper is not None and scored.get(keeper, np.inf) <= mean[0]:
                held = keeper  # its expert explains the text at least as well as the trunk
        chosen = self.choose(held, mean[0], scored, experts)
        mix = []
        if chosen is None and decision.domain_id is None:
            mix = tied(mean[0], scored, self.mix_margin, self.separation, self.mix_top)
        info = {
            "trunk_loss": round(mean[0], 4),
            "losses": {d: round(v, 4) for d, v in scored.items()},
            "changed": chosen != decision.domain_id or bool(mix),
        }
        if contested:
            info["contested"] = True
        if mix:
            info["mixed"] = mix
            weights = mixed_weights(mixes, mix)
            return GateDecision(None, decision.similarity, weights, decision.domain_version), info
        if chosen == decision.domain_id:
            return decision, info
        row = domains.get(chosen)
        if row is None:
            return decision, info  # the row left the table meanwhile
        centroid = np.asarray(row.centroid, dtype=np.float32)  # (dim,)
        similarity = float(centroid @ x) / max(float(np.linalg.norm(centroid)), 1e-12)
        return GateDecision(chosen, similarity, mixes[chosen], decision.domain_version), info


def likelihood_router(section: Any) -> LikelihoodRouter | None:
    """The router an ``[experts]`` section (:class:`experts.config.ExpertsConfig`) asks for;
    None when ``gate_likelihood_candidates`` is 0 (the step is off)."""
    if section.gate_likelihood_candidates == 0:
        return None
    return LikelihoodRouter(
        section.gate_likelihood_candidates,
        section.gate_likelihood_margin,
        section.gate_likelihood_separation,
        section.gate_likelihood_max_tokens,
        section.gate_likelihood_mix_margin,
        contest_gap=section.gate_likelihood_contest_gap,
        incumbent=section.gate_likelihood_incumbent,
        contest_waiting=section.gate_likelihood_contest_waiting,
    )
