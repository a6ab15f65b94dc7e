"""The discover stage under hostile input on the three topics it reads, on the real broker.

``worx.routed`` (its input), ``worx.domains`` and ``worx.experts`` (its followers) each get
the hostile catalogue of :mod:`tests.support.hostile_records` between good records, in
one run of :class:`~topology.runtimes.discover_runner.DiscoverRunner`. It keeps running, issues
the same jobs and domain rows as a clean in-process run of the same stage over the good
records, and every hostile record is on ``worx.dlq`` with its reason.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from experts.records import ExpertRegistration
from ingest.records import Doc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord, RoutedDoc, TrainJob
from router.route import RouteStage
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
from tests.support.kafka import drain, read_messages
from topology.composition.topics import Topics
from topology.runtimes.discover_runner import DiscoverRunner
from worx.scenario import Scenario
from worx.stage import Message

pytestmark = pytest.mark.broker
CONFIG = RouterConfig(job_docs=60)


def _routed(topics: Topics) -> list[RoutedDoc]:
    """What a route worker that knows no domain makes of a two-domain stream."""
    stream = Scenario.from_directory().phased(["legal", "biomedical"], per_domain=120, seed=4)
    route = RouteStage(CONFIG)
    out = []
    for offset, doc in enumerate(stream):
        message = Message(b"", topic=topics.docs, partition=0, offset=offset)
        entered = Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain, created_ms=offset + 1)
        [emit] = route.process(message, entered)
        out.append(emit.record)
    return out


def _outputs(records: list) -> tuple[set, set]:
    jobs = {(r.job_id, r.domain_id) for r in records if isinstance(r, TrainJob)}
    rows = {
        (r.domain_id, r.version, tuple(r.expert_ids), r.status)
        for r in records
        if isinstance(r, DomainRecord)
    }
    return jobs, rows


def test_discover_dead_letters_every_hostile_record_and_issues_the_clean_runs_jobs(
    kafka_conf: dict, topics: Topics, tmp_path: Path
):
    routed = _routed(topics)
    dim = RouteStage(CONFIG).embedder.dim
    # a row of someone else's (retired, so it routes nothing) and its expert's registration
    external = DomainRecord(
        "dom-ext", [1.0] + [0.0] * (dim - 1), 0.5, 10, 0.8, status="retired", core_threshold=0.6
    )
    registration = ExpertRegistration(
        expert_id="dom-ext-e1",
        domain_id="dom-ext",
        sha256="0" * 64,
        trunk_fingerprint="f" * 64,
        centroid=list(external.centroid),
    )
    bad_rows = catalogue(
        external,
        Shape("domain_id", "version", "threshold", "centroid", dim),
        dataclasses.replace(external, threshold=0.1),
    )
    bad_registrations = catalogue(
        registration,
        Shape("expert_id", "num_params", None, "centroid", dim),
        dataclasses.replace(registration, domain_id="dom-other"),
    )
    # discover uses no registration's centroid: one of another dimension is a registration
    bad_registrations = [
        dataclasses.replace(h, expect="accepted") if h.kind == "wrong_dimension" else h
        for h in bad_registrations
    ]
    bad_routed = catalogue(
        routed[0],
        Shape("doc_id", "docs_offset", "similarity", path_safe_id=False),
        dataclasses.replace(routed[0], similarity=0.5),
        "accepted",
    )

    runner = DiscoverRunner(
        DiscoverStage(CONFIG), kafka_conf, topics, tmp_path / "state.json", batch_size=25
    )
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    rows = [(external.domain_id, external.to_json()), *bad_rows]
    sent_rows = send(kafka_conf, topics.domains, rows)
    thread.start()
    try:
        # the table events first (a changed duplicate is only a conflict at the held version)
        until(
            lambda: (
                runner.follower is not None
                and runner.follower.seen >= len(rows)
                and runner.external.empty()
                and runner.stage.table.get("dom-ext") is not None
            ),
            60,
            "every domain event applied",
        )
        regs = [(registration.expert_id, registration.to_json()), *bad_registrations]
        sent_regs = send(kafka_conf, topics.experts, regs)
        items = interleave([(r.doc_id, r.to_json()) for r in routed], bad_routed)
        sent_routed = send(kafka_conf, topics.routed, items)
        jobs = read_messages(
            kafka_conf,
            topics.train,
            lambda ms: len({_job(m).domain_id for m in ms}) >= 2,
            timeout_s=120,
        )
        hostile = [(topics.domains, o) for i, o in sent_rows if isinstance(i, Hostile)]
        hostile += [
            (topics.name(t), o)
            for t, sent in (("experts", sent_regs), ("routed", sent_routed))
            for i, o in sent
            if isinstance(i, Hostile) and i.expect == "dlq"
        ]
        found = dead_letters(kafka_conf, topics.dlq, hostile)
        assert thread.is_alive()
        assert runner.follower.healthy() and runner.registrations.healthy()
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    check_dead_letters(found, sent_rows, topics.domains)
    check_dead_letters(found, sent_regs, topics.experts)
    check_dead_letters(found, sent_routed, topics.routed)
    reasons = reasons_by_kind(found, sent_regs, topics.experts)
    assert reasons["duplicate_changed"] == "conflicting_duplicate"
    assert reasons["tombstone_unknown_key"] == "unknown_key"
    assert reasons_by_kind(found, sent_rows, topics.domains)["wrong_dimension"] == (
        "wrong_dimension"
    )

    # the clean run: the same stage over the good records (and the accepted ones) in order
    clean = DiscoverStage(CONFIG)
    clean.apply_domain(external)
    outputs = [e.record for e in clean.add_expert("dom-ext", "dom-ext-e1")]
    accepted_regs = [i for i, _ in sent_regs if isinstance(i, Hostile) and i.expect == "accepted"]
    for item in accepted_regs:
        reg = ExpertRegistration.from_json(item.value)
        outputs += [e.record for e in clean.add_expert(reg.domain_id, reg.expert_id)]
    for item, offset in sent_routed:
        if isinstance(item, Hostile) and item.expect != "accepted":
            continue
        value = item.value if isinstance(item, Hostile) else item[1]
        message = Message(value, topic=topics.routed, partition=0, offset=offset)
        outputs += [e.record for e in clean.process(message, RoutedDoc.from_json(value))]
    expected_jobs, expected_rows = _outputs(outputs)
    assert len(expected_jobs) == 2

    mine = {o for _, o in sent_rows}
    emitted = [DomainRecord.from_json(v) for _, v in drain(kafka_conf, topics.domains)[len(mine) :]]
    got_jobs, got_rows = _outputs([*map(_job, jobs), *emitted])
    assert got_jobs == expected_jobs  # the same jobs, none extra
    assert got_rows == expected_rows  # the same domain rows (and the expert in dom-ext's)


def _job(message) -> TrainJob:
    return TrainJob.from_json(message.value())
