"""The trainer's job consumer under hostile ``worx.train`` records, on the real broker.

The hostile catalogue of :mod:`tests.support.hostile_records` (plus a job naming another
topic than ``<prefix>.docs``) arrives around one good job. The worker dead-letters every
hostile job with its reason, trains the good one into exactly the expert a clean worker
trains from it (same sha256), and skips the changed duplicate of the good job (a job id
trains at most one expert).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from experts.records import ExpertRegistration
from experts.store import ExpertStore
from tests.support.hostile_records import (
    Hostile,
    Shape,
    catalogue,
    check_dead_letters,
    dead_letters,
    reasons_by_kind,
    send,
)
from tests.support.kafka import produce_docs, read_records
from tests.support.trainer import corpus_texts, make_job, trunk, trunk_dir  # noqa: F401
from topology.composition.topics import Topics
from topology.runtimes.train_worker import TrainWorker
from trainer.config import TrainerConfig
from trainer.records import TrainStatus
from trainer.worker import expert_id_for

pytestmark = pytest.mark.broker
CFG = TrainerConfig(
    max_steps=4,
    seq_len=32,
    micro_batch_size=2,
    grad_accum_steps=1,
    lr=1e-2,
    warmup_steps=1,
    eval_every=4,
    checkpoint_every=4,
    status_every=4,
    fetch_timeout_s=5.0,
    gate_margin=0.0,
    progress=False,
)


def _worker(kafka_conf: dict, topics: Topics, trunk, root: Path) -> TrainWorker:  # noqa: F811
    store = ExpertStore(root / "store", trunk.fingerprint)
    config = dataclasses.replace(CFG, group_id=f"trainer-{topics.prefix}")
    return TrainWorker(kafka_conf, topics, trunk, store, config, root / "jobs", 6000, embed_dim=2)


def test_trainer_dead_letters_hostile_jobs_and_trains_the_good_one_as_a_clean_run(
    kafka_conf: dict,
    topics: Topics,
    trunk,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
):
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("scripture", 16), "s")
    good = make_job(topics.docs, placed, "job-good", heldout=4)
    bad = catalogue(
        good,
        Shape("job_id", "created_ms", None, "centroid", 2),
        dataclasses.replace(good, train_doc_ids=good.train_doc_ids[:4]),
        "accepted",  # the job id ended already: skipped, no second expert
    )
    foreign = dataclasses.replace(
        good,
        job_id="job-foreign",
        refs=[{"topic": "secrets.payroll", "partition": 0, "start": 0, "end": 9}],
    )
    items = [(good.job_id, good.to_json()), *bad]
    items.insert(len(items) - 1, Hostile("foreign_topic", "job-foreign", foreign.to_json()))
    sent = send(kafka_conf, topics.train, items)

    worker = _worker(kafka_conf, topics, trunk, tmp_path / "hostile")
    worker.run(max_jobs=len(items), idle_timeout_s=60)  # returns: it went on after each
    hostile = [(topics.train, o) for i, o in sent if isinstance(i, Hostile) and i.expect == "dlq"]
    found = dead_letters(kafka_conf, topics.dlq, hostile)
    check_dead_letters(found, sent, topics.train)
    reasons = reasons_by_kind(found, sent, topics.train)
    assert reasons["foreign_topic"] == "foreign_topic"
    assert reasons["wrong_dimension"] == "wrong_dimension"
    assert reasons["nan_in_vector"] == "not_finite" and reasons["deep_nesting"] == "too_deep"
    assert worker.outcomes == [("job-good", "finished")]  # (a skip is no new outcome)

    statuses = read_records(
        kafka_conf,
        topics.train_status,
        TrainStatus,
        lambda rs: any(r.state == "skipped" for r in rs),
    )
    assert {s.job_id for s in statuses} == {"job-good"}
    assert [s.state for s in statuses if s.state in ("finished", "skipped")] == [
        "finished",
        "skipped",
    ]
    registrations = read_records(
        kafka_conf, topics.experts, ExpertRegistration, lambda rs: len(rs) >= 1
    )
    assert [r.expert_id for r in registrations] == [expert_id_for("job-good")]

    # the clean run: a fresh worker handed the good job alone trains the same expert
    clean = _worker(kafka_conf, topics, trunk, tmp_path / "clean")
    assert clean.handle(good) == "finished"
    ours = worker.jobs.store.manifest(expert_id_for("job-good"))
    theirs = clean.jobs.store.manifest(expert_id_for("job-good"))
    assert ours.sha256 == theirs.sha256 == registrations[0].sha256
    assert worker.jobs.store.ids() == [expert_id_for("job-good")]
