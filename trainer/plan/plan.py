"""A training plan: expert training and dense fine-tuning side by side, on one machine.

Example
-------
>>> from trainer.plan import ExpertSpec, Hardware, RunShape, TrunkShape, plan_training
>>> trunk = TrunkShape.named("llama-7b")
>>> plan = plan_training(trunk, ExpertSpec.sized(trunk, "adapter", 150_000_000),
...                      RunShape(trunk_dtype="bfloat16"), Hardware(gpus=1))
>>> plan.expert.name, plan.expert.fits, plan.dense.fits
('expert_gpu', True, True)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trainer.plan.bytes import GPU_CONTEXT_BYTES, PROCESS_OVERHEAD_BYTES
from trainer.plan.dense_placements import dense_placements
from trainer.plan.expert_placements import expert_placements
from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.placement import Placement
from trainer.plan.run import Hardware, RunShape
from trainer.plan.shapes import TrunkShape

LEFT_OUT = (
    "communication between GPUs (data-parallel all-reduce, ZeRO gathers): tokens/s scale "
    "linearly with GPUs",
    "the CPU Adam step's own temporaries on the host in offloaded dense placements",
    "evaluation passes, checkpoint writes and data loading (outside the training step)",
    "allocator fragmentation and caching (the CUDA caching allocator can hold more than "
    "is live); on the CPU the bench sets MALLOC_MMAP_THRESHOLD_=65536 so RSS follows live "
    "memory",
    "kernels' own workspaces (cuBLAS, SDPA) beyond the assumed CUDA context",
    "a GPU's host-side CUDA runtime memory (the process overhead is measured on the CPU)",
)


@dataclass
class TrainingPlan:
    trunk: TrunkShape
    expert_spec: ExpertSpec
    run: RunShape
    hardware: Hardware
    expert: Placement  # the first expert placement that fits (else the most frugal one)
    dense: Placement  # the same for dense fine-tuning of the trunk (and every expert)
    expert_candidates: list[Placement] = field(default_factory=list)
    dense_candidates: list[Placement] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One plain sentence per side."""
        return f"expert: {_verdict(self.expert)}. dense: {_verdict(self.dense)}."

    def to_dict(self) -> dict[str, Any]:
        return {
            "trunk": self.trunk.to_dict(),
            "expert_spec": self.expert_spec.to_dict(),
            "run": self.run.to_dict(),
            "hardware": self.hardware.to_dict(),
            "assumptions": {
                "process_overhead_bytes": PROCESS_OVERHEAD_BYTES,
                "gpu_context_bytes": GPU_CONTEXT_BYTES,
                "mfu": self.hardware.mfu,
                "left_out": list(LEFT_OUT),
            },
            "summary": self.summary,
            "expert": self.expert.to_dict(),
            "dense": self.dense.to_dict(),
            "expert_candidates": [p.to_dict() for p in self.expert_candidates],
            "dense_candidates": [p.to_dict() for p in self.dense_candidates],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def _verdict(placement: Placement) -> str:
    if placement.fits:
        return f"fits as {placement.name} ({placement.description})"
    return f"nothing fits; the most frugal placement, {placement.name}, {placement.reason}"


def choose(candidates: list[Placement], hardware: Hardware) -> Placement:
    """The first candidate that fits; if none does, the one that needs the least memory."""
    for placement in candidates:
        placement.check(hardware)
    fitting = [p for p in candidates if p.fits]
    if fitting:
        return fitting[0]
    return min(candidates, key=lambda p: (p.peak_gpu_bytes + p.peak_host_bytes, p.disk_bytes))


def plan_training(
    trunk: TrunkShape,
    expert: ExpertSpec,
    run: RunShape,
    hardware: Hardware,
    active_experts: int = 1,
) -> TrainingPlan:
    """Plan expert training and dense fine-tuning of ``trunk`` on ``hardware``.

    Dense fine-tunes the trunk and, when the mixture holds ``expert.count > 1`` experts,
    every expert with it (the whole sparse model as one dense job, ``active_experts`` of
    them active per token)."""
    if expert.hidden != trunk.hidden:
        raise ValueError(
            f"the expert is built for width {expert.hidden}, the trunk is {trunk.hidden} wide"
        )
    experts = expert_placements(trunk, expert, run, hardware)
    extra = expert.params * expert.count if expert.count > 1 else 0
    active = expert.params * min(active_experts, expert.count) if expert.count > 1 else 0
    dense = dense_placements(trunk, run, hardware, extra_params=extra, active_params=active)
    return TrainingPlan(
        trunk=trunk,
        expert_spec=expert,
        run=run,
        hardware=hardware,
        expert=choose(experts, hardware),
        dense=choose(dense, hardware),
        expert_candidates=experts,
        dense_candidates=dense,
    )
