"""A read-only view of the whole loop, built by following every worx topic from the start.

Used by `worx demo` and `worx up` for the live terminal view and to tell when a run is done.
It joins no consumer group (partitions are assigned explicitly), so it never disturbs the
stages' offsets; it decodes records strictly and counts what it cannot decode, by reason
(it writes nothing: the stage that consumes a topic dead-letters what it cannot use).
Everything it keeps is bounded (ids seen, jobs, domains, events), and no record can stop
its thread; if the consumer itself fails, :meth:`LoopWatcher.healthy` turns False.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from experts.records import ExpertRegistration
from ingest.dead_letters import reason_class
from ingest.records import DeadLetter, Doc
from monitor.records import EvalRow
from router.records import DomainRecord, DriftEvent, RoutedDoc, TrainJob
from topology.composition.topics import Topics
from trainer.records import ACTIVE_STATES, TERMINAL_STATES, TrainStatus
from worx.records import RecordError

log = logging.getLogger(__name__)

MAX_IDS = 200_000  # distinct doc ids remembered (a replay within this window is not recounted)
MAX_LABELS = 1000  # distinct document labels counted (the rest as "(other)")
MAX_ROWS = 10_000  # jobs, statuses, domains, experts, evaluation rows and events kept
NOVEL = "novel"  # the cluster of a document routed to no domain, in routed_by_label


class RecentIds:
    """Counts distinct ids, remembering the last ``capacity`` (an id seen again after it
    was forgotten counts again): ``len()`` is the count, memory stays bounded."""

    def __init__(self, capacity: int = MAX_IDS) -> None:
        self.capacity = capacity
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._count = 0

    def add(self, item: str) -> None:
        if item in self._recent:
            self._recent.move_to_end(item)
            return
        self._count += 1
        self._recent[item] = None
        if len(self._recent) > self.capacity:
            self._recent.popitem(last=False)

    def __contains__(self, item: object) -> bool:
        return item in self._recent

    def __len__(self) -> int:
        return self._count


def _put(table: dict, key: object, value: object, capacity: int = MAX_ROWS) -> None:
    """``table[key] = value``, dropping the oldest keys beyond ``capacity``."""
    table.pop(key, None)
    table[key] = value
    while len(table) > capacity:
        table.pop(next(iter(table)))


@dataclass
class LoopState:
    docs: int = 0
    doc_ids: RecentIds = field(default_factory=RecentIds)
    docs_by_label: Counter = field(default_factory=Counter)
    first_doc_ms: dict[str, int] = field(default_factory=dict)  # label -> its first Doc's
    # created_ms (bounded as docs_by_label)
    dead_letters: int = 0
    dead_letter_reasons: Counter = field(default_factory=Counter)
    routed: int = 0
    routed_ids: RecentIds = field(default_factory=RecentIds)
    novel: int = 0
    # (label, domain id or "novel") -> routed documents, each document's first decision:
    # the contingency table of the summary's nmi_as_routed (pairs past MAX_ROWS: "(other)")
    routed_by_label: Counter = field(default_factory=Counter)
    domains: dict[str, DomainRecord] = field(default_factory=dict)
    drift_events: deque[DriftEvent] = field(default_factory=lambda: deque(maxlen=MAX_ROWS))
    jobs: dict[str, TrainJob] = field(default_factory=dict)
    job_status: dict[str, TrainStatus] = field(default_factory=dict)  # the latest per job
    job_started_ms: dict[str, int] = field(default_factory=dict)  # job id -> created_ms of
    # its first "taken" (or, from an older trainer, "started") status: a resumed or re-run
    # job keeps the first
    experts: dict[str, ExpertRegistration] = field(default_factory=dict)
    expert_shas: dict[str, frozenset[str]] = field(default_factory=dict)  # every sha256 seen
    eval_rows: dict[tuple[str, int], EvalRow] = field(default_factory=dict)
    undecodable: int = 0
    undecodable_reasons: Counter = field(default_factory=Counter)  # by reason class
    last_change_at: float = 0.0

    def pending_jobs(self) -> list[str]:
        return [
            job_id
            for job_id in self.jobs
            if job_id not in self.job_status or self.job_status[job_id].state not in TERMINAL_STATES
        ]

    def latest_eval(self, run: str = "ours") -> EvalRow | None:
        rows = [row for (name, _), row in self.eval_rows.items() if name == run]
        return max(rows, key=lambda row: row.step) if rows else None


_DECODERS = {
    "docs": Doc,
    "dlq": DeadLetter,
    "routed": RoutedDoc,
    "domains": DomainRecord,
    "drift": DriftEvent,
    "train": TrainJob,
    "train.status": TrainStatus,
    "experts": ExpertRegistration,
    "metrics": EvalRow,
}


class LoopWatcher:
    """Follow every topic in a background thread; ``state`` is read under ``lock``."""

    def __init__(self, conf: dict, topics: Topics) -> None:
        self.topics = topics
        self.state = LoopState()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._changed = threading.Condition(self.lock)
        self._consumer = Consumer(
            {
                **conf,
                "group.id": f"worx-watch-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )
        self._suffix = {topics.name(s): s for s in _DECODERS}
        self._thread = threading.Thread(target=self._run, name="loop-watcher", daemon=True)
        self.error: BaseException | None = None  # what stopped the thread, if anything did

    def healthy(self) -> bool:
        return self.error is None and (self._thread.is_alive() or self._stop.is_set())

    def describe(self) -> str:
        return f"loop watcher stopped: {self.error}" if self.error else "loop watcher running"

    def start(self) -> LoopWatcher:
        metadata = self._consumer.list_topics(timeout=10)
        assignment = [
            TopicPartition(name, partition, OFFSET_BEGINNING)
            for name in self._suffix
            for partition in metadata.topics[name].partitions
        ]
        self._consumer.assign(assignment)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()

    def wait_for(self, predicate, timeout_s: float) -> bool:
        """Block until ``predicate(state)`` holds (re-checked on every change) or time runs out."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(self.state):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(timeout=min(remaining, 1.0))
            return True

    def wait_change(self, timeout_s: float) -> None:
        """Block until the next record arrives or ``timeout_s`` passes."""
        with self._changed:
            self._changed.wait(timeout=timeout_s)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._consumer.consume(1000, timeout=0.2)
                if not batch:
                    continue
                with self._changed:
                    for msg in batch:
                        if msg.error() or msg.value() is None:
                            continue
                        self._apply(self._suffix.get(msg.topic(), ""), msg.value())
                    self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported by healthy(), never silent
            log.exception("the loop watcher stopped")
            self.error = exc

    def _apply(self, suffix: str, value: bytes) -> None:
        try:
            record = _DECODERS[suffix].from_json(value, strict=False)
            self._count(record)
        except Exception as exc:  # noqa: BLE001 - a view counts what it cannot read
            reason = exc.reason if isinstance(exc, RecordError) else "stage_error"
            self.state.undecodable += 1
            self.state.undecodable_reasons[reason_class(reason)] += 1

    def _count(self, record: object) -> None:
        s = self.state
        now = time.monotonic()
        s.last_change_at = now
        if isinstance(record, Doc):
            s.docs += 1
            s.doc_ids.add(record.doc_id)
            label = record.label or "?"
            if label in s.docs_by_label or len(s.docs_by_label) < MAX_LABELS:
                s.docs_by_label[label] += 1
                s.first_doc_ms.setdefault(label, record.created_ms)
            else:
                s.docs_by_label["(other)"] += 1
        elif isinstance(record, DeadLetter):
            s.dead_letters += 1
            s.dead_letter_reasons[reason_class(record.reason)] += 1
        elif isinstance(record, RoutedDoc):
            s.routed += 1
            if record.label is not None and record.doc_id not in s.routed_ids:
                pair = (record.label, record.domain_id or NOVEL)
                if pair not in s.routed_by_label and len(s.routed_by_label) >= MAX_ROWS:
                    pair = ("(other)", "(other)")
                s.routed_by_label[pair] += 1
            s.routed_ids.add(record.doc_id)
            s.novel += record.domain_id is None
        elif isinstance(record, DomainRecord):
            _put(s.domains, record.domain_id, record)
        elif isinstance(record, DriftEvent):
            s.drift_events.append(record)
        elif isinstance(record, TrainJob):
            _put(s.jobs, record.job_id, record)
        elif isinstance(record, TrainStatus):
            _put(s.job_status, record.job_id, record)
            if record.state in ACTIVE_STATES and record.job_id not in s.job_started_ms:
                _put(s.job_started_ms, record.job_id, record.created_ms)
        elif isinstance(record, ExpertRegistration):
            _put(s.experts, record.expert_id, record)
            shas = s.expert_shas.get(record.expert_id, frozenset()) | {record.sha256}
            _put(s.expert_shas, record.expert_id, shas)
        elif isinstance(record, EvalRow):
            _put(s.eval_rows, (record.run, record.step), record)
