"""Records emitted by the route and discover stages."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.checks import (
    COSINE,
    check_choice,
    check_dim,
    check_doc_id,
    check_doc_ids,
    check_id,
    check_ids,
    check_name,
    check_range,
    check_text,
    check_topic,
    check_unit_vector,
)
from worx.records import MAX_ITEMS, Record, RecordError, fast_json

THRESHOLD = (-2.0, 2.0)  # a cosine threshold: [-1, 1] and the margins learned around it
DISTANCE = (0.0, 2.0 + 1e-3)  # 1 - cosine


@dataclass(frozen=True)
class RoutedDoc(Record):
    """A document's routing decision on ``worx.routed`` (keyed by ``doc_id``).

    Carries the text only so discover (which sees novel documents alone) need not re-read
    ``worx.docs``; the position of the original ``Doc`` is kept for training references.
    """

    SCHEMA_VERSION = 1

    doc_id: str
    domain_id: str | None  # None: novel (no known domain close enough)
    similarity: float  # cosine similarity to the chosen (or nearest) domain centroid
    docs_topic: str
    docs_partition: int
    docs_offset: int
    text: str = ""  # present for novel and uncertain documents only
    label: str | None = None  # the Doc's given label, passed through for evaluation
    domain_version: int = 0  # version of the domain table the decision used
    uncertain: bool = False  # assigned, but below the domain's core threshold (text carried)
    doc_created_ms: int = 0  # when the document entered the system (the Doc's created_ms,
    # else its worx.docs timestamp): discover's arrival rules order by it, not by the
    # interleaved order it consumes worx.routed in; 0: unknown (a record of an older route)
    content_id: str = ""  # hash of the text (worx.ids.content_hash): one text sent twice
    # under two ids is one document to the held-out split; "": unknown (an older route)

    def check(self) -> RoutedDoc:
        check_doc_id("doc_id", self.doc_id)
        check_id("domain_id", self.domain_id, optional=True)
        check_range("similarity", self.similarity, *COSINE)
        check_topic("docs_topic", self.docs_topic)
        check_range("docs_partition", self.docs_partition, 0)
        check_range("docs_offset", self.docs_offset, 0)
        if self.text:  # carried for novel and uncertain documents only
            check_text("text", self.text)
        check_id("label", self.label, optional=True)
        check_range("domain_version", self.domain_version, 0)
        check_range("doc_created_ms", self.doc_created_ms, 0)
        if self.content_id:
            check_id("content_id", self.content_id)
        return self

    def to_json(self) -> bytes:
        return fast_json(self) or super().to_json()


@dataclass(frozen=True)
class DomainRecord(Record):
    """One row of the domain table on the compacted ``worx.domains`` (keyed by ``domain_id``)."""

    SCHEMA_VERSION = 1

    domain_id: str
    centroid: list[float]  # L2-normalised, in the default embedder's space
    threshold: float  # minimum cosine similarity for a document to belong here
    size: int  # documents that formed / were assigned to the domain at promotion
    cohesion: float  # mean cosine similarity of members to the centroid
    status: str = "active"  # "active" | "retired"
    expert_ids: list[str] = field(default_factory=list)
    parent_domain_id: str | None = None  # set when a drifted domain was re-spawned
    embedder: str = ""  # name + config hash of the embedder that made the centroid
    version: int = 1  # increments on every update of this domain
    created_ms: int = 0
    label_hint: str | None = None  # majority given label of the members (display only)
    core_threshold: float = 0.0  # below it an assigned document is "uncertain" (goes to
    # discover with its text, where a new domain hiding inside this one can surface)
    distance_mean: float = 0.0  # mean of 1 - cosine of the members (drift reference)
    distance_std: float = 0.0  # its standard deviation
    name: str | None = None  # what people read (router.naming): the majority label, else
    # the cluster's distinctive terms; None in rows written before names (display_name)

    def check(self) -> DomainRecord:
        check_id("domain_id", self.domain_id)
        check_unit_vector("centroid", self.centroid)
        check_range("threshold", self.threshold, *THRESHOLD)
        check_range("core_threshold", self.core_threshold, *THRESHOLD)
        check_range("cohesion", self.cohesion, *COSINE)
        check_range("size", self.size, 0)
        check_choice("status", self.status, ("active", "retired"))
        check_ids("expert_ids", self.expert_ids)
        check_id("parent_domain_id", self.parent_domain_id, optional=True)
        check_name("embedder", self.embedder)
        check_range("version", self.version, 0)
        check_range("created_ms", self.created_ms, 0)
        check_name("label_hint", self.label_hint, optional=True)
        check_range("distance_mean", self.distance_mean, *DISTANCE)
        check_range("distance_std", self.distance_std, *DISTANCE)
        check_name("name", self.name, optional=True)
        return self

    def check_dim(self, dim: int) -> DomainRecord:
        """Refuse a centroid of another embedder than the caller's (``dim`` dimensions)."""
        check_dim(f"domain {self.domain_id}: centroid", self.centroid, dim)
        return self

    def check_embedder(self, fingerprint: str) -> DomainRecord:
        """Refuse a row made by another embedder than ``fingerprint`` (a row that names
        none, as rows written by hand do, is left to :meth:`check_dim`)."""
        if self.embedder and self.embedder != fingerprint:
            raise RecordError(
                f"domain {self.domain_id} was made by embedder {self.embedder[:60]!r}, this "
                f"stage embeds with {fingerprint[:60]!r}",
                reason="wrong_embedder",
            )
        return self


