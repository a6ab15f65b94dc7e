"""The gate's length-aware rule: prompt-length texts get their domain, not a wrong one."""

from __future__ import annotations

import numpy as np
import pytest

from router.gate import DomainExperts, Gate, GateExpert
from router.records import DomainRecord
from router.table import DomainTable
from tests.support.domains import promoted_row
from worx.bundled import domain_texts


def _unit(v) -> np.ndarray:
    x = np.asarray(v, dtype=np.float32)
    return x / np.linalg.norm(x)


def _whole_documents(domain: str, count: int, skip: int = 0) -> list[str]:
    return domain_texts(domain, count, skip)


@pytest.fixture(scope="module")
def real():
    from router.embed import default_embedder

    embedder = default_embedder()
    rows = {
        d: promoted_row(embedder, d)
        for d in ("python_code", "legal", "fiction_austen", "scripture", "news")
    }
    return embedder, rows


def _setup(rows: dict[str, DomainRecord], domains):
    table = DomainTable()
    for d in domains:
        table.apply(rows[d])
    experts = DomainExperts(GateExpert(f"{d}-e1", d, rows[d].centroid) for d in domains)
    return table, experts


def _served(gate, embedder, table, experts, texts, chars: bool) -> list[str | None]:
    vectors = embedder.embed(texts)
    lengths = [len(t) for t in texts] if chars else None
    decisions = gate.decide_many(vectors, table, experts, lengths)
    return [d.domain_id if d.weights else None for d in decisions]


def test_short_in_domain_texts_get_their_domain_expert(real) -> None:
    """Held-out documents cut to 256 characters: the table's rule leaves most on the trunk,
    the length-aware rule gives most their own domain's expert, almost none a wrong one."""
    embedder, rows = real
    table, experts = _setup(rows, rows)
    gate = Gate()
    own = wrong = old_own = total = 0
    for domain in rows:
        texts = [t[:256] for t in _whole_documents(domain, 25, skip=200)]
        ours = _served(gate, embedder, table, experts, texts, chars=True)
        before = _served(gate, embedder, table, experts, texts, chars=False)
        own += sum(s == domain for s in ours)
        wrong += sum(s is not None and s != domain for s in ours)
        old_own += sum(s == domain for s in before)
        total += len(texts)
    print(f"own {own}, wrong {wrong}, own by the table's rule {old_own}, of {total}")
    assert old_own / total < 0.3  # the whole-document thresholds miss prompts
    assert own / total >= 0.65
    assert wrong / total <= 0.04


def test_a_short_text_of_a_domain_without_a_row_gets_no_wrong_expert(real) -> None:
    """Scripture prompts against a table of code, legal and fiction: the nearest of those
    is not their domain, and the rule leaves them on the trunk."""
    embedder, rows = real
    table, experts = _setup(rows, ("python_code", "legal", "fiction_austen"))
    texts = [t[:256] for t in _whole_documents("scripture", 25, skip=200)]
    texts.append("And God said, Let there be light: and there was light.")
    served = _served(Gate(), embedder, table, experts, texts, chars=True)
    assert sum(s is not None for s in served) <= 2, served


DOMAINS = {"code": [1, 0, 0], "legal": [0, 1, 0], "fiction": [0, 0, 1]}


def _toy(threshold: float = 0.8, cohesion: float = 0.85):
    table = DomainTable()
    for d, c in DOMAINS.items():
        table.apply(DomainRecord(d, _unit(c).tolist(), threshold, 10, cohesion))
    experts = DomainExperts(GateExpert(f"{d}-e1", d, _unit(c).tolist()) for d, c in DOMAINS.items())
    return table, experts


def test_without_a_length_the_gate_is_the_route_stage_and_with_one_it_only_adds() -> None:
    rng = np.random.default_rng(3)
    table, experts = _toy()
    gate = Gate()
    docs = [_unit(rng.normal(size=3) + 2 * np.eye(3)[i % 3]) for i in range(400)]
    added = 0
    for doc in docs:
        route_domain = table.decide(doc)[0]
        assert gate.decide(doc, table, experts).domain_id == route_domain
        for chars in (50, 256, 5000):
            domain = gate.decide(doc, table, experts, chars=chars).domain_id
            if route_domain is not None:
                assert domain == route_domain
            added += domain is not None and route_domain is None
    assert added > 0


