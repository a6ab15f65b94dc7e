"""What hostile input can no longer grow or break: dead-letter size, decode failures inside
the runner, and the bounded structures (watcher ids, live jobs, waiting registrations,
metric label sets). No broker: the structures are fed directly."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prometheus_client import generate_latest

from experts.records import ExpertRegistration
from ingest.dead_letters import REASONS, dead_letter, reason_class
from ingest.records import DeadLetter, Doc
from monitor.figures import build_state
from monitor.history import MatrixHistory
from monitor.live import LiveState
from monitor.prom import make_registry
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord
from router.route import RouteStage
from topology.composition.topics import Topics
from topology.loop.watcher import LoopState, LoopWatcher, RecentIds
from topology.runtimes.expert_registrations import ExpertRegistrations
from topology.runtimes.stage_runner import apply_stage
from trainer.records import TrainStatus
from worx.stage import Message

NOWHERE = {"bootstrap.servers": "127.0.0.1:9"}  # clients are built, never connected


def test_a_dead_letter_of_a_huge_record_stays_small_and_says_what_it_cut():
    raw = b'{"doc_id": "' + b"x" * 750_000  # malformed, 750 KB
    [emit] = apply_stage(RouteStage(), Message(raw, topic="p.docs", offset=4), "route")
    letter = emit.record
    encoded = letter.to_json()
    assert len(encoded) < 100_000  # (librdkafka refuses messages over 1 MB)
    assert letter.reason == "not_json" and letter.original_size == len(raw)
    assert raw.startswith(letter.original()) and len(letter.original()) == 64 * 1024
    assert hashlib.sha256(raw).hexdigest() in letter.detail
    huge_detail = dead_letter(Message(b"x"), "stage_error", "d" * 1_000_000, "route")
    assert len(huge_detail.detail) <= 2000


def test_decode_failures_and_stage_crashes_become_dead_letters_not_crashes():
    route = RouteStage()
    deep = Message(b"[" * 100_000, topic="p.docs", partition=1, offset=9)
    [emit] = apply_stage(route, deep, "route")  # (a RecursionError crash-looped route)
    assert (emit.topic, emit.record.reason) == ("dlq", "too_deep")
    assert (emit.record.source_partition, emit.record.source_offset) == (1, 9)

    class Exploding(RouteStage):
        def process(self, message, record=None):
            raise RecursionError("maximum recursion depth exceeded")

    good = Doc(doc_id="d1", text="some text").to_json()
    [emit] = apply_stage(Exploding(), Message(good, topic="p.docs"), "route")
    assert emit.record.reason == "stage_error" and "RecursionError" in emit.record.detail
    # a dead letter that cannot be handled is dropped, never dead-lettered again (a loop)
    assert apply_stage(Exploding(), Message(good, topic="p.dlq"), "x") == []


def test_reason_classes_are_a_fixed_vocabulary():
    assert reason_class("too_deep") == "too_deep" and "too_deep" in REASONS
    assert reason_class("x" * 50) == reason_class("made-up\n") == "other"
    live = LiveState()
    for i in range(500):
        live.dead_letter(f"forged-{i}")
    live.dead_letter("not_json")
    assert live.snapshot()["dead_letters"] == {"other": 500, "not_json": 1}
    restored = LiveState()
    restored.restore({"dead_letters": {"forged-a": 2, "forged-b": 3, "empty": 1}})
    assert restored.dead_letters == {"other": 5, "empty": 1}


def test_live_jobs_are_bounded_and_metrics_carry_no_job_id(tmp_path: Path):
    live = LiveState(max_jobs=3)
    for i in range(10):
        status = TrainStatus(
            job_id=f"job-{i}", domain_id=f"dom-{i % 2}", state="step", step=i, total_steps=10,
            created_ms=1000 + i,
        )  # fmt: skip
        live.train_status(status.to_dict())
    assert list(live.snapshot()["jobs"]) == ["job-7", "job-8", "job-9"]  # the latest three
    state = build_state(MatrixHistory(tmp_path), live.snapshot())
    text = generate_latest(make_registry(lambda: state)).decode()
    progress = [line for line in text.splitlines() if line.startswith("worx_train_progress{")]
    assert progress == [
        'worx_train_progress{domain="dom-0",name="dom-0",state="step"} 0.8',
        'worx_train_progress{domain="dom-1",name="dom-1",state="step"} 0.9',
    ]  # one series per domain (its latest job), whatever the number of jobs
    assert "job_id" not in text


def test_registrations_waiting_for_an_unknown_domain_are_bounded_and_dead_lettered():
    waiting = ExpertRegistrations(NOWHERE, "p.experts", max_waiting=3)
    stage = DiscoverStage(RouterConfig())
    for i in range(5):
        reg = ExpertRegistration(
            expert_id=f"e{i}", domain_id="dom-never", sha256="0" * 64,
            trunk_fingerprint="f" * 64, centroid=[1.0],
        )  # fmt: skip
        waiting.arrived.put((reg, Message(reg.to_json(), topic="p.experts", offset=i)))
    emits = waiting.apply(stage)
    assert [(e.topic, e.record.reason, e.record.source_offset) for e in emits] == [
        ("dlq", "unknown_domain", 0),
        ("dlq", "unknown_domain", 1),
    ]
    assert list(waiting.waiting) == ["e2", "e3", "e4"]
    row = DomainRecord("dom-never", [1.0] + [0.0] * (stage.embedder.dim - 1), 0.5, 10, 0.8)
    stage.apply_domain(row)
    assert [e.record.expert_ids for e in waiting.apply(stage)][-1] == ["e2", "e3", "e4"]
    assert not waiting.waiting
    waiting.stop()  # (never started: closes its client)


def test_the_loop_watcher_keeps_bounded_state_and_counts_what_it_cannot_read():
    ids = RecentIds(capacity=100)
    for i in range(1000):
        ids.add(f"d{i}")
        ids.add(f"d{i}")  # a replay right after: not counted again
    assert len(ids) == 1000 and len(ids._recent) == 100 and "d999" in ids and "d0" not in ids
    watcher = LoopWatcher(NOWHERE, Topics("p"))
    assert isinstance(watcher.state, LoopState)
    watcher._apply("docs", b"[" * 100_000)
    watcher._apply("nope", b"{}")  # a topic it does not know: counted, not a crash
    watcher._apply("dlq", DeadLetter("forged reason\n", "", "").to_json())
    for i in range(2000):
        watcher._apply("docs", Doc(doc_id=f"d{i}", text="t", label=f"label-{i}").to_json())
    state = watcher.state
    assert state.undecodable == 3 and state.undecodable_reasons["too_deep"] == 1
    assert state.docs == 2000 and len(state.docs_by_label) <= 1001
    assert sum(state.docs_by_label.values()) == 2000
    watcher._consumer.close()
