"""Records emitted by the route and discover stages."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.records import Record


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


@dataclass(frozen=True)
class DocRef(Record):
    """A contiguous range of offsets ``[start, end)`` in one partition of ``worx.docs``."""

    SCHEMA_VERSION = 1

    topic: str
    partition: int
    start: int
    end: int


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
