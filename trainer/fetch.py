"""A TrainJob's documents by reference: the ranges it names, and what was found there.

A job names its documents by id and by the offset ranges ``[start, end)`` of
``worx.docs`` where they live. :func:`parse_refs` checks and merges the ranges,
:func:`take_doc` keeps the wanted texts of the messages read from them, and
:func:`job_docs` puts the texts in the order of the job's id lists. The reader that
seeks to the ranges and reads them is a runtime (``topology.runtimes.range_reader.fetch_job_docs``);
the trainer and the monitor are handed it as a function.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

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


def job_docs(job: TrainJob, found: dict[str, str], undecodable: int) -> JobDocs:
    """The job's texts from ``found`` (doc id -> text), in the order of its id lists.

    Raises
    ------
    JobDataError
        ``no_usable_docs``: none of the training ids were found in the ranges.
    """
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


def take_doc(value: bytes | None, ids: set[str], found: dict[str, str]) -> int:
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


def missing_message(
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
