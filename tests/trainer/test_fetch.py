"""Fetching a job's documents by reference from worx.docs on the real embedded broker."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.kafka import produce_docs
from tests.support.trainer import make_job
from topology.runtimes.range_reader import fetch_job_docs
from trainer.fetch import JobDataError


def test_fetches_exactly_the_referenced_documents_across_ranges(kafka_conf, topics):
    noise = produce_docs(kafka_conf, topics.docs, ["noise"] * 3, "n", partition=1)
    first = produce_docs(kafka_conf, topics.docs, [f"text {i}" for i in range(6)], "a", partition=1)
    produce_docs(kafka_conf, topics.docs, ["gap"] * 5, "g", partition=1)
    second = produce_docs(
        kafka_conf, topics.docs, [f"more {i}" for i in range(4)], "b", partition=1
    )
    job = make_job(topics.docs, first, "job-fetch", heldout=2)
    ref2 = {
        "topic": topics.docs,
        "partition": 1,
        "start": second[0]["offset"],
        "end": second[-1]["offset"] + 1,
    }
    job = dataclasses.replace(
        job,
        refs=[*job.refs, ref2],
        train_doc_ids=[*job.train_doc_ids, "b-0", "b-3", "n-0"],  # n-0 lies outside every range
    )
    docs = fetch_job_docs(kafka_conf, job, timeout_s=5)
    assert docs.train == ["text 0", "text 1", "text 2", "text 3", "more 0", "more 3"]
    assert docs.heldout == ["text 4", "text 5"]
    assert docs.missing_ids == ["n-0"]
    assert noise[0]["offset"] == 0


def test_offsets_that_do_not_exist_fail_with_missing_offsets(kafka_conf, topics):
    placed = produce_docs(kafka_conf, topics.docs, ["one", "two", "three"], "x")
    job = make_job(topics.docs, placed, "job-missing", heldout=1)
    beyond = {"topic": topics.docs, "partition": 0, "start": 1000, "end": 1010}
    with pytest.raises(JobDataError) as failed:
        fetch_job_docs(kafka_conf, dataclasses.replace(job, refs=[beyond]), timeout_s=1.5)
    assert failed.value.reason == "missing_offsets"
    assert "[1000, 1010)" in str(failed.value)
    # a range running past the end of the partition is missing too
    partial = {"topic": topics.docs, "partition": 0, "start": 0, "end": 50}
    with pytest.raises(JobDataError, match="last offset read 2"):
        fetch_job_docs(kafka_conf, dataclasses.replace(job, refs=[partial]), timeout_s=1.5)


def test_no_usable_documents_unknown_topics_and_malformed_ranges(kafka_conf, topics):
    placed = produce_docs(kafka_conf, topics.docs, ["alpha", "beta", "gamma"], "y")
    job = make_job(topics.docs, placed, "job-none", heldout=1)
    with pytest.raises(JobDataError) as none:
        fetch_job_docs(
            kafka_conf, dataclasses.replace(job, train_doc_ids=["nope-1", "nope-2"]), timeout_s=3
        )
    assert none.value.reason == "no_usable_docs"
    unknown = {"topic": f"{topics.prefix}.nowhere", "partition": 0, "start": 0, "end": 1}
    with pytest.raises(JobDataError) as missing_topic:
        fetch_job_docs(kafka_conf, dataclasses.replace(job, refs=[unknown]), timeout_s=3)
    assert missing_topic.value.reason == "unknown_topic"
    backwards = {"topic": topics.docs, "partition": 0, "start": 5, "end": 2}
    with pytest.raises(JobDataError) as bad:
        fetch_job_docs(kafka_conf, dataclasses.replace(job, refs=[backwards]), timeout_s=3)
    assert bad.value.reason == "bad_refs"
