"""Routing a request to its experts: the gate's decision (and the likelihood step's), or
the experts or domain the request names.

Routing goes through the server's domain table (``worx.domains``): a request's text gets
its domain by the route stage's rule, and only that domain's experts can serve it
(:class:`router.gate.Gate`). An expert whose domain the server does not know (yet) is
served to nobody by the gate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from experts.serving.explain import with_rerank
from experts.serving.request import RequestError, encode
from experts.table import ExpertTable
from router.explain import explain_route
from router.gate import GateDecision

if TYPE_CHECKING:
    from experts.serving import ExpertServer


def route(
    server: ExpertServer, text: str, table: ExpertTable, explain: bool = False
) -> tuple[GateDecision, dict[str, Any] | None, dict[str, Any] | None]:
    """The decision, what the likelihood step saw (None: it did not run), and with
    ``explain`` the gate's decision explained (:func:`router.explain.explain_route`)."""
    embedding = embed(server, text)
    experts = table.by_domain
    if explain:
        decision, why = explain_route(embedding, server.domains, experts, server.gate, len(text))
    else:
        decision, why = server.gate.decide(embedding, server.domains, experts, len(text)), None
    step = server.likelihood
    if step is None or step.candidates == 0:
        return decision, None, why
    limit = min(step.max_tokens, server.max_tokens)
    chosen, likelihood = step.rerank(
        server.mixture(table),
        server.gate,
        lambda: encode(server.trunk, text, limit)[0],
        embedding,
        server.domains,
        experts,
        decision,
    )
    if why is not None and likelihood is not None:
        why = with_rerank(why, chosen, likelihood, step, server.domains)
    return chosen, likelihood, why


def embed(server: ExpertServer, text: str) -> np.ndarray:
    return np.asarray(server.embedder.embed([text]))[0]  # (dim,)


def weights(
    server: ExpertServer,
    text: str,
    table: ExpertTable,
    expert_weights: dict[str, float] | None,
    explain: bool = False,
    domain: str | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """The weights to serve ``text`` with, and what the answer says about the routing
    (with ``explain``: the gate's reasons under ``explain``, even when the request named
    its experts). ``domain``: the gate's weights among that domain's experts, whatever
    domain the text itself would get."""
    if domain is not None and expert_weights is None:
        chosen = server.gate.domain_weights(embed(server, text), table.by_domain, domain)
        return chosen, {"routed_by": "domain", "domain": domain}
    if expert_weights is not None:
        unknown = sorted(set(expert_weights) - set(table))
        if unknown:
            raise RequestError(f"unknown expert(s) {unknown}; GET /experts lists them")
        routing: dict[str, Any] = {"routed_by": "request"}
        if explain:
            # the gate's own choice, for comparison; the perplexity is the request's
            why = route(server, text, table, True)[2]
            routing["explain"] = {**why, "overridden": True, "requested": expert_weights}
        return expert_weights, routing
    decision, likelihood, why = route(server, text, table, explain)
    routing = {
        "routed_by": "gate",
        "domain": decision.domain_id,
        "domain_version": decision.domain_version,
    }
    if likelihood is not None:  # the step re-ranked an unsure decision
        routing["likelihood"] = likelihood
    if why is not None:
        routing["explain"] = why
    return decision.weights, routing
