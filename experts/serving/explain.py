"""Explain: why a text gets its domain and experts, the likelihood step's part included."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from experts.likelihood_routing import LikelihoodRouter
from router.explain import domain_name, shown
from router.gate import GateDecision
from router.table import DomainTable

if TYPE_CHECKING:
    from experts.serving import ExpertServer


def explain(server: ExpertServer, text: str) -> dict[str, Any]:
    """Why ``text`` gets its domain and experts: the nearest domains (cosine, threshold),
    the rule that decided and why, the likelihood step if it ran, the experts and
    weights, and the perplexity with them and with the trunk alone."""
    result = server.score(text, explain=True)
    return {
        **result["explain"],
        "table_version": result["table_version"],
        "truncated": result["truncated"],
    }


def with_rerank(
    why: dict[str, Any],
    chosen: GateDecision,
    seen: dict[str, Any],
    step: LikelihoodRouter,
    domains: DomainTable,
) -> dict[str, Any]:
    """The explanation after the likelihood step re-ranked the gate's unsure decision."""
    changed = bool(seen.get("changed"))
    losses = ", ".join(f"{shown(d, domains.get(d))} {v:.3f}" for d, v in seen["losses"].items())
    mixed = seen.get("mixed") or []
    tied = " and ".join(shown(d, domains.get(d)) for d in mixed)
    if mixed:
        verdict = (
            f"{tied} explain it about as well, each at least {step.mix_margin} nats/token "
            "better than the trunk: it gets their experts mixed, no single domain"
        )
    elif changed:
        verdict = f"it moved the text to {shown(chosen.domain_id, domains.get(chosen.domain_id))}"
    else:
        verdict = "no candidate's expert was clearly better: the gate's decision stands"
    reason = "another domain claimed it too" if seen.get("contested") else "the gate was unsure"
    why = {
        **why,
        "likelihood": {
            **seen,
            "margin": step.margin,
            "separation": step.separation,
            "mix_margin": step.mix_margin,
            "why": f"{reason}; the likelihood step scored the candidates' experts "
            f"(mean loss per token: trunk {seen['trunk_loss']:.3f}; {losses}): {verdict}",
        },
    }
    if changed:
        why["decision"] = {
            **why["decision"],
            "domain_id": chosen.domain_id,
            "name": domain_name(domains.get(chosen.domain_id)) if chosen.domain_id else None,
            "similarity": round(chosen.similarity, 4),
            "rule": "likelihood",
        }
        why["experts"] = chosen.weights
        why["served_by"] = "experts" if chosen.weights else "trunk"
        name = shown(chosen.domain_id, domains.get(chosen.domain_id))
        why["served_why"] = (
            f"the experts of {tied}, mixed by the likelihood step"
            if mixed
            else f"the experts of {name}, the likelihood step's choice"
        )
    return why
