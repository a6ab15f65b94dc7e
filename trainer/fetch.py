"""Fetch a TrainJob's documents by reference from ``worx.docs``.

A job names its documents by id and by the offset ranges ``[start, end)`` where they live.
The fetcher assigns those partitions (no consumer group join), seeks to the start of each
range and reads until every range is passed. It never asks the broker for end offsets (the
embedded broker answers them wrongly); a range whose offsets do not arrive within
``timeout_s`` is reported as missing.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ingest.records import Doc
from router.records import DocRef, TrainJob
from worx.records import RecordError

log = logging.getLogger(__name__)


class JobDataError(ValueError):
    """The job's documents cannot be used; ``reason`` is a stable code for TrainStatus."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class JobDocs:
    """The texts of a job, in the order of its id lists, and what could not be found."""

    train: list[str]
    heldout: list[str]
    missing_ids: list[str] = field(default_factory=list)  # named by the job, never seen
    undecodable: int = 0  # messages in the ranges that were not valid Doc records


def parse_refs(job: TrainJob) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Group and merge the job's ranges per (topic, partition); raise JobDataError if malformed."""
    if not job.refs:
        raise JobDataError("bad_refs", f"job {job.job_id} names no document ranges (refs is empty)")
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for raw in job.refs:
        try:
            ref = DocRef.from_dict({"schema_version": DocRef.SCHEMA_VERSION, **raw}, strict=False)
        except RecordError as exc:
            raise JobDataError(
                "bad_refs", f"job {job.job_id}: malformed ref {raw!r}: {exc}"
            ) from exc
        if ref.start < 0 or ref.end <= ref.start or ref.partition < 0:
            raise JobDataError(
                "bad_refs",
                f"job {job.job_id}: ref {ref.topic}[{ref.partition}] [{ref.start}, {ref.end}) is "
                "not a valid range (need 0 <= start < end, partition >= 0)",
            )
        ranges[(ref.topic, ref.partition)].append((ref.start, ref.end))
    merged: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key, spans in ranges.items():
        spans.sort()
        out: list[tuple[int, int]] = []
        for start, end in spans:
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            else:
                out.append((start, end))
        merged[key] = out
    return merged


def fetch_job_docs(conf: dict[str, Any], job: TrainJob, timeout_s: float = 15.0) -> JobDocs:
    """Read the job's documents from the ranges it names.

    Parameters
    ----------
    conf : librdkafka settings (at least ``bootstrap.servers``).
    job : the TrainJob; ``train_doc_ids``/``heldout_doc_ids`` are looked up in ``job.refs``.
    timeout_s : how long to wait for the next message of an unfinished range.

    Raises
    ------
    JobDataError
        ``bad_refs`` (malformed ranges), ``unknown_topic``, ``missing_offsets`` (a range's
        offsets did not arrive: they do not exist or were deleted), ``no_usable_docs``
        (none of the training ids were found in the ranges).
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
        while pending:
            msg = consumer.poll(0.2)
            if msg is None:
                if time.monotonic() - last_progress > timeout_s:
                    raise JobDataError("missing_offsets", _missing_message(job, pending, last_seen))
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
            undecodable += _take(msg.value(), train_ids | heldout_ids, found)
            if offset + 1 >= spans[0][1]:
                spans.pop(0)
                if not spans:
                    del pending[key]
                    consumer.incremental_unassign([TopicPartition(key[0], key[1])])
                elif spans[0][0] > offset + 1:
                    consumer.seek(TopicPartition(key[0], key[1], spans[0][0]))
    finally:
        consumer.close()
    train = [found[i] for i in job.train_doc_ids if i in found]
    heldout = [found[i] for i in job.heldout_doc_ids if i in found]
    missing = [i for i in (*job.train_doc_ids, *job.heldout_doc_ids) if i not in found]
    if not train:
        raise JobDataError(
            "no_usable_docs",
            f"job {job.job_id}: none of its {len(job.train_doc_ids)} training documents were "
            f"found in its ranges ({len(found)} matching docs, {undecodable} undecodable messages)",
        )
    if missing:
        log.warning(
            "job %s: %d of its documents were not found in its ranges", job.job_id, len(missing)
        )
    return JobDocs(train=train, heldout=heldout, missing_ids=missing, undecodable=undecodable)


def _take(value: bytes | None, ids: set[str], found: dict[str, str]) -> int:
    """Decode one message; keep its text if it is a wanted non-empty Doc; 1 if undecodable."""
    try:
        doc = Doc.from_json(value or b"", strict=False)
    except RecordError:
        return 1
    if doc.doc_id in ids and doc.text.strip():
        if doc.doc_id in found and doc.part:
            found[doc.doc_id] += doc.text  # pieces of an oversize document, in offset order
        else:
            found.setdefault(doc.doc_id, doc.text)
    return 0


def _missing_message(
    job: TrainJob,
    pending: dict[tuple[str, int], list[tuple[int, int]]],
    last_seen: dict[tuple[str, int], int],
) -> str:
    parts = []
    for (topic, partition), spans in pending.items():
        seen = last_seen.get((topic, partition))
        where = f"last offset read {seen}" if seen is not None else "no message at all"
        shown = ", ".join(f"[{start}, {end})" for start, end in spans)
        parts.append(f"{topic}[{partition}] offsets {shown} ({where})")
    return f"job {job.job_id}: offsets that do not exist or were deleted: " + "; ".join(parts)
