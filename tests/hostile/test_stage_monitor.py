"""The monitor under hostile input on every topic it reads, on the real embedded broker.

Every input topic of `worx monitor` (``drift``, ``train``, ``train.status``, ``experts``,
``dlq``, ``docs``, ``routed``) and the domain table it follows get the hostile catalogue
of :mod:`tests.support.hostile_records` between good records, in one run. The monitor
keeps running; what it keeps of the good records (jobs, progress, drift events,
registrations, labels, the routing table, the evaluation history) equals a clean
in-process run's; every hostile record of a topic it decodes is on ``worx.dlq`` with its
reason. Dead letters on ``dlq`` itself that do not decode are counted, never
re-dead-lettered; ``docs`` and ``routed`` are only counted by the monitor (route and
discover dead-letter what they cannot use), so their hostile records are counted there.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from experts.records import ExpertRegistration
from ingest.records import DeadLetter, Doc
from monitor.live import LiveState
from monitor.stage import MonitorStage
from router.records import DomainRecord, DriftEvent, RoutedDoc, TrainJob
from tests.support.hostile_records import (
    Hostile,
    Shape,
    catalogue,
    check_dead_letters,
    dead_letters,
    interleave,
    reasons_by_kind,
    send,
    until,
)
from tests.support.smallrun import SmallRun, run_copy, small_run  # noqa: F401 - fixtures
from topology.composition.topics import Topics
from topology.runtimes.stage_runner import StageRunner
from topology.runtimes.table_follower import TableFollower
from trainer.records import TrainStatus
from worx.stage import Message

pytestmark = pytest.mark.broker
DECODED = ("drift", "train", "train.status", "experts")  # topics whose records it decodes
COUNTED = ("docs", "routed", "dlq")  # topics it counts (dlq: decodes, never re-dead-letters)


def _good(prefix: str, registration: ExpertRegistration) -> dict[str, list]:
    docs = f"{prefix}.docs"
    job = TrainJob(
        job_id="job-news",
        domain_id="news",
        reason="new_domain",
        refs=[{"topic": docs, "partition": 0, "start": 0, "end": 4}],
        train_doc_ids=["d-0", "d-1"],
        heldout_doc_ids=["d-2"],
        centroid=list(registration.centroid),
    )
    return {
        "docs": [Doc(doc_id=f"d-{i}", text=f"a good document {i}") for i in range(3)],
        "routed": [
            RoutedDoc(
                doc_id="d-0",
                domain_id=None,
                similarity=0.1,
                docs_topic=docs,
                docs_partition=0,
                docs_offset=0,
            )
        ],
        "dlq": [
            DeadLetter(
                reason="not_json", detail="upstream", original_b64="", source_topic="company"
            )
        ],
        "drift": [
            DriftEvent("ev-1", "novelty_rate", "new_domain", None, {"rate": 0.5}, 0, 9),
        ],
        "train": [job],
        "train.status": [
            TrainStatus(
                job_id="job-news",
                domain_id="news",
                state="step",
                step=2,
                total_steps=9,
                created_ms=1000,
            )
        ],
        "experts": [registration],  # already evaluated: a replay, no new row
    }


def _hostile(good: dict[str, list], dim: int) -> dict[str, list[Hostile]]:
    doc, routed, letter = good["docs"][0], good["routed"][0], good["dlq"][0]
    event, job, status, reg = (
        good["drift"][0],
        good["train"][0],
        good["train.status"][0],
        (good["experts"][0]),
    )
    out = {
        "docs": catalogue(doc, Shape("doc_id", "part", path_safe_id=False)),
        "routed": catalogue(routed, Shape("doc_id", "docs_offset", "similarity")),
        "dlq": catalogue(letter, Shape("stage", "source_offset")),
        "drift": catalogue(
            event,
            Shape("event_id", "window_start_offset"),
            dataclasses.replace(event, statistics={"rate": 0.9}),
            "accepted",  # the first event of an id is kept, as in a clean run
        ),
        "train": catalogue(
            job,
            Shape("job_id", "created_ms", None, "centroid", dim),
            dataclasses.replace(job, heldout_doc_ids=["d-1"]),
            "accepted",  # the latest job of an id is kept, as in a clean run
        ),
        "train.status": catalogue(
            status,
            Shape("job_id", "step", "loss"),
            dataclasses.replace(status, step=3),
            "accepted",  # progress: the latest status wins
        ),
        "experts": catalogue(
            reg, Shape("expert_id", "num_params", None, "centroid", dim, path_safe_id=True)
        ),
    }
    foreign = dataclasses.replace(
        job, job_id="job-foreign", refs=[{"topic": "secrets", "partition": 0, "start": 0, "end": 1}]
    )
    out["train"].append(Hostile("foreign_topic", "job-foreign", foreign.to_json()))
    ghost = dataclasses.replace(reg, expert_id="ghost-e1")  # an expert the store lacks
    out["experts"].append(Hostile("unknown_expert", "ghost-e1", ghost.to_json()))
    for topic in COUNTED:  # not dead-lettered by the monitor: counted
        out[topic] = [dataclasses.replace(h, expect="counted") for h in out[topic]]
    # the monitor never evaluates by the centroid of a job or a registration: another
    # dimension is no error there (the routing table's rows are what it routes by)
    # (a registration of another dimension names an expert the store lacks: refused)
    for topic in ("train",):
        out[topic] = [
            dataclasses.replace(h, expect="accepted") if h.kind == "wrong_dimension" else h
            for h in out[topic]
        ]
    return out


def _monitor(prefix: str, run: SmallRun, evaluator, state_dir: Path) -> MonitorStage:
    return MonitorStage(
        prefix,
        run.history,
        run.heldout,
        LiveState(),
        evaluator=evaluator,
        store=run.store,
        trunk_fingerprint=run.trunk.fingerprint,
        state_dir=state_dir,
    )


def test_monitor_dead_letters_hostile_records_and_keeps_what_a_clean_run_keeps(
    run_copy: SmallRun,  # noqa: F811 - the fixture imported above
    kafka_conf: dict,
    topics: Topics,
    tmp_path: Path,
) -> None:
    expert_id = next(iter(run_copy.experts))
    _, _, centroid = run_copy.experts[expert_id]
    manifest = run_copy.store.manifest(expert_id)
    registration = manifest.registration()
    good = _good(topics.prefix, registration)
    bad = _hostile(good, len(centroid))
    row = DomainRecord("dom-news", list(registration.centroid), 0.2, 10, 0.5, label_hint="news")
    bad_rows = catalogue(
        row,
        Shape("domain_id", "version", "threshold", "centroid", len(centroid)),
        dataclasses.replace(row, label_hint="hijacked"),
    )
    history_steps = len(run_copy.history.rows("ours"))

    stage = _monitor(topics.prefix, run_copy, run_copy.evaluator, tmp_path / "hostile")
    sent_rows = send(kafka_conf, topics.domains, [(row.domain_id, row.to_json()), *bad_rows])
    sent: dict[str, list] = {}
    for suffix, records in good.items():
        items = interleave([(_key(r), r.to_json()) for r in records], bad[suffix])
        sent[suffix] = send(kafka_conf, topics.name(suffix), items)
    follower = TableFollower(kafka_conf, topics.domains, stage.apply_domain)
    runner = StageRunner(
        stage,
        kafka_conf,
        topics,
        [topics.name(s) for s in good],
        f"{topics.prefix}-monitor",
        "monitor",
        batch_size=50,
        session_timeout_ms=6000,
        followers=[follower],
    )
    stop = threading.Event()
    follower.start()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        expected = [(topics.domains, o) for i, o in sent_rows if isinstance(i, Hostile)]
        for suffix in DECODED:
            expected += [
                (topics.name(suffix), o)
                for i, o in sent[suffix]
                if isinstance(i, Hostile) and i.expect == "dlq"
            ]
        found = dead_letters(kafka_conf, topics.dlq, expected, timeout_s=120)
        totals = {s: len(items) for s, items in sent.items()}
        totals["dlq"] += len(expected)  # the dead letters written meanwhile: it reads them too
        until(
            lambda: all(stage.live.totals.get(s, 0) >= n for s, n in totals.items()),
            120,
            "every message counted",
        )
        assert thread.is_alive() and follower.healthy()
    finally:
        stop.set()
        thread.join(timeout=30)
        follower.stop()
    assert stage.live.totals == totals  # each message counted once, none lost
    check_dead_letters(found, sent_rows, topics.domains)
    for suffix in DECODED:
        check_dead_letters(found, sent[suffix], topics.name(suffix))
    for suffix in COUNTED:  # the monitor dead-letters nothing of these topics
        check_dead_letters(found, [(("good",), o) for _, o in sent[suffix]], topics.name(suffix))
    reasons = reasons_by_kind(found, sent["experts"], topics.experts)
    assert reasons["unknown_expert"] == "unknown_expert"
    assert reasons_by_kind(found, sent["train"], topics.train)["foreign_topic"] == "foreign_topic"
    assert reasons_by_kind(found, sent_rows, topics.domains)["duplicate_changed"] == (
        "conflicting_duplicate"
    )
    undecodable = sum(1 for h in bad["dlq"] if not _decodes(DeadLetter, h.value))
    assert undecodable >= 12 and stage.live.dead_letters["undecodable_dead_letter"] == undecodable

    # the clean run: the good records only (and the accepted hostile ones), in process
    clean = _monitor(topics.prefix, run_copy, None, tmp_path / "clean")
    clean.apply_domain(row)
    for suffix in good:
        for item, offset in sent[suffix]:
            if isinstance(item, Hostile) and item.expect != "accepted":
                continue
            value = item.value if isinstance(item, Hostile) else item[1]
            message = Message(value, topic=topics.name(suffix), partition=0, offset=offset)
            assert clean.process(message) == []
    mine, theirs = stage.snapshot(), clean.snapshot()
    assert mine["jobs"] == theirs["jobs"] and "job-news" in mine["jobs"]
    for part in ("jobs", "drift", "registrations"):
        assert mine["live"][part] == theirs["live"][part], part
    assert stage.labels.snapshot() == clean.labels.snapshot() == {"dom-news": "news"}
    assert stage.domains.table.rows() == clean.domains.table.rows() == [row]
    assert len(run_copy.history.rows("ours")) == history_steps  # nothing written by a forgery


def _key(record) -> str | None:
    for name in ("doc_id", "event_id", "job_id", "expert_id"):
        if hasattr(record, name):
            return getattr(record, name)
    return None


def _decodes(record_type, value: bytes | None) -> bool:
    try:
        record_type.from_json(value, strict=False)
    except ValueError:
        return False
    return True
