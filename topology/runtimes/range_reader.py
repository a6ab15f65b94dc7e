"""Read a TrainJob's documents from ``worx.docs`` by reference (the range reader).

The reader assigns the partitions a job names (no consumer group join), seeks to the start
of each range and reads until every range is passed. It never asks the broker for end
offsets (the embedded broker answers them wrongly); a range whose offsets do not arrive
within twice ``timeout_s`` while the broker answers is reported as missing, and a broker
that stopped answering raises its own error instead (the job is not the problem). What it
keeps, and how, is the trainer's (:mod:`trainer.fetch`); :func:`kafka_fetch` hands the
same reader to the monitor.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from monitor.stage import FetchFn, heldout_fetch
from router.records import TrainJob
from trainer.fetch import JobDataError, JobDocs, job_docs, missing_message, parse_refs, take_doc

log = logging.getLogger(__name__)


def fetch_job_docs(conf: dict[str, Any], job: TrainJob, timeout_s: float = 15.0) -> JobDocs:
    """Read the job's documents from the ranges it names.

    Parameters
    ----------
    conf : librdkafka settings (at least ``bootstrap.servers``).
    job : the TrainJob; ``train_doc_ids``/``heldout_doc_ids`` are looked up in ``job.refs``.
    timeout_s : how long to wait for the next message of an unfinished range (twice, if
        the broker answers meanwhile).

    Raises
    ------
    JobDataError
        ``bad_refs`` (malformed ranges), ``unknown_topic``, ``missing_offsets`` (a range's
        offsets did not arrive: they do not exist or were deleted), ``no_usable_docs``
        (none of the training ids were found in the ranges).
    KafkaException
        The broker did not answer a metadata request after the wait: a transport error,
        not the job's (the trainer stops and resumes the job when restarted).
    """
    wanted = parse_refs(job)
    train_ids = set(job.train_doc_ids)
    heldout_ids = set(job.heldout_doc_ids)
    found: dict[str, str] = {}
    undecodable = 0
    consumer = Consumer(
        {
            **conf,
            "group.id": f"worx-trainer-fetch-{job.job_id}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
        }
    )
    try:
        # list all topics (a lookup of one unknown topic would create it on the embedded broker)
        known = consumer.list_topics(timeout=timeout_s).topics
        for topic, partition in wanted:
            if topic not in known:
                raise JobDataError(
                    "unknown_topic", f"job {job.job_id}: topic {topic!r} does not exist"
                )
            if partition not in known[topic].partitions:
                raise JobDataError(
                    "missing_offsets",
                    f"job {job.job_id}: topic {topic!r} has no partition {partition}",
                )
        pending = {key: list(spans) for key, spans in wanted.items()}
        consumer.incremental_assign(
            [TopicPartition(t, p, spans[0][0]) for (t, p), spans in pending.items()]
        )
        last_progress = time.monotonic()
        last_seen: dict[tuple[str, int], int] = {}
        stalled = False
        while pending:
            msg = consumer.poll(0.2)
            if msg is None:
                if time.monotonic() - last_progress > timeout_s:
                    # a broker that does not answer says nothing of the offsets: its
                    # KafkaException stops the caller, who resumes the job later; one that
                    # answers (again) gets one more wait for what it had not sent yet
                    consumer.list_topics(timeout=timeout_s)
                    if stalled:
                        raise JobDataError(
                            "missing_offsets", missing_message(job, pending, last_seen)
                        )
                    stalled, last_progress = True, time.monotonic()
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                if msg.error().code() in (
                    KafkaError._AUTO_OFFSET_RESET,
                    KafkaError.OFFSET_OUT_OF_RANGE,
                ):
                    raise JobDataError("missing_offsets", f"job {job.job_id}: {msg.error().str()}")
                log.warning("fetch of job %s: consumer error %s", job.job_id, msg.error())
                continue
            key = (msg.topic(), msg.partition())
            spans = pending.get(key)
            if spans is None:
                continue
            offset = msg.offset()
            last_seen[key] = offset
            last_progress = time.monotonic()
            while spans and offset >= spans[0][1]:
                spans.pop(0)  # this range is complete
            if not spans:
                del pending[key]
                consumer.incremental_unassign([TopicPartition(key[0], key[1])])
                continue
            if offset < spans[0][0]:  # in a gap between ranges: jump to the next one
                consumer.seek(TopicPartition(key[0], key[1], spans[0][0]))
                continue
            undecodable += take_doc(msg.value(), train_ids | heldout_ids, found)
            if offset + 1 >= spans[0][1]:
                spans.pop(0)
                if not spans:
                    del pending[key]
                    consumer.incremental_unassign([TopicPartition(key[0], key[1])])
                elif spans[0][0] > offset + 1:
                    consumer.seek(TopicPartition(key[0], key[1], spans[0][0]))
    finally:
        consumer.close()
    return job_docs(job, found, undecodable)


def kafka_fetch(conf: dict[str, Any], timeout_s: float = 15.0) -> FetchFn:
    """The monitor's :data:`~monitor.stage.FetchFn`, reading from ``worx.docs`` by reference."""
    return heldout_fetch(lambda job: fetch_job_docs(conf, job, timeout_s=timeout_s))
