"""The claims test of promotion: a core whose threshold would take more of the buffer than
it holds waits, unless it has persisted for ``promote_claim_patience`` runs or came as a
burst (``promote_burst_rate``); a burst is no known domain's tail by the level test."""

from __future__ import annotations

import numpy as np
import pytest

from router.cluster import Candidate
from router.config import RouterConfig
from router.promotion import Promotion
from router.records import DomainRecord
from tests.support.route_discover import Loop
from worx.scenario import Scenario


def _core(stable: int, size: int = 50) -> Candidate:
    sims = np.full(size, 0.6, dtype=np.float32)
    centroid = np.zeros(8, dtype=np.float32)
    centroid[0] = 1.0
    return Candidate(list(range(size)), centroid, 0.6, sims, stable)


def _promotable(config: RouterConfig, core: Candidate, claimed: int, rate: float = 0.05) -> bool:
    """``rate``: the share of the stream the core's documents made up while they arrived
    (0.05: one kind among dozens)."""
    return Promotion(config).promotable(core, lambda c: rate, lambda c, threshold: claimed)


@pytest.mark.parametrize(
    ("stable", "claimed", "patience", "expected"),
    [
        (3, 50, 8, True),  # claims no more than it holds
        (3, 51, 8, False),  # a young core that would take more: wait
        (7, 120, 8, False),
        (8, 120, 8, True),  # persisted for the patience: its claims are its own tail
        (30, 120, 0, False),  # patience 0: the claims test always holds
    ],
)
def test_claims_wait_until_the_core_has_persisted(stable, claimed, patience, expected):
    config = RouterConfig(promote_claim_patience=patience)
    assert _promotable(config, _core(stable), claimed) is expected


def test_claims_test_off_and_patience_checked():
    assert _promotable(RouterConfig(promote_max_claim_ratio=0.0), _core(3), 10_000)
    with pytest.raises(ValueError, match="promote_claim_patience"):
        RouterConfig(promote_claim_patience=-1).validate()


@pytest.mark.parametrize(
    ("rate", "burst_rate", "expected"),
    [
        (0.3, 0.2, True),  # a kind arriving alone: its claims are its own loose documents
        (0.2, 0.2, True),
        (0.1, 0.2, False),  # one kind among many: the claims test holds
        (0.9, 0.0, False),  # off
    ],
)
def test_a_burst_skips_the_claims_test(rate, burst_rate, expected):
    config = RouterConfig(promote_burst_rate=burst_rate)
    assert _promotable(config, _core(3), 120, rate=rate) is expected


def test_a_burst_is_no_known_domains_tail_by_the_level_test():
    """A core whose members pass a known domain's level bar belongs to it, unless it came
    as a burst; the centroid tests (merge_similarity, belong_separation) hold either way."""
    policy = Promotion(RouterConfig())
    row = DomainRecord("dom-a", [1.0] + [0.0] * 7, 0.2, 50, 0.5, core_threshold=0.4)
    core = _core(3)
    member_sims = np.full(50, 0.35, dtype=np.float32)  # above the bar 0.3
    assert policy.belongs(row, 0.65, core, member_sims, rate=lambda c: 0.05)
    assert not policy.belongs(row, 0.65, core, member_sims, rate=lambda c: 0.5)
    assert policy.belongs(row, 0.9, core, member_sims, rate=lambda c: 0.5)  # merge_similarity
    with pytest.raises(ValueError, match="promote_burst_rate"):
        RouterConfig(promote_burst_rate=-0.1).validate()


@pytest.mark.slow  # streams 400 documents (~3 s)
def test_a_domain_with_a_wide_tail_is_found_alone():
    """Czech help pages and installation guide: the cores' thresholds take more loose
    Czech documents than the cores hold (the claims test alone never promotes them)."""
    loop = Loop(RouterConfig(job_docs=120))
    for doc in Scenario.from_directory("many").phased(["prose_cs"], per_domain=400, seed=3):
        loop.feed(doc)
    assert [r.label_hint for r in loop.discover.table.rows()] == ["prose_cs"]
