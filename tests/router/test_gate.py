"""The inference gate: top-k, temperature, threshold, id-keyed stability, embedder agreement."""

from __future__ import annotations

import numpy as np
import pytest

from router.gate import CentroidIndex, Gate


def _unit(v: list[float]) -> np.ndarray:
    x = np.asarray(v, dtype=np.float32)
    return x / np.linalg.norm(x)


CENTROIDS = {"code": _unit([1, 0, 0]), "legal": _unit([0, 1, 0]), "bio": _unit([0, 0, 1])}


def test_top1_picks_the_nearest_centroid_with_weight_one() -> None:
    gate = Gate(top_k=1)
    assert gate.weights(_unit([0.9, 0.2, 0.1]), CENTROIDS) == {"code": 1.0}
    assert gate.weights(_unit([0.1, 0.2, 0.9]), CENTROIDS) == {"bio": 1.0}


def test_top2_softmax_with_temperature() -> None:
    x = _unit([0.8, 0.6, 0.0])
    sims = np.array([0.8, 0.6])
    for temperature in (0.05, 1.0):
        w = Gate(top_k=2, temperature=temperature).weights(x, CENTROIDS)
        assert list(w) == ["code", "legal"]
        expected = np.exp(sims / temperature) / np.exp(sims / temperature).sum()
        assert w["code"] == pytest.approx(expected[0], rel=1e-5)
        assert sum(w.values()) == pytest.approx(1.0)
    sharp = Gate(top_k=2, temperature=0.01).weights(x, CENTROIDS)
    assert sharp["code"] > 0.99


def test_nothing_close_enough_is_trunk_only() -> None:
    gate = Gate(top_k=2, min_similarity=0.9)
    assert gate.weights(_unit([1, 1, 1]), CENTROIDS) == {}
    assert gate.weights(_unit([1, 0.1, 0]), CENTROIDS) == {"code": 1.0}  # legal is below 0.9
    assert Gate().route_many(np.zeros((2, 3)), CentroidIndex([], np.zeros((0, 3)))) == [{}, {}]


def test_adding_an_unrelated_expert_keeps_routing_and_order_is_irrelevant() -> None:
    gate = Gate(top_k=2, temperature=0.2)
    docs = np.stack([_unit([0.9, 0.3, 0.1]), _unit([0.2, 0.1, 0.95])])
    before = gate.route_many(docs, CentroidIndex.from_mapping(CENTROIDS))
    grown = {"zeta": _unit([-1, -1, -1]), **dict(reversed(list(CENTROIDS.items())))}
    after = gate.route_many(docs, CentroidIndex.from_mapping(grown))
    assert after == before


def test_ties_break_by_id_and_bad_input_is_refused() -> None:
    index = CentroidIndex(["b", "a"], np.array([[1.0, 0.0], [1.0, 0.0]]))
    assert Gate(top_k=1).route(np.array([1.0, 0.0]), index) == {"a": 1.0}
    with pytest.raises(ValueError, match="same embedder"):
        Gate().route(np.ones(5), index)
    with pytest.raises(ValueError, match="unique"):
        CentroidIndex(["a", "a"], np.eye(2))
    for bad in ({"top_k": 0}, {"temperature": 0.0}, {"min_similarity": 2.0}):
        with pytest.raises(ValueError):
            Gate(**bad)


def test_gate_with_the_router_embedder_routes_domain_text_to_its_centroid() -> None:
    embed = pytest.importorskip("router.embed")
    embedder = embed.default_embedder()
    code = [
        "def add(a, b):\n    return a + b",
        "import os\nfor f in os.listdir('.'):\n    print(f)",
    ]
    legal = ["The court held that the contract was void.", "The appellant filed a motion."]
    centroids = {
        "code": embedder.embed(code).mean(axis=0),
        "legal": embedder.embed(legal).mean(axis=0),
    }
    gate = Gate(top_k=1)
    doc = embedder.embed(["def mul(x, y):\n    return x * y"])[0]
    assert gate.weights(doc, centroids) == {"code": 1.0}
    doc = embedder.embed(["The court dismissed the appeal."])[0]
    assert gate.weights(doc, centroids) == {"legal": 1.0}
