"""Records emitted about experts."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.checks import check_dim, check_hex64, check_id, check_range, check_unit_vector
from worx.records import Record, RecordError


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

    def check(self) -> ExpertRegistration:
        check_id("expert_id", self.expert_id)
        check_id("domain_id", self.domain_id)
        check_hex64("sha256", self.sha256)
        check_id("trunk_fingerprint", self.trunk_fingerprint)
        check_unit_vector("centroid", self.centroid)
        check_id("parent_expert_id", self.parent_expert_id, optional=True)
        check_id("job_id", self.job_id, optional=True)
        check_range("num_params", self.num_params, 0)
        check_range("created_ms", self.created_ms, 0)
        return self

    def check_dim(self, dim: int) -> ExpertRegistration:
        """Refuse a centroid of another embedder than the caller's (``dim`` dimensions)."""
        check_dim(f"expert {self.expert_id}: centroid", self.centroid, dim)
        return self

    def check_trunk(self, fingerprint: str) -> ExpertRegistration:
        """Refuse an expert built on another trunk than ``fingerprint``."""
        if self.trunk_fingerprint != fingerprint:
            raise RecordError(
                f"expert {self.expert_id} was built on trunk {self.trunk_fingerprint[:12]}..., "
                f"this stage runs {fingerprint[:12]}...",
                reason="wrong_trunk",
            )
        return self
