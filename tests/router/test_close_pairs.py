"""Close neighbours (two languages of one family, two languages of one programming family)
are found as two domains, one after the other and mixed from an empty table; small
streams of the shipped many-domain corpus, no bench."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from router.config import RouterConfig
from tests.support.route_discover import Loop
from worx.scenario import Scenario

pytestmark = pytest.mark.slow  # each test streams hundreds of documents (4-11 s)

PAIRS = [("prose_es", "prose_pt"), ("c_code", "cpp_code")]


@pytest.fixture(scope="module")
def many() -> Scenario:
    return Scenario.from_directory("many")


def _own_domain_share(loop: Loop, docs, label: str) -> float:
    """Share of ``label``'s documents whose nearest final centroid is a domain of that label."""
    hints = {r.domain_id: r.label_hint for r in loop.discover.table.rows()}
    vectors = loop.route.embedder.embed([d.text for d in docs if d.domain == label])
    nearest = [loop.route.table.nearest(v)[0] for v in vectors]
    return float(np.mean([hints.get(d) == label for d in nearest]))


@pytest.mark.parametrize("first,second", PAIRS)
def test_a_close_neighbour_after_a_known_domain_is_its_own_domain(many, first, second):
    loop = Loop(RouterConfig(job_docs=120))
    stream = list(many.phased([first, second], per_domain=220, seed=3))
    for doc in stream:
        loop.feed(doc)
    labels = Counter(r.label_hint for r in loop.discover.table.rows())
    assert labels[first] >= 1 and labels[second] >= 1, labels
    for label in (first, second):
        assert _own_domain_share(loop, stream, label) >= 0.9


@pytest.mark.parametrize(
    ("names", "share"),
    [
        (["c_code", "cpp_code", "javascript_code", "typescript_code"], 0.85),
        # two language pairs whose pages share one manual's layout; their diacritics tell
        # them apart (Spanish with Catalan still chains: docs/discovery.md "Many domains")
        (["prose_es", "prose_pt", "prose_sv", "prose_da"], 0.9),
    ],
)
def test_close_neighbours_mixed_from_an_empty_table_are_kept_apart(many, names, share):
    loop = Loop(RouterConfig(job_docs=120))
    stream = list(many.mixture(1600, names, seed=5))
    for doc in stream:
        loop.feed(doc)
    labels = Counter(r.label_hint for r in loop.discover.table.rows())
    assert set(labels) == set(names), labels
    for label in names:
        assert _own_domain_share(loop, stream, label) >= share
