"""The inference gate: domain by the domain table, then only that domain's experts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from router.gate import DomainExperts, Gate, GateExpert
from router.records import DomainRecord
from router.table import DomainTable


def _unit(v) -> np.ndarray:
    x = np.asarray(v, dtype=np.float32)
    return x / np.linalg.norm(x)


def _table(rows: dict[str, tuple[list[float], float]]) -> DomainTable:
    table = DomainTable()
    for domain_id, (centroid, threshold) in rows.items():
        table.apply(DomainRecord(domain_id, _unit(centroid).tolist(), threshold, 10, 0.8))
    return table


DOMAINS = {"code": ([1, 0, 0], 0.6), "legal": ([0, 1, 0], 0.6), "fiction": ([0, 0, 1], 0.6)}
EXPERTS = [
    GateExpert("code-e1", "code", _unit([1, 0, 0]).tolist(), created_ms=1),
    GateExpert("legal-e1", "legal", _unit([0, 1, 0]).tolist(), created_ms=2),
]  # fiction: served by the trunk alone


def test_a_document_gets_its_domain_expert_or_the_trunk() -> None:
    gate, table, experts = Gate(), _table(DOMAINS), DomainExperts(EXPERTS)
    assert gate.route(_unit([0.9, 0.2, 0.1]), table, experts) == {"code-e1": 1.0}
    # nearest to an expert's centroid is legal's, but its domain is fiction: the trunk
    fiction_doc = _unit([0.0, 0.5, 0.7])
    assert gate.decide(fiction_doc, table, experts)[:1] == ("fiction",)
    assert gate.route(fiction_doc, table, experts) == {}
    novel = _unit([1, 1, 1])  # 0.577 to every centroid: below every threshold
    decision = gate.decide(novel, table, experts)
    assert decision.domain_id is None and decision.weights == {}
    assert decision.domain_version == table.version
    assert gate.route(novel, DomainTable(), experts) == {}  # no domain known yet


def test_top_k_mixes_only_experts_of_the_same_domain() -> None:
    table = _table(DOMAINS)
    experts = DomainExperts(
        [
            *EXPERTS,
            GateExpert("code-e2", "code", _unit([1, 0.5, 0]).tolist(), created_ms=3),
        ]
    )
    doc = _unit([0.9, 0.3, 0.0])
    sims = np.array([_unit([1, 0, 0]) @ doc, _unit([1, 0.5, 0]) @ doc])
    for temperature in (0.05, 1.0):
        w = Gate(top_k=3, temperature=temperature).route(doc, table, experts)
        assert set(w) == {"code-e1", "code-e2"}  # legal-e1 is never mixed into code
        expected = np.exp(sims / temperature) / np.exp(sims / temperature).sum()
        assert w["code-e1"] == pytest.approx(expected[0], rel=1e-5)
        assert sum(w.values()) == pytest.approx(1.0)
    assert Gate(top_k=1).route(doc, table, experts) == {"code-e2": 1.0}  # the nearer one


def test_experts_sharing_the_domain_centroid_tie_to_the_newest() -> None:
    table = _table(DOMAINS)
    centroid = _unit([1, 0, 0]).tolist()
    drifted = [
        GateExpert("z-old", "code", centroid, created_ms=10),
        GateExpert("a-new", "code", centroid, created_ms=20),
    ]
    assert Gate().route(_unit([1, 0.1, 0]), table, DomainExperts(drifted)) == {"a-new": 1.0}
    same_time = [GateExpert("b", "code", centroid), GateExpert("a", "code", centroid)]
    assert Gate().route(_unit([1, 0.1, 0]), table, DomainExperts(same_time)) == {"a": 1.0}
    w = Gate(top_k=2).route(_unit([1, 0.1, 0]), table, DomainExperts(drifted))
    assert w == {"a-new": pytest.approx(0.5), "z-old": pytest.approx(0.5)}


def test_a_retired_domain_serves_nobody() -> None:
    table = _table(DOMAINS)
    row = table.get("code")
    table.apply(dataclasses.replace(row, status="retired", version=2))
    assert Gate().route(_unit([0.9, 0.2, 0.1]), table, DomainExperts(EXPERTS)) == {}


def test_invariance_new_experts_and_domains_only_move_their_own_documents() -> None:
    """What stays invariant: a document's weights depend only on its domain decision and
    that domain's experts. Checked on random domains, experts and documents."""
    rng = np.random.default_rng(0)
    dim = 16
    centroids = {f"d{i}": _unit(rng.normal(size=dim)) for i in range(6)}
    table = DomainTable()
    for d, c in centroids.items():
        table.apply(DomainRecord(d, c.tolist(), 0.2, 10, 0.8))
    experts = [
        GateExpert(f"{d}-e{j}", d, _unit(c + 0.3 * rng.normal(size=dim)).tolist(), j)
        for d, c in list(centroids.items())[:4]  # d4, d5: served by the trunk
        for j in range(2)
    ]
    docs = [_unit(centroids[f"d{i % 6}"] + 0.6 * rng.normal(size=dim)) for i in range(300)]
    gate = Gate(top_k=2, temperature=0.2)
    before = gate.decide_many(np.stack(docs), table, DomainExperts(experts))
    assert {b.domain_id for b in before} >= {"d4", "d5"}

    # an expert for d1, and one for the trunk-served d4, arrive
    grown = DomainExperts(
        [
            *experts,
            GateExpert("d1-e9", "d1", _unit(rng.normal(size=dim)).tolist(), 9),
            GateExpert("d4-e1", "d4", centroids["d4"].tolist(), 9),
        ]
    )
    after = gate.decide_many(np.stack(docs), table, grown)
    for b, a in zip(before, after, strict=True):
        assert a.domain_id == b.domain_id
        if b.domain_id not in ("d1", "d4"):
            assert a.weights == b.weights
    assert any(a.weights != b.weights for a, b in zip(before, after, strict=True))

    # a new domain (with an expert) arrives: only documents it now wins can move
    new = _unit(centroids["d5"] + 0.5 * rng.normal(size=dim))
    table.apply(DomainRecord("d6", new.tolist(), 0.2, 10, 0.8))
    with_d6 = DomainExperts([*experts, GateExpert("d6-e1", "d6", new.tolist(), 9)])
    after = gate.decide_many(np.stack(docs), table, with_d6)
    moved = [a for a, b in zip(after, before, strict=True) if a.weights != b.weights]
    assert moved and all(a.domain_id == "d6" for a in moved)


