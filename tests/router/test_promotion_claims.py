"""The claims test of promotion: a core whose threshold would take more of the buffer than
it holds waits, unless it has persisted for ``promote_claim_patience`` runs."""

from __future__ import annotations

import numpy as np
import pytest

from router.cluster import Candidate
from router.config import RouterConfig
from router.promotion import Promotion
from tests.support.route_discover import Loop
from worx.scenario import Scenario


def _core(stable: int, size: int = 50) -> Candidate:
    sims = np.full(size, 0.6, dtype=np.float32)
    centroid = np.zeros(8, dtype=np.float32)
    centroid[0] = 1.0
    return Candidate(list(range(size)), centroid, 0.6, sims, stable)


def _promotable(config: RouterConfig, core: Candidate, claimed: int) -> bool:
    return Promotion(config).promotable(core, lambda c: 1.0, lambda c, threshold: claimed)


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


@pytest.mark.slow  # streams 400 documents (~3 s)
def test_a_domain_with_a_wide_tail_is_found_alone():
    """Czech help pages and installation guide: the cores' thresholds take more loose
    Czech documents than the cores hold (the claims test alone never promotes them)."""
    loop = Loop(RouterConfig(job_docs=120))
    for doc in Scenario.from_directory("many").phased(["prose_cs"], per_domain=400, seed=3):
        loop.feed(doc)
    assert [r.label_hint for r in loop.discover.table.rows()] == ["prose_cs"]
