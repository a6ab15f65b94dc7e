"""Domain names: the majority given label, else distinctive terms; old rows still load."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from router.config import RouterConfig
from router.naming import SEPARATOR, display_name
from router.records import DomainRecord
from tests.support.route_discover import Loop
from worx.scenario import Scenario

ORDER = ["legal", "python_code"]
CONFIG = RouterConfig(job_docs=120)


@pytest.fixture(scope="module")
def stream() -> list:
    return list(Scenario.from_directory().phased(ORDER, per_domain=200, seed=3))


def _names(docs: list, labelled: bool) -> dict[str, str | None]:
    loop = Loop(CONFIG)
    for doc in docs:
        loop.feed(
            doc if labelled else SimpleNamespace(doc_id=doc.doc_id, text=doc.text, domain=None)
        )
    return {r.domain_id: r.name for r in loop.discover.table.rows()}


@pytest.mark.slow
def test_labelled_stream_names_domains_by_majority_label(stream: list) -> None:
    assert sorted(_names(stream, labelled=True).values()) == sorted(ORDER)


@pytest.mark.slow
def test_unlabelled_stream_names_domains_by_distinct_terms(stream: list) -> None:
    names = list(_names(stream, labelled=False).values())
    assert len(names) == 2, names
    assert all(name and name not in ORDER for name in names), names
    legal, code = ({*n.split(SEPARATOR)} for n in names)
    assert legal and code and not legal & code, names  # no word names both


def test_a_row_written_before_names_loads_and_displays() -> None:
    old = {
        "schema_version": 1,
        "domain_id": "dom-a",
        "centroid": [1.0, 0.0],
        "threshold": 0.5,
        "size": 10,
        "cohesion": 0.8,
    }
    row = DomainRecord.from_dict(old)
    assert row.name is None and display_name(row) == "dom-a"
    assert display_name({**old, "label_hint": "legal"}) == "legal"
    assert display_name(DomainRecord.from_dict({**old, "name": "court·plaintiff"})) == (
        "court·plaintiff"
    )
    assert display_name(None) == ""
