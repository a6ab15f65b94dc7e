"""Entry order: the timeline, the source document's timestamp carried by route, and
promotion judged in entry order when discover reads a lagging partition of worx.routed."""

from __future__ import annotations

import json

import pytest

from ingest.records import Doc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import RoutedDoc
from router.route import RouteStage
from router.timeline import Timeline, window
from tests.support.route_discover import Loop
from worx.scenario import Scenario
from worx.stage import Message


def test_timeline_counts_by_entry_key_whatever_the_consumption_order() -> None:
    line = Timeline(horizon=4)
    for key in [(30, 0), (10, 0), (20, 1), (20, 0)]:
        line.add(key)
    assert line.between((20, 0), (30, 0)) == 3
    assert line.between((11, 0), (19, 9)) == 0
    line.add((40, 0))  # over the horizon: the first consumed, (30, 0), is dropped
    assert line.between((0, 0), (99, 0)) == 4 and line.between((30, 0), (30, 0)) == 0
    twin = Timeline(horizon=4)
    twin.restore(json.loads(json.dumps(line.snapshot())))
    assert twin.between((0, 0), (99, 0)) == 4 and twin.snapshot() == line.snapshot()


def test_window_takes_keys_at_quantiles() -> None:
    keys = [(i, 0) for i in range(100, 0, -1)]
    assert window(keys, 0.25, 0.75) == ((26, 0), (75, 0))


def test_route_carries_when_the_document_entered() -> None:
    stage = RouteStage()
    msg = Message(b"", topic="t.docs", partition=1, offset=7, timestamp_ms=500)
    [stamped] = stage.process(msg, Doc(doc_id="a", text="some text", created_ms=123))
    [unstamped] = stage.process(msg, Doc(doc_id="b", text="some text"))
    assert stamped.record.doc_created_ms == 123  # the Doc's own timestamp
    assert unstamped.record.doc_created_ms == 500  # else when it was written to worx.docs
    old = json.loads(stamped.record.to_json())
    del old["doc_created_ms"]  # a record written by an older route worker
    assert RoutedDoc.from_dict(old).doc_created_ms == 0


@pytest.mark.slow
@pytest.mark.parametrize("lag", [0, 160, 200])
def test_each_domain_is_promoted_when_a_partition_of_routed_lags(lag: int) -> None:
    # two partitions of worx.routed, the second `lag` documents behind: discover consumes
    # legal decisions of one partition while the other still delivers scripture's, and
    # the burst test counts the stream between entry keys of partly consumed spans
    # (python_code is not used here: its codec tables may split off whatever the lag)
    stream = Scenario.from_directory().phased(["scripture", "legal"], per_domain=160, seed=6)
    loop = Loop(RouterConfig(job_docs=60), lag=lag)
    for doc in stream:
        loop.feed(doc)
    loop.flush()
    hints = sorted(r.label_hint for r in loop.discover.table.rows())
    assert hints == ["legal", "scripture"]
    promotions = [e for e in loop.events() if e.detector == "promotion"]
    assert len(promotions) == 2


def test_a_snapshot_from_before_entry_keys_is_refused() -> None:
    stage = DiscoverStage(RouterConfig(embed_dim=64))
    old = {**stage.snapshot(), "format": 1}
    del old["timeline"]
    with pytest.raises(ValueError, match="format 1 .*delete the snapshot"):
        DiscoverStage(RouterConfig(embed_dim=64)).restore(old)