@dataclass(frozen=True)
class DocRef(Record):
    """A contiguous range of offsets ``[start, end)`` in one partition of ``worx.docs``."""

    SCHEMA_VERSION = 1

    topic: str
    partition: int
    start: int
    end: int

    def check(self) -> DocRef:
        check_topic("topic", self.topic)
        check_range("partition", self.partition, 0, 2**31 - 1)
        check_range("start", self.start, 0)
        check_range("end", self.end, self.start)
        return self


@dataclass(frozen=True)
class DriftEvent(Record):
    """A detector fired (``worx.drift``)."""

    SCHEMA_VERSION = 1

    event_id: str  # deterministic from detector, domain and the offset where it fired
    detector: str  # "novelty_rate" | "domain_distance" | "promotion"
    kind: str  # "new_domain" | "drift"
    domain_id: str | None
    statistics: dict[str, float]
    window_start_offset: int
    window_end_offset: int
    created_ms: int = 0

    def check(self) -> DriftEvent:
        check_id("event_id", self.event_id)
        check_choice("detector", self.detector, ("novelty_rate", "domain_distance", "promotion"))
        check_choice("kind", self.kind, ("new_domain", "drift"))
        check_id("domain_id", self.domain_id, optional=True)
        for key in self.statistics:
            check_name("statistics key", key)
        check_range("window_start_offset", self.window_start_offset, 0)
        check_range("window_end_offset", self.window_end_offset, self.window_start_offset)
        check_range("created_ms", self.created_ms, 0)
        return self


@dataclass(frozen=True)
class TrainJob(Record):
    """A request to train one expert (``worx.train``, keyed by ``job_id``).

    Documents are named by reference only (never copied): ``train_doc_ids`` and
    ``heldout_doc_ids`` are ids in ``worx.docs``, found in the ranges of ``refs``.
    """

    SCHEMA_VERSION = 1

    job_id: str  # deterministic: hash of domain_id and the sorted training doc ids
    domain_id: str
    reason: str  # "new_domain" | "drift"
    refs: list[dict]  # DocRef.to_dict() items: where to find the documents
    train_doc_ids: list[str]
    heldout_doc_ids: list[str]
    centroid: list[float]
    parent_expert_id: str | None = None  # branch from this expert (drift), else zero-init
    created_ms: int = 0

    def check(self) -> TrainJob:
        check_id("job_id", self.job_id)
        check_id("domain_id", self.domain_id)
        check_choice("reason", self.reason, ("new_domain", "drift"))
        span = sum(ref.end - ref.start for ref in self.doc_refs())
        check_range("the offsets the refs span", span, 0, MAX_ITEMS)
        check_doc_ids("train_doc_ids", self.train_doc_ids)
        check_doc_ids("heldout_doc_ids", self.heldout_doc_ids)
        check_unit_vector("centroid", self.centroid)
        check_id("parent_expert_id", self.parent_expert_id, optional=True)
        check_range("created_ms", self.created_ms, 0)
        return self

    def doc_refs(self) -> list[DocRef]:
        """``refs`` as checked :class:`DocRef` (an item may omit its ``schema_version``)."""
        refs = []
        for i, raw in enumerate(self.refs):
            if not isinstance(raw, dict):
                raise RecordError(f"refs[{i}] is not an object", reason="wrong_type")
            body = {"schema_version": DocRef.SCHEMA_VERSION, **raw}
            try:
                refs.append(DocRef.from_dict(body, strict=False))
            except RecordError as exc:
                raise RecordError(f"refs[{i}]: {exc}", reason=exc.reason) from exc
        return refs

    def check_docs_topic(self, docs_topic: str) -> TrainJob:
        """Refuse refs to any topic but ``docs_topic`` (``<prefix>.docs``): a job must
        not make the trainer read, and train on, another topic the credentials reach."""
        for ref in self.doc_refs():
            if ref.topic != docs_topic:
                raise RecordError(
                    f"job {self.job_id}: a ref names topic {ref.topic!r}; jobs may only name "
                    f"documents of {docs_topic!r}",
                    reason="foreign_topic",
                )
        return self

    def check_dim(self, dim: int) -> TrainJob:
        """Refuse a centroid of another embedder than the caller's (``dim`` dimensions)."""
        check_dim(f"job {self.job_id}: centroid", self.centroid, dim)
        return self
