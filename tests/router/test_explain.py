"""router.explain: the explanation agrees with the gate and names the rule that decided."""

from __future__ import annotations

import numpy as np
import pytest

from router.explain import explain_route
from router.gate import DomainExperts, Gate, GateExpert
from router.records import DomainRecord
from router.table import DomainTable


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float64)
    return (v / np.linalg.norm(v)).tolist()


@pytest.fixture
def table() -> DomainTable:
    table = DomainTable()
    rows = (("code", unit(1, 0, 0), "Python code"), ("law", unit(0, 1, 0), None))
    for domain_id, centroid, name in rows:
        table.apply(DomainRecord(domain_id, centroid, 0.8, 10, 0.9, core_threshold=0.85, name=name))
    return table


EXPERTS = DomainExperts([GateExpert("code-e1", "code", unit(1, 0, 0))])


@pytest.mark.parametrize(
    ("vector", "chars", "rule", "domain"),
    [
        ((1, 0.1, 0), None, "threshold", "code"),  # cosine 0.995 >= 0.8
        ((0.5, 0.05, 0.86), None, "below_threshold", None),  # far from both
        ((0.5, 0.05, 0.86), 200, "length_rule", "code"),  # short: the floor is lower
        ((0.5, 0.45, 0.74), 200, "between_domains", None),  # close, but not apart
        ((0.1, 1, 0), None, "threshold", "law"),  # a domain without expert
    ],
)
def test_the_explained_decision_is_the_gates_and_names_its_rule(table, vector, chars, rule, domain):
    x = np.asarray(unit(*vector), dtype=np.float32)
    gate = Gate()
    decision, why = explain_route(x, table, EXPERTS, gate, chars)
    assert decision == gate.decide(x, table, EXPERTS, chars)
    assert (why["decision"]["domain_id"], why["decision"]["rule"]) == (domain, rule)
    assert why["experts"] == decision.weights
    assert why["served_by"] == ("experts" if decision.weights else "trunk")
    nearest = why["nearest"]
    assert [d["domain_id"] for d in nearest] == sorted(
        ("code", "law"), key=lambda d: -float(np.dot(table.get(d).centroid, x))
    )
    assert f"{nearest[0]['cosine']:.3f}" in why["why"]
    if domain is None:
        assert why["why"].startswith("novel:") and "trunk alone" in why["served_why"]
    if domain == "law":
        assert "has no expert" in why["served_why"]
    if domain == "code":
        assert "Python code (code)" in why["why"] + why["served_why"]


def test_an_empty_table_says_so():
    decision, why = explain_route(
        np.asarray(unit(1, 0), np.float32), DomainTable(), EXPERTS, Gate()
    )
    assert decision.domain_id is None and why["decision"]["rule"] == "no_domains"
    assert why["nearest"] == [] and "no active domain" in why["why"]
