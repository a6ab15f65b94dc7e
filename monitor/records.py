"""Records emitted by the forgetting monitor (``worx.metrics``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.records import Record


@dataclass(frozen=True)
class EvalRow(Record):
    """One row of the evaluation matrix: the serving mixture after ``step`` registrations."""

    SCHEMA_VERSION = 1

    run: str  # "ours" | "dense_baseline"
    step: int  # 0 = trunk alone; i = after the i-th registration
    expert_ids: list[str]  # experts present at this step, in arrival order
    loss: dict[str, float]  # domain_id -> mean loss (nats/token) on its held-out set
    perplexity: dict[str, float]
    weight_changes: list[str] = field(default_factory=list)  # tensors whose hash changed
    routing_changed: dict[str, float] = field(default_factory=dict)  # domain -> share changed
    created_ms: int = 0
    # added fields (optional; older rows decode with the defaults)
    arrived_expert: str | None = None  # the expert whose registration made this step
    arrived_domain: str | None = None  # its domain
    # domain -> change of its mean loss caused by re-routed documents (metrics.routing_change)
    routing_loss_delta: dict[str, float] = field(default_factory=dict)
    heldout_size: dict[str, int] = field(default_factory=dict)  # domain -> documents evaluated
    summary: dict = field(default_factory=dict)  # monitor.metrics.summarise of this step
