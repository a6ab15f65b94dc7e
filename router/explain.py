"""Why a text gets the domain and the experts it gets: the gate's decision, explained.

:func:`explain_route` runs the gate (:class:`router.gate.Gate`) on one embedding and says
what it saw: the nearest active domains with their cosine, threshold, core threshold and
cohesion, the rule that decided (:meth:`Gate.choose_domain`), why in one sentence, and the
experts and weights chosen. The likelihood step and the perplexities belong to the server
(:meth:`experts.serving.ExpertServer.explain`), which adds them to this answer.

Example
-------
>>> import numpy as np
>>> from router.gate import DomainExperts, Gate, GateExpert
>>> from router.records import DomainRecord
>>> from router.table import DomainTable
>>> table = DomainTable()
>>> for name, centroid in (("code", [1.0, 0.0]), ("prose", [0.0, 1.0])):
...     _ = table.apply(DomainRecord(name, centroid, 0.5, 10, 0.8))
>>> experts = DomainExperts([GateExpert("code-e1", "code", [1.0, 0.0])])
>>> decision, why = explain_route(np.array([0.9, 0.1], np.float32), table, experts, Gate())
>>> decision.weights, why["decision"]["rule"], why["served_by"]
({'code-e1': 1.0}, 'threshold', 'experts')
>>> [(d["domain_id"], d["cosine"]) for d in why["nearest"]]
[('code', 0.9), ('prose', 0.1)]
>>> explain_route(np.array([0.1, 0.9], np.float32), table, experts, Gate())[1]["served_by"]
'trunk'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from router.gate import DomainExperts, Gate, GateDecision
from router.naming import display_name
from router.records import DomainRecord
from router.table import DomainTable


def domain_name(row: DomainRecord | None) -> str | None:
    """A domain's human name (:func:`router.naming.display_name`), None when it has none."""
    if row is None:
        return None
    name = display_name(row)
    return name if name and name != row.domain_id else None


def shown(domain_id: str | None, row: DomainRecord | None) -> str:
    """``name (id)`` for people, the id alone when the domain has no name."""
    if domain_id is None:
        return "(none)"
    name = domain_name(row)
    return f"{name} ({domain_id})" if name else domain_id


def explain_route(
    embedding: np.ndarray,
    domains: DomainTable,
    experts: DomainExperts,
    gate: Gate,
    chars: int | None = None,
    nearest: int = 5,
) -> tuple[GateDecision, dict[str, Any]]:
    """The gate's decision for ``embedding (dim,)`` and what it saw, as a JSON-able dict.

    ``chars``: the text's length (the length-aware rule), as :meth:`Gate.decide` takes it.
    ``nearest``: how many of the nearest active domains are listed.
    """
    x = np.asarray(embedding, dtype=np.float32).reshape(-1)  # (dim,)
    choice = gate.choose_domain(x, domains, chars)
    decision = gate.decide(x, domains, experts, chars)
    ids, sims, thresholds, cohesions, version = domains.scores(x)  # sims: (K,)
    order = np.argsort(-np.asarray(sims), kind="stable")[:nearest] if ids else []
    listed = []
    for i in order:
        row = domains.get(ids[i])
        index = experts.of(ids[i])
        listed.append(
            {
                "domain_id": ids[i],
                "name": domain_name(row),
                "cosine": round(float(sims[i]), 4),
                "threshold": round(float(thresholds[i]), 4),
                "core_threshold": round(float(row.core_threshold), 4) if row else None,
                "cohesion": round(float(cohesions[i]), 4),
                "length_floor": (
                    None
                    if chars is None
                    else round(
                        gate.length_floor(float(cohesions[i]), float(thresholds[i]), chars), 4
                    )
                ),
                "experts": list(index.ids) if index is not None else [],
            }
        )
    second = float(sims[order[1]]) if len(order) > 1 else None
    body: dict[str, Any] = {
        "chars": chars,
        "domain_version": version,
        "nearest": listed,
        "decision": {
            "domain_id": decision.domain_id,
            "name": domain_name(domains.get(decision.domain_id)) if decision.domain_id else None,
            "similarity": round(decision.similarity, 4),
            "rule": choice.rule,
            "uncertain": _uncertain(decision, domains),
        },
        "why": _why(choice, listed[0] if listed else None, second, gate, domains, chars),
        "experts": decision.weights,
        "served_by": "experts" if decision.weights else "trunk",
        "served_why": _served_why(decision, domains),
    }
    return decision, body


def _uncertain(decision: GateDecision, domains: DomainTable) -> bool:
    """Assigned below the domain's core threshold, or novel (what re-routes a text)."""
    row = domains.get(decision.domain_id) if decision.domain_id else None
    return row is None or decision.similarity < row.core_threshold


def _why(
    choice: Any,
    top: dict[str, Any] | None,
    second: float | None,
    gate: Gate,
    domains: DomainTable,
    chars: int | None,
) -> str:
    if choice.rule == "no_domains" or top is None:
        return "the domain table has no active domain yet: every text is novel"
    near = shown(top["domain_id"], domains.get(top["domain_id"]))
    cos, thr = top["cosine"], top["threshold"]
    if choice.rule == "threshold":
        core = top["core_threshold"] or 0.0
        tail = f", below its core threshold {core:.3f}: uncertain" if cos < core else ""
        return f"cosine {cos:.3f} to {near} reaches its threshold {thr:.3f}{tail}"
    floor = top["length_floor"]
    if choice.rule == "length_rule":
        return (
            f"cosine {cos:.3f} to {near} is below its threshold {thr:.3f}, but a {chars}-"
            f"character text needs only {floor:.3f} (length-aware rule) and is at least "
            f"{gate.margin:g} times as close as to the second domain"
        )
    if choice.rule == "between_domains":
        return (
            f"novel: cosine {cos:.3f} to {near} is close enough for a {chars}-character text "
            f"({floor:.3f}), but not {gate.margin:g} times the second domain's {second:.3f}"
        )
    asked = f" (a {chars}-character text needs {floor:.3f})" if floor is not None else ""
    return (
        f"novel: cosine {cos:.3f} to the nearest domain {near} is below its threshold "
        f"{thr:.3f}{asked}"
    )


def _served_why(decision: GateDecision, domains: DomainTable) -> str:
    if decision.domain_id is None:
        return "a novel text is served by the trunk alone"
    name = shown(decision.domain_id, domains.get(decision.domain_id))
    if not decision.weights:
        return (
            f"{name} has no expert: the trunk serves it (a domain the trunk already knows, "
            "or its expert is not trained or not registered yet)"
        )
    return f"the experts of {name} nearest the text (softmax of cosine / temperature)"