def test_the_rule_is_length_aware_and_needs_a_margin() -> None:
    table, experts = _toy()  # thresholds 0.8, cohesion 0.85
    gate = Gate()
    # an embedding whose best cosine is 0.35 (code), second 0.05: novel for the table
    probe = np.array([0.35, 0.05, 0.0], np.float32)
    assert table.decide(probe)[0] is None
    assert gate.decide(probe, table, experts, chars=100).domain_id == "code"  # a prompt
    assert gate.decide(probe, table, experts, chars=5000).domain_id is None  # a document
    assert gate.decide(probe, table, experts).domain_id is None  # length unknown
    # between two domains: no margin, the trunk
    between = np.array([0.35, 0.32, 0.0], np.float32)
    decision = gate.decide(between, table, experts, chars=100)
    assert decision.domain_id is None and decision.weights == {}
    # floor = inf turns the rule off
    assert Gate(floor=float("inf")).decide(probe, table, experts, chars=100).domain_id is None
    assert gate.length_scale(100) < gate.length_scale(1000) < gate.length_scale(5000) == 1.0


def test_invariance_under_the_length_aware_rule() -> None:
    """A new expert moves only its own domain's texts; a new domain takes texts or leaves
    them to the trunk, never sends one to a third domain's expert."""
    rng = np.random.default_rng(1)
    dim = 16
    centroids = {f"d{i}": _unit(rng.normal(size=dim)) for i in range(6)}
    table = DomainTable()
    for d, c in centroids.items():
        table.apply(DomainRecord(d, c.tolist(), 0.6, 10, 0.7))
    experts = [GateExpert(f"{d}-e1", d, c.tolist(), 1) for d, c in list(centroids.items())[:4]]
    docs = np.stack(
        [_unit(centroids[f"d{i % 6}"] + 1.2 * rng.normal(size=dim)) for i in range(600)]
    )
    chars = [int(c) for c in rng.integers(40, 3000, size=len(docs))]
    gate = Gate()
    before = gate.decide_many(docs, table, DomainExperts(experts), chars)
    assert (
        sum(
            b.domain_id is not None and table.decide(d)[0] is None
            for b, d in zip(before, docs, strict=True)
        )
        > 0
    )

    grown = DomainExperts([*experts, GateExpert("d4-e1", "d4", centroids["d4"].tolist(), 2)])
    after = gate.decide_many(docs, table, grown, chars)
    for b, a in zip(before, after, strict=True):
        assert a.domain_id == b.domain_id
        if b.domain_id != "d4":
            assert a.weights == b.weights

    new = _unit(centroids["d1"] + 0.6 * rng.normal(size=dim))
    table.apply(DomainRecord("d6", new.tolist(), 0.6, 10, 0.7))
    with_d6 = DomainExperts([*experts, GateExpert("d6-e1", "d6", new.tolist(), 2)])
    after = gate.decide_many(docs, table, with_d6, chars)
    moved = [(b, a) for b, a in zip(before, after, strict=True) if a.weights != b.weights]
    assert moved
    assert all(a.domain_id in ("d6", None) for _, a in moved)


def test_the_monitor_routes_a_short_text_as_the_length_aware_gate_does(real) -> None:
    from monitor.routing import GateRouter

    embedder, rows = real
    table, experts = _setup(rows, rows)
    texts = [t[:200] for t in _whole_documents("fiction_austen", 10, skip=200)]
    router = GateRouter(embedder, Gate(), table)
    vectors = embedder.embed(texts)
    expected = [
        Gate().route(v, table, experts, chars=len(t)) for v, t in zip(vectors, texts, strict=True)
    ]
    assert router.route(texts, experts) == expected
    assert sum(bool(w) for w in expected) > sum(
        bool(Gate().route(v, table, experts)) for v in vectors
    )


def test_bad_rule_settings_are_refused() -> None:
    for bad in ({"floor": 0.0}, {"ref_chars": 0.0}, {"power": -1.0}, {"margin": 0.9}):
        with pytest.raises(ValueError, match="length-aware"):
            Gate(**bad)
    table, experts = _toy()
    with pytest.raises(ValueError, match="one per row"):
        Gate().decide_many(np.eye(3, dtype=np.float32), table, experts, [10, 20])
