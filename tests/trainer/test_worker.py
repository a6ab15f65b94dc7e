"""The worker on the real embedded broker: failures stay with their job, replays are no-ops."""

from __future__ import annotations

import dataclasses

from experts.records import ExpertRegistration
from experts.store import ExpertStore
from ingest.records import DeadLetter
from tests.support.kafka import produce_docs, publish, read_records
from tests.support.trainer import corpus_texts, make_job
from topology.runtimes.train_worker import TrainWorker
from trainer.config import TrainerConfig
from trainer.records import TrainStatus
from trainer.worker import expert_id_for

CFG = TrainerConfig(
    max_steps=12,
    seq_len=64,
    micro_batch_size=4,
    grad_accum_steps=1,
    lr=1e-2,
    warmup_steps=2,
    eval_every=6,
    checkpoint_every=6,
    status_every=4,
    fetch_timeout_s=2.0,
    progress=False,
)


def _worker(kafka_conf, topics, trunk, tmp_path, **changes) -> tuple[TrainWorker, ExpertStore]:
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    cfg = dataclasses.replace(CFG, group_id=f"trainer-{topics.prefix}", **changes)
    worker = TrainWorker(
        kafka_conf, topics, trunk, store, cfg, tmp_path / "jobs", session_timeout_ms=6000
    )
    return worker, store


def test_bad_jobs_fail_with_a_reason_and_the_next_job_trains(kafka_conf, topics, trunk, tmp_path):
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("scripture", 30), "s")
    good = make_job(topics.docs, placed, "job-good", heldout=5)
    missing = dataclasses.replace(
        good,
        job_id="job-missing",
        refs=[{"topic": topics.docs, "partition": 0, "start": 5000, "end": 5005}],
    )
    unusable = dataclasses.replace(good, job_id="job-unusable", train_doc_ids=["not-there"])
    for job in (missing, unusable):
        publish(kafka_conf, topics.train, job.job_id, job.to_json())
    publish(kafka_conf, topics.train, "junk", b"{not json")
    publish(kafka_conf, topics.train, good.job_id, good.to_json())

    worker, store = _worker(kafka_conf, topics, trunk, tmp_path)
    worker.run(max_jobs=4, idle_timeout_s=60)

    assert worker.outcomes == [
        ("job-missing", "failed"),
        ("job-unusable", "failed"),
        ("job-good", "finished"),
    ]
    statuses = read_records(
        kafka_conf,
        topics.train_status,
        TrainStatus,
        lambda rs: any(r.state == "finished" for r in rs),
    )
    failed = {s.job_id: s.reason for s in statuses if s.state == "failed"}
    assert (
        failed["job-missing"].startswith("missing_offsets: ")
        and "[5000, 5005)" in failed["job-missing"]
    )
    assert failed["job-unusable"].startswith("no_usable_docs: ")
    good_states = [s.state for s in statuses if s.job_id == "job-good"]
    assert good_states[:2] == ["taken", "started"]  # taken before the setup, started after it
    assert good_states[-1] == "finished" and "step" in good_states
    finished = next(s for s in statuses if s.state == "finished")
    assert finished.expert_id == expert_id_for("job-good")
    assert finished.figures["heldout_ppl_after"] < finished.figures["heldout_ppl_trunk"]
    dead = read_records(kafka_conf, topics.dlq, DeadLetter, lambda rs: len(rs) >= 1)
    assert dead[0].reason == "not_json" and dead[0].stage == "trainer"

    registrations = read_records(
        kafka_conf, topics.experts, ExpertRegistration, lambda rs: len(rs) >= 1
    )
    assert [r.expert_id for r in registrations] == [expert_id_for("job-good")]
    manifest = store.manifest(expert_id_for("job-good"))
    assert registrations[0].sha256 == manifest.sha256 and manifest.job_id == "job-good"
    assert manifest.summary["heldout_ppl_after"] < manifest.summary["heldout_ppl_before"]
    assert registrations[0].trunk_fingerprint == trunk.fingerprint

    # a replay of every job changes nothing: no second expert, the outcomes are kept
    assert worker.handle(good) == "skipped"
    assert worker.handle(missing) == "skipped"
    assert store.ids() == [expert_id_for("job-good")]


def test_a_domain_the_mixture_already_models_costs_no_expert(kafka_conf, topics, trunk, tmp_path):
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("legal", 12), "l")
    job = make_job(topics.docs, placed, "job-easy", heldout=3)
    worker, store = _worker(kafka_conf, topics, trunk, tmp_path, max_steps=2, gate_margin=0.9)
    assert worker.handle(job) == "not_worth_it"
    assert store.ids() == []
    statuses = read_records(
        kafka_conf,
        topics.train_status,
        TrainStatus,
        lambda rs: any(r.state == "not_worth_it" for r in rs),
    )
    verdict = statuses[-1]
    assert "does not beat the current mixture" in verdict.reason
    assert verdict.figures["heldout_ppl_current"] > 0 and "heldout_ppl_after" in verdict.figures


def test_a_stored_but_unannounced_expert_is_announced_not_retrained(
    kafka_conf, topics, trunk, tmp_path
):
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("news", 12), "w")
    job = make_job(topics.docs, placed, "job-crashed", heldout=3)
    worker, store = _worker(kafka_conf, topics, trunk, tmp_path)
    assert worker.handle(job) == "finished"
    (tmp_path / "jobs" / "job-crashed" / "outcome.json").unlink()  # as if killed before recording
    sha = store.manifest(expert_id_for("job-crashed")).sha256
    assert worker.handle(job) == "finished"
    assert store.ids() == [expert_id_for("job-crashed")]
    assert store.manifest(expert_id_for("job-crashed")).sha256 == sha
    registrations = read_records(
        kafka_conf, topics.experts, ExpertRegistration, lambda rs: len(rs) >= 2
    )
    assert {r.expert_id for r in registrations} == {expert_id_for("job-crashed")}


def test_a_drift_job_branches_from_its_parent_without_touching_it(
    kafka_conf, topics, trunk, tmp_path
):
    from experts.expert import Expert, ExpertConfig

    worker, store = _worker(kafka_conf, topics, trunk, tmp_path)
    parent = Expert(ExpertConfig(kind="adapter", layers=(1, 2), rank=16), trunk.hidden_size)
    store.put("scripture-v1", parent, "scripture", [0.6, 0.8])
    parent_sha = store.manifest("scripture-v1").sha256
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("scripture", 14, skip=60), "d")
    job = make_job(
        topics.docs, placed, "job-drift", heldout=3, reason="drift", parent_expert_id="scripture-v1"
    )
    assert worker.handle(job) == "finished"
    child = store.manifest(expert_id_for("job-drift"))
    assert child.parent_expert_id == "scripture-v1" and child.summary["branched"]
    assert store.manifest("scripture-v1").sha256 == parent_sha
    assert sorted(store.verify().ok) == sorted(["scripture-v1", expert_id_for("job-drift")])
