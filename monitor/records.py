"""Records emitted by the forgetting monitor (``worx.metrics``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.checks import check_id, check_ids, check_name, check_range
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
    # domain -> where its re-routed documents went: {destination: [documents, loss delta]}
    # (metrics.routing_moves)
    routing_moves: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)  # monitor.metrics.summarise of this step
    # the monitor's cost of this step: process CPU seconds (time.process_time) of its
    # evaluation (ours: weight checks, routing, scoring, back-fill, metrics; dense: the
    # fine-tune and the evaluation), the held-out documents it scored (the others' losses
    # were known: monitor/loss_cache.py) and the experts whose weights it re-verified
    cpu_s: float = 0.0
    docs_scored: int = 0
    experts_verified: int = 0

    def check(self) -> EvalRow:
        check_name("run", self.run)
        check_range("step", self.step, 0)
        check_ids("expert_ids", self.expert_ids)
        for name in (
            "loss",
            "perplexity",
            "routing_changed",
            "routing_loss_delta",
            "routing_moves",
            "heldout_size",
        ):
            check_ids(f"{name} domain", getattr(self, name))
        for domain, ppl in self.perplexity.items():
            check_range(f"perplexity[{domain}]", ppl, 0)
        for domain, share in self.routing_changed.items():
            check_range(f"routing_changed[{domain}]", share, 0, 1)
        for domain, size in self.heldout_size.items():
            check_range(f"heldout_size[{domain}]", size, 0)
        check_range("created_ms", self.created_ms, 0)
        for name in ("cpu_s", "docs_scored", "experts_verified"):
            check_range(name, getattr(self, name), 0)
        check_id("arrived_expert", self.arrived_expert, optional=True)
        check_id("arrived_domain", self.arrived_domain, optional=True)
        return self
