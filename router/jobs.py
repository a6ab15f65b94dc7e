"""Training jobs: deterministic held-out split, offset ranges, deterministic ``job_id``.

Example
-------
>>> docs = [{"doc_id": f"d{i}", "topic": "worx.docs", "partition": 0, "offset": i}
...         for i in range(10)]
>>> job = make_train_job("dom-1", "new_domain", docs, [1.0, 0.0], heldout_fraction=0.3)
>>> job.refs
[{'topic': 'worx.docs', 'partition': 0, 'start': 0, 'end': 10, 'schema_version': 1}]
>>> set(job.train_doc_ids) & set(job.heldout_doc_ids)
set()
>>> job.job_id == make_train_job("dom-1", "new_domain", docs[::-1], [1.0, 0.0],
...                              heldout_fraction=0.3).job_id
True
"""

from __future__ import annotations

from collections.abc import Iterable

from router.records import DocRef, TrainJob
from worx.ids import content_hash, stable_fraction

HELDOUT_SALT = "worx-heldout"


def is_heldout(key: str, fraction: float, salt: str = HELDOUT_SALT) -> bool:
    """Whether the document of split ``key`` (:func:`split_key`) is held out: a pure
    function of the key (never trained on, anywhere)."""
    return stable_fraction(key, salt=salt) < fraction


def split_key(doc: dict) -> str:
    """What the held-out split hashes: the text's ``content`` hash, else the ``doc_id``."""
    return doc.get("content") or doc["doc_id"]


def offset_ranges(docs: Iterable[dict]) -> list[DocRef]:
    """Merge the documents' ``(topic, partition, offset)`` into contiguous ``[start, end)``."""
    by_partition: dict[tuple[str, int], set[int]] = {}
    for doc in docs:
        where = (doc["topic"], int(doc["partition"]))
        by_partition.setdefault(where, set()).add(int(doc["offset"]))
    refs = []
    for (topic, partition), offsets in sorted(by_partition.items()):
        ordered = sorted(offsets)
        start = prev = ordered[0]
        for offset in ordered[1:]:
            if offset != prev + 1:
                refs.append(DocRef(topic, partition, start, prev + 1))
                start = offset
            prev = offset
        refs.append(DocRef(topic, partition, start, prev + 1))
    return refs


def make_train_job(
    domain_id: str,
    reason: str,
    docs: list[dict],
    centroid: list[float],
    heldout_fraction: float,
    salt: str = HELDOUT_SALT,
    parent_expert_id: str | None = None,
    created_ms: int = 0,
) -> TrainJob:
    """A :class:`TrainJob` over ``docs`` (dicts with doc_id, topic, partition, offset, and
    the text's ``content`` hash where route gave one).

    Documents are held out by their text, not their id: a text the stream carried twice
    under two ids (a re-sent ticket, a file committed twice) is held out under both or
    trained on under one, never both; a job keeps one id per text. Without ``content`` the
    id is the key. ``job_id`` hashes the domain, the reason and the sorted training ids,
    so the same data can never yield a second job, however often it is replayed.
    """
    unique = {doc["doc_id"]: doc for doc in docs}
    texts: dict[str, str] = {}  # split key -> the id kept for it (the smallest)
    for doc_id in sorted(unique):
        texts.setdefault(split_key(unique[doc_id]), doc_id)
    held = {d: is_heldout(key, heldout_fraction, salt) for key, d in texts.items()}
    ids = sorted(held)
    heldout = [d for d in ids if held[d]]
    train = [d for d in ids if not held[d]]
    job_id = "job-" + content_hash("\n".join([domain_id, reason, *train]), length=20)
    return TrainJob(
        job_id=job_id,
        domain_id=domain_id,
        reason=reason,
        refs=[ref.to_dict() for ref in offset_ranges(unique.values())],
        train_doc_ids=train,
        heldout_doc_ids=heldout,
        centroid=[round(float(x), 7) for x in centroid],
        parent_expert_id=parent_expert_id,
        created_ms=created_ms,
    )
