"""Every metric on small matrices computed by hand (see the comments for the arithmetic)."""

from __future__ import annotations

import doctest
import math

import pytest

from monitor import metrics
from monitor.metrics import (
    backward_transfer,
    forgetting_row,
    forward_transfer,
    relative_ppl_change_row,
    routing_change,
    routing_moves,
    summarise,
    summarise_all,
    transfer_to_unlearned,
)

# Domains: a (expert at step 1), b (expert at step 2), c (expert at step 3),
# u (never given an expert).
L = [
    #  a    b    c    u
    [4.0, 4.0, 4.0, 4.0],  # 0: trunk alone
    [2.0, 3.5, 4.0, 4.0],  # 1: +expert(a); b benefits a little
    [2.5, 2.0, 3.0, 4.5],  # 2: +expert(b); a worse by 0.5, c helped, u worse
    [2.2, 2.0, 1.0, 3.9],  # 3: +expert(c); a recovers partly
]
ARRIVALS = [1, 2, 3, None]


def test_forgetting_is_rise_above_best_earlier_value() -> None:
    assert forgetting_row(L, 0) == [None, None, None, None]  # nothing earlier
    assert forgetting_row(L, 1) == [-2.0, -0.5, 0.0, 0.0]
    # step 2: a: 2.5 - min(4, 2) = 0.5; b: 2 - 3.5; c: 3 - 4; u: 4.5 - 4
    assert forgetting_row(L, 2) == [0.5, -1.5, -1.0, 0.5]
    # step 3: a: 2.2 - 2.0 (the best was step 1, not the last step)
    got = forgetting_row(L, 3)
    assert got == pytest.approx([0.2, 0.0, -2.0, -0.1])


def test_relative_perplexity_change() -> None:
    got = relative_ppl_change_row(L, 2)
    assert got[0] == pytest.approx(math.exp(2.5) / math.exp(2.0) - 1)
    assert got[3] == pytest.approx(math.exp(0.5) - 1)


def test_averages_run_over_learned_domains_only() -> None:
    s = summarise(L, ARRIVALS, 2)
    # learned before step 2: only a  -> avg = max = 0.5
    assert s["forgetting_avg"] == pytest.approx(0.5)
    assert s["forgetting_max"] == pytest.approx(0.5)
    # all domains with a value: (0.5 - 1.5 - 1.0 + 0.5) / 4
    assert s["forgetting_all_avg"] == pytest.approx(-0.375)
    s3 = summarise(L, ARRIVALS, 3)
    # learned before step 3: a (0.2), b (0.0)
    assert s3["forgetting_avg"] == pytest.approx(0.1)
    assert s3["forgetting_max"] == pytest.approx(0.2)
    assert s3["relative_ppl_change_max"] == pytest.approx(math.expm1(0.2))
    assert s3["relative_ppl_change_avg"] == pytest.approx((math.expm1(0.2) + 0.0) / 2)


def test_backward_transfer_with_loss() -> None:
    assert backward_transfer(L, ARRIVALS, 0) is None
    assert backward_transfer(L, ARRIVALS, 1) is None  # a arrived now: GEM leaves it out
    # step 2: a: L[1,a] - L[2,a] = 2.0 - 2.5
    assert backward_transfer(L, ARRIVALS, 2) == pytest.approx(-0.5)
    # step 3: a: 2.0 - 2.2 = -0.2; b: 2.0 - 2.0 = 0 -> mean -0.1; c (now) and u excluded
    assert backward_transfer(L, ARRIVALS, 3) == pytest.approx(-0.1)


def test_forward_transfer_vs_trunk_alone() -> None:
    # a: L[0]-L[0] = 0; b: 4.0 - 3.5; c: 4.0 - 3.0; u: never given an expert
    assert forward_transfer(L, ARRIVALS) == [0.0, 0.5, 1.0, None]
    s = summarise(L, ARRIVALS)
    assert s["forward_transfer_avg"] == pytest.approx(0.75)  # b and c; a (first) excluded
    assert transfer_to_unlearned(L, ARRIVALS, 3) == pytest.approx([None, None, None, 0.1])


