"""Discovery on the bundled corpus: one job per new domain, silence on a stationary stream."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ingest.records import Doc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord, RoutedDoc
from router.route import RouteStage
from tests.support.route_discover import Loop
from worx.scenario import Scenario
from worx.stage import Message

ORDER = ["legal", "fiction_austen", "biomedical", "python_code"]
CONFIG = RouterConfig(job_docs=120)


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario.from_directory()


@pytest.fixture(scope="module")
def phased(scenario: Scenario) -> tuple[Loop, list]:
    loop = Loop(CONFIG)
    stream = list(scenario.phased(ORDER, per_domain=250, seed=1))
    for doc in stream:
        loop.feed(doc)
    return loop, stream


@pytest.mark.slow
def test_each_new_domain_yields_exactly_one_job(phased: tuple[Loop, list]) -> None:
    loop, stream = phased
    rows = {r.domain_id: r for r in loop.discover.table.rows()}
    assert sorted(r.label_hint for r in rows.values()) == sorted(ORDER)
    new_jobs = [j for j in loop.jobs() if j.reason == "new_domain"]
    assert Counter(j.domain_id for j in new_jobs) == Counter(dict.fromkeys(rows, 1))
    promotions = [e for e in loop.events() if e.detector == "promotion"]
    assert sorted(e.domain_id for e in promotions) == sorted(rows)
    ids_in_stream = {d.doc_id: d.domain for d in stream}
    for job in new_jobs:
        assert not set(job.train_doc_ids) & set(job.heldout_doc_ids)
        assert len(job.train_doc_ids) + len(job.heldout_doc_ids) >= CONFIG.job_docs
        assert 0 < len(job.heldout_doc_ids) < len(job.train_doc_ids)
        labels = Counter(ids_in_stream[d] for d in job.train_doc_ids)
        assert labels.most_common(1)[0][0] == rows[job.domain_id].label_hint
        assert labels.most_common(1)[0][1] >= 0.9 * len(job.train_doc_ids)
        # every document is named by reference: its offset lies in one of the ranges
        covered = {o for ref in job.refs for o in range(ref["start"], ref["end"])}
        offsets = {d.doc_id: i for i, d in enumerate(stream)}
        assert {offsets[d] for d in job.train_doc_ids} <= covered


@pytest.mark.slow
def test_detection_is_prompt(phased: tuple[Loop, list]) -> None:
    loop, _ = phased
    rows = {r.domain_id: r.label_hint for r in loop.discover.table.rows()}
    for seq, emit in loop.emits:
        if getattr(emit.record, "detector", None) == "promotion":
            phase_start = ORDER.index(rows[emit.record.domain_id]) * 250
            assert seq - phase_start <= 200


@pytest.mark.slow
def test_stationary_stream_fires_nothing(phased: tuple[Loop, list], scenario: Scenario) -> None:
    loop, _ = phased
    before = len(loop.emits)
    for doc in scenario.mixture(1500, ORDER, seed=11):
        loop.feed(doc)
    fired = [e.record for _, e in loop.emits[before:] if e.topic in ("drift", "train")]
    assert fired == []
    assert not [
        e for _, e in loop.emits[before:] if e.topic == "domains" and e.record.version == 1
    ]  # no new domain


@pytest.mark.slow
def test_replay_is_deterministic_and_snapshot_resumes_exactly(scenario: Scenario) -> None:
    stream = list(scenario.phased(["news", "scripture"], per_domain=150, seed=2))
    config = RouterConfig(job_docs=80)
    whole = Loop(config)
    for doc in stream:
        whole.feed(doc)
    first = Loop(config)
    for doc in stream[:170]:
        first.feed(doc)
    state = json.loads(json.dumps(first.discover.snapshot()))  # must be plain JSON
    second = Loop(config)
    second.discover.restore(state)
    for row in first.route.table.rows():
        second.route.table.apply(row)
    second.seq = first.seq
    for doc in stream[170:]:
        second.feed(doc)
    as_json = [(s, e.topic, e.record.to_json()) for s, e in first.emits + second.emits]
    assert as_json == [(s, e.topic, e.record.to_json()) for s, e in whole.emits]
    assert len(whole.jobs()) == 2


def test_rejects_wrong_input_and_foreign_snapshot() -> None:
    stage = DiscoverStage(RouterConfig(embed_dim=64))
    with pytest.raises(TypeError, match="RoutedDoc"):
        stage.process(Message(b""), DomainRecord("d", [1.0], 0.1, 1, 1.0))
    other = DiscoverStage(RouterConfig(embed_dim=32))
    with pytest.raises(ValueError, match="embedder"):
        other.restore(stage.snapshot())
    routed = RoutedDoc("x1", "unknown-domain", 0.9, "t", 0, 0)
    assert stage.process(Message(b"", topic="t", partition=0, offset=0), routed) == []
    assert stage.offsets == {"t:0": 1}


@pytest.mark.slow
def test_a_kind_that_trickles_in_gets_its_job_after_waiting(scenario: Scenario) -> None:
    """Legal arrives in a burst of 250, then one document in five: never quiet, and far from
    job_docs. With job_wait_docs its domain gets its first job once it has waited so many
    decisions; without it, never during the stream."""
    legal, fiction = scenario.domains["legal"], scenario.domains["fiction_austen"]
    stream = list(legal[:250])
    for k in range(1200):  # the trickle: legal 1 in 5, fiction the rest
        stream.append(legal[250 + k // 5] if k % 5 == 0 else fiction[k])
    base = {"job_docs": 1000, "job_min_docs": 60, "job_quiet_docs": 1000}
    seen = {}
    for wait in (0, 600):
        loop = Loop(RouterConfig(**base, job_wait_docs=wait))
        for doc in stream:
            loop.feed(doc)
        rows = {r.domain_id: r for r in loop.records(DomainRecord)}
        seen[wait] = [
            j
            for j in loop.jobs()
            if j.reason == "new_domain" and rows[j.domain_id].label_hint == "legal"
        ]
    assert seen[0] == []
    assert len(seen[600]) == 1 and len(seen[600][0].train_doc_ids) >= 60


def _routed_with_replays(scenario: Scenario, config: RouterConfig, replay_every: int) -> tuple:
    """Route + discover over a phased stream; with ``replay_every``, after each so many
    documents route routes the last 30 again and sends them on (a worker that crashed
    before committing its batch), deciding with the table it has by then."""
    stream = list(scenario.phased(["news", "scripture"], per_domain=150, seed=2))
    route = RouteStage(config)
    discover = DiscoverStage(config, embedder=route.embedder)
    emits, offset = [], 0

    def send(i: int) -> None:
        nonlocal offset
        doc = stream[i]
        entered = Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain, created_ms=i + 1)
        msg = Message(b"", topic="t.docs", partition=0, offset=i, timestamp_ms=i + 1)
        [routed] = route.process(msg, entered)
        rmsg = Message(b"", topic="t.routed", partition=0, offset=offset, timestamp_ms=i + 1)
        offset += 1
        for emit in discover.process(rmsg, routed.record):
            if isinstance(emit.record, DomainRecord):
                route.table.apply(emit.record)
            emits.append((emit.topic, emit.record.to_json()))

    for i in range(len(stream)):
        send(i)
        if replay_every and (i + 1) % replay_every == 0:
            for j in range(i - 29, i + 1):
                send(j)
    return discover, emits


def test_a_route_workers_replayed_batch_is_applied_once(scenario: Scenario) -> None:
    """Found by the 30-minute chaos run: discover applied the decisions of every batch a
    killed route worker routed again (10,736 decisions for 7,261 documents), counting them
    twice in its novelty rate, detectors and clustering schedule. Each document now counts
    once: the same emits and state as a stream without replays."""
    config = RouterConfig(job_docs=80)
    plain, plain_emits = _routed_with_replays(scenario, config, 0)
    replayed, replayed_emits = _routed_with_replays(scenario, config, 50)
    assert replayed.seen == plain.seen == 300
    assert replayed_emits == plain_emits
    assert any(topic == "train" for topic, _ in plain_emits)
    mine, theirs = replayed.snapshot(), plain.snapshot()
    for state in (mine, theirs):
        state.pop("offsets")
    assert mine == theirs
    restored = DiscoverStage(config, embedder=replayed.embedder)
    restored.restore(json.loads(json.dumps(replayed.snapshot())))
    assert restored.decided.replayed("does-not-exist") is False
    assert restored.decided.replayed(plain.clusterer.items[0]["doc_id"]) is True