def test_bad_input_is_refused_clearly() -> None:
    table, experts = _table(DOMAINS), DomainExperts(EXPERTS)
    with pytest.raises(ValueError, match="same embedder"):
        Gate().route(np.ones(5, np.float32), table, experts)
    with pytest.raises(ValueError, match="listed twice"):
        DomainExperts([EXPERTS[0], EXPERTS[0]])
    with pytest.raises(ValueError, match="same embedder"):
        DomainExperts([EXPERTS[0], GateExpert("code-e2", "code", [1.0, 0.0])])
    mismatched = DomainExperts([GateExpert("code-e1", "code", [1.0, 0.0])])
    with pytest.raises(ValueError, match="same embedder"):
        Gate().route(_unit([1, 0, 0]), table, mismatched)
    for bad in ({"top_k": 0}, {"temperature": 0.0}):
        with pytest.raises(ValueError):
            Gate(**bad)


def test_the_gate_decides_the_domain_the_route_stage_decides() -> None:
    """Same embedder, same table: the gate's domain is the route stage's, text by text."""
    from ingest.records import Doc
    from router.embed import default_embedder
    from router.route import RouteStage
    from tests.support.experts import domain_record, domain_texts
    from worx.stage import Message

    embedder = default_embedder()
    table = DomainTable()
    for domain in ("python_code", "legal", "fiction_austen", "scripture"):
        table.apply(domain_record(embedder, domain))
    experts = DomainExperts(
        [GateExpert("code-e1", "python_code", table.get("python_code").centroid)]
    )
    stage = RouteStage(table=table, embedder=embedder)
    texts = [
        t
        for d in ("python_code", "legal", "fiction_austen", "news")
        for t in domain_texts(d, 6, skip=300)
    ]
    decided = set()
    for i, text in enumerate(texts):
        [emit] = stage.process(Message(b"", topic="docs", partition=0, offset=i), Doc("d", text))
        decision = Gate().decide(embedder.embed([text])[0], table, experts)
        assert decision.domain_id == emit.record.domain_id
        assert (decision.weights != {}) == (decision.domain_id == "python_code")
        decided.add(decision.domain_id)
    assert {"python_code", "legal", "fiction_austen"} <= decided