def test_domain_seen_only_once() -> None:
    # d appears (held-out set created) only at the last step, with its expert
    m = [[4.0, None], [2.0, None], [2.1, 1.5]]
    arrivals = [1, 2]
    assert forgetting_row(m, 2) == pytest.approx([0.1, None])
    s = summarise(m, arrivals)
    assert s["forgetting"][1] is None
    assert s["forgetting_avg"] == pytest.approx(0.1)
    assert s["forward_transfer"] == [0.0, None]  # no trunk-alone value for d
    assert s["backward_transfer"] == pytest.approx(-0.1)
    assert s["forgetting_all_avg"] == pytest.approx(0.1)


def test_domain_never_given_an_expert_is_outside_averages() -> None:
    m = [[3.0, 3.0], [1.0, 3.9]]
    s = summarise(m, [1, None])
    assert s["forgetting"] == pytest.approx([-2.0, 0.9])
    assert s["forgetting_avg"] is None  # nothing learned before step 1
    assert s["backward_transfer"] is None
    assert s["transfer_to_unlearned"] == pytest.approx([None, -0.9])


def test_zero_forgetting_when_nothing_changes() -> None:
    m = [[3.0, 3.0], [1.0, 3.0], [1.0, 2.0], [1.0, 2.0]]
    for s in summarise_all(m, [1, 2]):
        assert s["forgetting_avg"] in (None, 0.0)
        assert s["backward_transfer"] in (None, 0.0)


def test_bad_input_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        summarise([[1.0, 2.0], [1.0]], [1, None])
    with pytest.raises(ValueError, match="finite"):
        summarise([[1.0, math.inf]], [None, None])
    with pytest.raises(ValueError, match="arrivals"):
        summarise(L, [1, 2])
    with pytest.raises(ValueError, match="0 is the trunk"):
        summarise(L, [0, 2, 3, None])
    with pytest.raises(ValueError, match="no rows"):
        summarise([], [])


def test_routing_change_share_and_loss() -> None:
    before = {"d1": {"e1": 1.0}, "d2": {"e1": 1.0}, "d3": {}, "d4": {"e1": 1.0}}
    after = {"d1": {"e1": 1.0}, "d2": {"e2": 1.0}, "d3": {"e2": 1.0}, "d4": {"e1": 1.0}}
    lb = {"d1": 2.0, "d2": 2.0, "d3": 3.0, "d4": 2.0}
    la = {"d1": 2.0, "d2": 2.8, "d3": 2.6, "d4": 2.0}
    share, delta, changed = routing_change(before, after, lb, la)
    assert (share, changed) == (0.5, 2)
    assert delta == pytest.approx((0.8 - 0.4) / 4)
    # a weight shift alone (same experts) is a change too
    one = {"x": 1.0}
    shifted = routing_change({"x": {"e": 0.6, "f": 0.4}}, {"x": {"e": 0.5, "f": 0.5}}, one, one)
    assert shifted[2] == 1
    assert routing_change({}, {}, {}, {}) == (0.0, 0.0, 0)


def test_routing_moves_name_where_re_routed_documents_went() -> None:
    def doc(routing: dict, domain: str | None, loss: float) -> dict:
        return {"routing": routing, "domain": domain, "loss": loss}

    before = {
        "d1": doc({"e1": 1.0}, "a", 2.0),
        "d2": doc({"e1": 1.0}, "a", 2.0),
        "d3": doc({"e1": 1.0}, "a", 2.0),
        "d4": doc({"e1": 1.0}, "a", 2.0),
    }
    after = {
        "d1": doc({"e1": 1.0}, "a", 2.0),  # unchanged: not a move
        "d2": doc({}, "b", 3.0),  # to b, which has no expert yet: the trunk serves it
        "d3": doc({"e2": 1.0}, "c", 2.4),  # to c's expert
        "d4": doc({}, None, 3.2),  # novel
    }
    moves = routing_moves(before, after)
    assert moves == {
        "b/trunk": [1, pytest.approx(0.25)],
        "c": [1, pytest.approx(0.1)],
        "novel": [1, pytest.approx(0.3)],
    }
    lb = {k: v["loss"] for k, v in before.items()}
    la = {k: v["loss"] for k, v in after.items()}
    _, delta, changed = routing_change(
        {k: v["routing"] for k, v in before.items()},
        {k: v["routing"] for k, v in after.items()},
        lb,
        la,
    )
    assert sum(n for n, _ in moves.values()) == changed
    assert sum(d for _, d in moves.values()) == pytest.approx(delta)


def test_doctests() -> None:
    assert doctest.testmod(metrics).failed == 0
