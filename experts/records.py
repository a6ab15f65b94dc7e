"""Records emitted about experts."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.records import Record


@dataclass(frozen=True)
class ExpertRegistration(Record):
    """An expert written to the store, on the compacted ``worx.experts`` (keyed by expert_id).

    Names the safetensors file by path relative to the store root and its sha256: the
    tensors themselves never travel on a topic.
    """

    SCHEMA_VERSION = 1

    expert_id: str
    domain_id: str
    sha256: str  # of weights.safetensors
    trunk_fingerprint: str
    centroid: list[float]
    parent_expert_id: str | None = None
    job_id: str | None = None
    num_params: int = 0
    summary: dict = field(default_factory=dict)  # training summary (losses, perplexities)
    created_ms: int = 0
