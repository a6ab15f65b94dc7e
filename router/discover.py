"""The discover stage: one logical instance over ``worx.routed``.

(~490 lines: the stage's state and what changes it, one per method; the pure rules it
calls live apart: router.cluster, router.promotion, router.jobs, router.naming.)

It reads every routing decision but only novel documents carry text. For each decision:

- the novelty indicator (1 novel, 0 assigned) feeds a one-sided Page-Hinkley detector:
  a rise fires a ``novelty_rate`` :class:`DriftEvent` and clusters at once;
- an assigned document feeds its domain's distance detector (``1 - cosine``, in units
  of the domain's member spread): a rise fires a ``domain_distance`` drift event and a
  ``drift`` :class:`TrainJob` over the domain's recent documents, branching from the
  domain's latest expert;
- a novel document is embedded and buffered; every ``cluster_every`` novel documents the
  buffer is clustered (:mod:`router.cluster`) and a core that is large, cohesive, stable
  and not close to a known domain is promoted (the rules: :mod:`router.promotion`): a new
  :class:`DomainRecord` (centroid; threshold = a low quantile of its members' cosines), a
  ``promotion`` drift event, and, once the domain has gathered ``job_docs`` documents (or
  ``job_min_docs`` and then none for ``job_quiet_docs`` decisions), one ``new_domain`` job.

Rules about arrival (did a core come as a burst?) are measured in the order documents
entered the system, not the order discover consumes them (see :mod:`router.timeline`).

Everything emitted is a pure function of the input sequence, stamped with input
timestamps (never the clock), so a replay re-creates the same ids. The whole state,
with the input offsets it covers, is a JSON snapshot (:meth:`snapshot`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, ClassVar

import numpy as np

from router.cluster import Candidate, NoveltyClusterer
from router.config import RouterConfig
from router.detectors import Detector, make_detector
from router.domain_state import DomainState
from router.embedders import default_embedder
from router.embedding import Embedder
from router.jobs import make_train_job
from router.naming import doc_terms, domain_name
from router.promotion import Promotion, arrival_rate
from router.records import DomainRecord, DriftEvent, RoutedDoc, TrainJob
from router.replays import DecidedIds
from router.table import DomainTable
from router.timeline import Key, Timeline, entry_key
from worx.ids import content_hash
from worx.records import Record
from worx.stage import Emit, Message

log = logging.getLogger(__name__)

SNAPSHOT_FORMAT = 2  # 2: entry keys (buffer items, timeline)
QUIET_CHECK_EVERY = 100  # decisions between looks for domains that stopped arriving


class DiscoverStage:
    input_record: ClassVar[type[Record] | None] = RoutedDoc

    def __init__(self, config: RouterConfig | None = None, embedder: Embedder | None = None):
        self.config = config or RouterConfig()
        self.embedder = embedder or default_embedder(self.config)
        self.table = DomainTable(dim=self.embedder.dim)  # (another dimension: refused)
        self.clusterer = NoveltyClusterer(
            dim=self.embedder.dim,
            capacity=self.config.buffer_docs,
            knn=self.config.cluster_knn,
            shared=self.config.cluster_shared,
            min_size=self.config.promote_min_size,
            stable_runs=self.config.promote_stable_runs,
            split_similarity=self.config.cluster_split_similarity,
            coarse_knn=self.config.cluster_coarse_knn,
        )
        self.promotion = Promotion(self.config)
        self.novelty: Detector = make_detector(
            "page-hinkley",
            delta=self.config.novelty_delta,
            threshold=self.config.novelty_threshold,
            min_instances=self.config.detector_min_docs,
        )
        self.domains: dict[str, DomainState] = {}
        self.offsets: dict[str, int] = {}  # "topic:partition" -> next offset to read
        self.decided = DecidedIds(self.config.replay_window_docs)  # route's replays skipped
        self.seen = 0  # decisions processed (the sequence number of events' windows)
        # when the decided documents entered (arrival rules: see router.timeline); it
        # spans the buffer's lifetime twice, so every window asked about is covered
        self.timeline = Timeline(horizon=2 * self.config.buffer_max_age)
        self.since_cluster = 0
        self.window_start = 0  # sequence number where the novelty detector was last reset

    # ------------------------------------------------------------------ processing
    def process(self, message: Message, record: Record | None = None) -> list[Emit]:
        if not isinstance(record, RoutedDoc):
            raise TypeError(f"discover expects a RoutedDoc, got {type(record).__name__}")
        self.offsets[f"{message.topic}:{message.partition}"] = message.offset + 1
        if self.decided.replayed(record.doc_id):
            return []  # the document's first decision was applied (see router.replays)
        self.seen += 1
        now = message.timestamp_ms
        # the source document's timestamp; a record of an older route worker has none
        # (then when it was routed; with neither, as in direct calls, the order consumed)
        entered = record.doc_created_ms or message.timestamp_ms or self.seen
        key = (int(entered), int(record.docs_offset))
        self.timeline.add(key)
        doc = {
            "doc_id": record.doc_id,
            "topic": record.docs_topic,
            "partition": record.docs_partition,
            "offset": record.docs_offset,
            "label": record.label,
            "seq": self.seen,  # consumption order: the buffer's age
            "entered": list(key),  # entry order: arrival rules
            "content": record.content_id,  # the held-out split's key (router.jobs)
        }
        out: list[Emit] = []
        domain_id, similarity = record.domain_id, record.similarity
        vector = None
        if record.text:
            vector = self.embedder.embed([record.text])[0]  # (dim,)
            doc["terms"] = doc_terms(record.text)  # for the name of a domain it may found
            # the route worker may not have applied our latest domain yet: re-decide locally
            domain_id, similarity, uncertain, _ = self.table.decide(vector)
        elif domain_id is not None and self.table.get(domain_id) is None:
            log.debug("decision for unknown domain %s ignored", domain_id)
            return []  # made with a table this instance does not hold: no evidence here
        rate_before = self.novelty.mean
        if self.novelty.update(1.0 if domain_id is None else 0.0):
            out.append(self._novelty_event(now, rate_before))
            self.since_cluster = self.config.cluster_every  # cluster at once
        if domain_id is not None:
            out.extend(self._assigned(domain_id, similarity, doc, now))
        if vector is not None and (domain_id is None or uncertain):
            self.clusterer.add(vector, doc)
            self.since_cluster += 1
        waits = self.config.job_quiet_docs or self.config.job_wait_docs
        if waits and self.seen % QUIET_CHECK_EVERY == 0:
            out.extend(self._quiet_jobs(now))
        if self.since_cluster >= self.config.cluster_every:
            self.since_cluster = 0
            self.clusterer.expire(self.seen - self.config.buffer_max_age)
            out.extend(self._cluster(now))
        return out

    def _assigned(self, domain_id: str, similarity: float, doc: dict, now: int) -> list[Emit]:
        row = self.table.get(domain_id)
        state = self.domains[domain_id]
        out: list[Emit] = []
        state.recent.append(doc)
        if state.job_id is None:
            if state.collect(doc) >= self.config.job_docs:
                out.extend(self._first_job(domain_id, now))
        spread = max(row.distance_std, 0.02)
        z = ((1.0 - similarity) - row.distance_mean) / spread
        if state.detector.update(z):
            out.extend(self._drift(domain_id, now))
        return out

    def _cluster(self, now: int) -> list[Emit]:
        """Cluster the buffer; hand groups that belong to known domains back to them, then
        promote every core that passes the rules (after a promotion in this run, each next
        core is judged against the table as it now is)."""
        out: list[Emit] = []
        candidates = self.clusterer.run()
        items = self.clusterer.items
        groups = [(cand, [items[i]["doc_id"] for i in cand.members]) for cand in candidates]
        gone: set[str] = set()  # doc ids that left the buffer in this run
        where = _positions(self.clusterer.items)
        for cand, _ in groups:
            for group in [cand, *cand.parts]:
                ids = [items[i]["doc_id"] for i in group.members]
                if gone.intersection(ids):
                    continue
                group = _at(group, ids, where)
                near = self._home(group)
                if near is not None:
                    # a dense part of a known domain (its tail): those documents belong there
                    taken = self.clusterer.remove(group.members)
                    gone.update(ids)
                    where = _positions(self.clusterer.items)
                    self.clusterer.forget_core(set(ids))
                    log.debug("group of %d docs joins %s", len(taken), near)
                    for doc in taken:
                        out.extend(self._assigned_quiet(near, doc, now))
        promoted = False
        for cand, ids in groups:
            if gone.intersection(ids):
                continue
            cand = _at(cand, ids, where)
            if promoted and self._home(cand) is not None:
                continue  # close to a domain promoted in this run: judged again next run
            if self.promotion.promotable(cand, self._arrival_rate, self._claims):
                before = set(where)
                out.extend(self._promote(cand, now))
                where = _positions(self.clusterer.items)
                gone.update(before - set(where))
                promoted = True
        return out

    def _home(self, group: Candidate) -> str | None:
        """The known domain ``group`` is part of (see :meth:`_belongs`), or None."""
        near, sim = self.table.nearest(group.centroid)
        return near if near is not None and self._belongs(near, sim, group) else None

    def _claims(self, cand: Candidate, threshold: float) -> int:
        """Buffered documents outside ``cand`` at or above ``threshold`` of its centroid."""
        sims = self.clusterer.vectors @ cand.centroid  # (n,)
        return int((sims >= threshold).sum()) - int((sims[cand.members] >= threshold).sum())

    def _arrival_rate(self, cand: Candidate) -> float:
        """Share of the stream the core's documents made up while they arrived."""
        return arrival_rate(self._entered(cand), self.timeline)

    def _entered(self, cand: Candidate) -> list[Key]:
        """Entry keys of a core's members (when their documents entered the system)."""
        return [entry_key(self.clusterer.items[i]["entered"]) for i in cand.members]

    def _belongs(self, domain_id: str, centroid_sim: float, cand: Candidate) -> bool:
        """Is the core part of ``domain_id`` rather than a new domain? (See
        :meth:`router.promotion.Promotion.belongs`.)"""
        row = self.table.get(domain_id)
        member_sims = self.clusterer.vectors[cand.members] @ np.asarray(row.centroid, np.float32)
        return self.promotion.belongs(row, centroid_sim, cand, member_sims, self._arrival_rate)

    def _assigned_quiet(self, domain_id: str, doc: dict, now: int) -> list[Emit]:
        """Count a document toward its domain's job without feeding the distance detector."""
        state = self.domains[domain_id]
        state.recent.append(doc)
        if state.job_id is None:
            if state.collect(doc) >= self.config.job_docs:
                return self._first_job(domain_id, now)
        return []

    def _promote(self, cand: Candidate, now: int) -> list[Emit]:
        members = [self.clusterer.items[i] for i in cand.members]
        row = self.promotion.domain_row(cand, members, self.embedder.fingerprint, now)
        inside = set(cand.members)
        others = [item for i, item in enumerate(self.clusterer.items) if i not in inside]
        row = dataclasses.replace(row, name=domain_name(members, others))
        domain_id = row.domain_id
        self.table.apply(row)
        self.domains[domain_id] = DomainState(self.config)
        taken, claimed = self._take(cand, domain_id)
        event = self.promotion.event(row, cand, taken, claimed, self.seen, now)
        self.novelty.reset()
        self.window_start = self.seen
        out = [Emit("domains", domain_id, row), Emit("drift", event.event_id, event)]
        for doc in taken:
            out.extend(self._assigned_quiet(domain_id, doc, now))
        return out

    def _take(self, cand: Candidate, domain_id: str) -> tuple[list[dict], int]:
        """Remove a core from the buffer, and the buffered documents ``domain_id`` now
        claims; returns their items and how many were claimed."""
        taken = self.clusterer.remove(cand.members)
        self.clusterer.forget_core({d["doc_id"] for d in taken})
        claimed = [
            i
            for i in range(len(self.clusterer))
            if self.table.route(self.clusterer.vectors[i])[0] == domain_id
        ]
        return taken + self.clusterer.remove(claimed), len(claimed)

    def _quiet_jobs(self, now: int) -> list[Emit]:
        """First jobs of domains that stopped arriving or arrive too slowly: at least
        ``job_min_docs`` gathered and no new text in the last ``job_quiet_docs`` decisions
        (a short burst of a rare kind), or ``job_wait_docs`` decisions since the first of
        them (a rare kind that trickles in: never quiet, and far from ``job_docs``); or, both
        at once, at least ``job_quiet_min_docs`` (its texts stopped coming: waiting cannot
        add to its job)."""
        out: list[Emit] = []
        config = self.config
        least = min(config.job_min_docs, config.job_docs)
        least_quiet = min(config.job_quiet_min_docs, least)
        for domain_id, state in sorted(self.domains.items()):
            gathered = len(state.collected)
            if state.job_id is not None or gathered < least_quiet:
                continue
            last = int(state.collected[-1].get("seq", self.seen))
            first = min(int(d.get("seq", self.seen)) for d in state.collected)
            quiet = config.job_quiet_docs and self.seen - last >= config.job_quiet_docs
            waited = config.job_wait_docs and self.seen - first >= config.job_wait_docs
            if ((quiet or waited) and gathered >= least) or (quiet and waited):
                out.extend(self._first_job(domain_id, now))
        return out

    def _first_job(self, domain_id: str, now: int) -> list[Emit]:
        state = self.domains[domain_id]
        row = self.table.get(domain_id)
        job = self._job(domain_id, "new_domain", state.collected, row, None, now)
        state.job_id = job.job_id
        state.clear_collected()
        updated = DomainRecord(
            **{
                **_fields(row),
                "version": row.version + 1,
                "size": row.size + len(job.train_doc_ids),
            }
        )
        self.table.apply(updated)
        return [Emit("train", job.job_id, job), Emit("domains", domain_id, updated)]

    def _drift(self, domain_id: str, now: int) -> list[Emit]:
        state = self.domains[domain_id]
        row = self.table.get(domain_id)
        event = DriftEvent(
            event_id="ev-" + content_hash(f"distance:{domain_id}:{self.seen}", length=16),
            detector="domain_distance",
            kind="drift",
            domain_id=domain_id,
            statistics={"recent_docs": float(len(state.recent))},
            window_start_offset=max(0, self.seen - len(state.recent)),
            window_end_offset=self.seen,
            created_ms=now,
        )
        log.warning(
            "drift %s",
            json.dumps({"domain_id": domain_id, "detector": "domain_distance", "seen": self.seen}),
        )
        out: list[Emit] = [Emit("drift", event.event_id, event)]
        out.extend(self._rename(domain_id, list(state.recent)))
        if len(state.recent) >= self.config.promote_min_size:
            parent = row.expert_ids[-1] if row.expert_ids else None
            job = self._job(domain_id, "drift", list(state.recent), row, parent, now)
            if job.job_id not in state.drift_jobs:
                state.drift_jobs.append(job.job_id)
                out.append(Emit("train", job.job_id, job))
        return out

    def _rename(self, domain_id: str, recent: list[dict]) -> list[Emit]:
        """Refresh a drifted domain's name from its recent documents (their labels, else
        the terms of those that carried text, against the novelty buffer); the row's next
        version when the name changed, else nothing (too little evidence keeps the name)."""
        row = self.table.get(domain_id)
        with_terms = [d for d in recent if d.get("terms")]
        if any(d.get("label") for d in recent):
            name = domain_name(recent, [])
        elif len(with_terms) >= self.config.promote_min_size // 2:
            name = domain_name(with_terms, self.clusterer.items)
        else:
            name = None
        if not name or name == row.name:
            return []
        log.info("domain %s renamed %r -> %r", domain_id, row.name, name)
        self.table.apply(dataclasses.replace(row, name=name, version=row.version + 1))
        return [Emit("domains", domain_id, self.table.get(domain_id))]

    def _novelty_event(self, now: int, rate_before: float) -> Emit:
        event = DriftEvent(
            event_id="ev-" + content_hash(f"novelty:{self.seen}", length=16),
            detector="novelty_rate",
            kind="new_domain",
            domain_id=None,
            statistics={"novelty_rate_before": rate_before, "buffered": float(len(self.clusterer))},
            window_start_offset=self.window_start,
            window_end_offset=self.seen,
            created_ms=now,
        )
        log.warning("drift %s", json.dumps({"detector": "novelty_rate", "seen": self.seen}))
        self.window_start = self.seen
        return Emit("drift", event.event_id, event)

    def _job(
        self,
        domain_id: str,
        reason: str,
        docs: list[dict],
        row: DomainRecord,
        parent: str | None,
        now: int,
    ) -> TrainJob:
        job = make_train_job(
            domain_id,
            reason,
            docs,
            row.centroid,
            self.config.heldout_fraction,
            salt=self.config.heldout_salt,
            parent_expert_id=parent,
            created_ms=now,
        )
        log.info(
            "train job %s",
            json.dumps(
                {
                    "job_id": job.job_id,
                    "domain_id": domain_id,
                    "reason": reason,
                    "train": len(job.train_doc_ids),
                    "heldout": len(job.heldout_doc_ids),
                }
            ),
        )
        return job

    # ------------------------------------------------------------------ the domain table
    def add_expert(self, domain_id: str, expert_id: str) -> list[Emit]:
        """Record that ``expert_id`` (registered on ``worx.experts``) serves ``domain_id``.

        Returns the row's new version to emit on ``worx.domains``, or nothing if the row
        lists the expert already (registrations are replayed on every start). A drift job
        of the domain then branches from its latest expert.

        Raises:
            KeyError: this stage does not know ``domain_id`` (yet): the caller keeps the
                registration until the row arrives.
        """
        row = self.table.get(domain_id)
        if row is None:
            raise KeyError(domain_id)
        if expert_id in row.expert_ids:
            return []
        self.table.apply(
            DomainRecord(
                **{
                    **_fields(row),
                    "expert_ids": [*row.expert_ids, expert_id],
                    "version": row.version + 1,
                }
            )
        )
        updated = self.table.get(domain_id)
        log.info(
            "domain %s has experts %s (version %d)", domain_id, updated.expert_ids, updated.version
        )
        return [Emit("domains", domain_id, updated)]

    def apply_domain(self, row: DomainRecord) -> None:
        """Merge a row from ``worx.domains`` written by someone else (e.g. expert ids)."""
        mine = self.table.get(row.domain_id)
        if mine is None:
            if self.table.apply(row):
                self.domains.setdefault(row.domain_id, DomainState(self.config))
            return
        if row.expert_ids != mine.expert_ids and row.version >= mine.version:
            self.table.apply(
                DomainRecord(
                    **{
                        **_fields(mine),
                        "expert_ids": list(row.expert_ids),
                        "version": row.version + 1,
                    }
                )
            )

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "embedder": self.embedder.fingerprint,
            "offsets": dict(self.offsets),
            "seen": self.seen,
            "since_cluster": self.since_cluster,
            "window_start": self.window_start,
            "table": [row.to_dict() for row in self.table.rows()],
            "domains": {d: s.snapshot() for d, s in sorted(self.domains.items())},
            "novelty": self.novelty.snapshot(),
            "clusterer": self.clusterer.snapshot(),
            "timeline": self.timeline.snapshot(),
            "decided": self.decided.snapshot(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(
                f"discover snapshot format {state.get('format')!r} is not "
                f"{SNAPSHOT_FORMAT}; delete the snapshot to start afresh"
            )
        if state["embedder"] != self.embedder.fingerprint:
            raise ValueError(
                f"discover snapshot was made with embedder {state['embedder']}, this "
                f"configuration embeds with {self.embedder.fingerprint}; restore the [router] "
                "settings or delete the snapshot"
            )
        self.offsets = {k: int(v) for k, v in state["offsets"].items()}
        self.seen = int(state["seen"])
        self.since_cluster = int(state["since_cluster"])
        self.window_start = int(state["window_start"])
        self.table = DomainTable(dim=self.embedder.dim)  # (another dimension: refused)
        for body in state["table"]:
            self.table.apply(DomainRecord.from_dict(body))
        self.domains = {}
        for domain_id, body in state["domains"].items():
            self.domains[domain_id] = DomainState(self.config)
            self.domains[domain_id].restore(body)
        self.novelty.restore(state["novelty"])
        self.clusterer.restore(state["clusterer"])
        self.timeline.restore(state["timeline"])
        if "decided" in state:  # (a snapshot of an older discover has none)
            self.decided.restore(state["decided"])


def _positions(items: list[dict]) -> dict[str, int]:
    """Buffer position of each buffered document, by doc id."""
    return {item["doc_id"]: i for i, item in enumerate(items)}


def _at(cand: Candidate, ids: list[str], where: dict[str, int]) -> Candidate:
    """``cand`` with its members (``ids``, in order) at their positions ``where`` now."""
    members = [where[d] for d in ids]
    return cand if members == cand.members else dataclasses.replace(cand, members=members)


def _fields(row: DomainRecord) -> dict[str, Any]:
    body = row.to_dict()
    body.pop("schema_version")
    return body
