"""Where each byte lives: what a placement is, and the parts every placement shares.

A placement lists its components as ``(name, bytes, where)`` with ``where`` one of
``gpu`` (per GPU), ``host`` (RAM of the node; with ``gpus=0`` the CPU trains, so its
working memory is host memory) and ``disk``. Its peaks are not the sum of the components:
gradients, the optimizer's temporaries and the activations do not all live at once, so a
peak is the persistent parts plus the larger of two phases, the peak of forward/backward
and the optimizer step (:class:`trainer.plan.bytes.StepBytes`).

The placements themselves: :mod:`trainer.plan.expert_placements` and
:mod:`trainer.plan.dense_placements`, each listed fastest first;
:func:`trainer.plan.plan.plan_training` picks the first that fits. ``implemented`` says
whether this project's recipes run it today.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from trainer.plan.bytes import (
    PROCESS_OVERHEAD_BYTES,
    TRAINING_RUNTIME_BYTES,
    StepBytes,
    trunk_bytes,
)
from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.run import Hardware, RunShape
from trainer.plan.shapes import TrunkShape, dtype_bytes

GIB = 2**30


@dataclass(frozen=True)
class Inputs:
    """What every placement of one plan is computed from."""

    trunk: TrunkShape
    run: RunShape
    hw: Hardware
    step: StepBytes  # the bytes of one training step (trainer.plan.bytes)
    flops: float  # per token
    compute: float  # tokens/s the node's compute allows (the whole node)


class Component(NamedTuple):
    name: str
    bytes: int
    where: str  # "gpu" (per GPU) | "host" | "disk"


@dataclass
class Placement:
    name: str
    description: str
    components: list[Component]
    peak_host_bytes: int  # the whole node's host memory at the peak (every process)
    peak_gpu_bytes: int  # one GPU's memory at the peak (0 without GPUs)
    disk_bytes: int
    flops_per_token: float
    tokens_per_s: float  # the whole node
    bound: str  # what limits tokens_per_s: "compute" or the I/O path
    implemented: bool  # the project's recipes run this placement today
    note: str = ""
    phases: dict[str, int] = field(default_factory=dict)
    fits: bool = False
    reason: str = ""

    def check(self, hardware: Hardware) -> Placement:
        """Set ``fits`` and ``reason`` for ``hardware``; returns self."""
        short = []
        if hardware.gpus and self.peak_gpu_bytes > hardware.gpu_bytes:
            short.append(
                f"needs {_gib(self.peak_gpu_bytes)} per GPU, a GPU has {_gib(hardware.gpu_bytes)}"
            )
        if self.peak_host_bytes > hardware.host_bytes:
            short.append(
                f"needs {_gib(self.peak_host_bytes)} of host memory, the node has "
                f"{_gib(hardware.host_bytes)}"
            )
        if self.disk_bytes > hardware.disk_bytes:
            short.append(f"needs {_gib(self.disk_bytes)} of disk, {_gib(hardware.disk_bytes)} free")
        self.fits = not short
        self.reason = "fits" if self.fits else "; ".join(short)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "fits": self.fits,
            "reason": self.reason,
            "implemented": self.implemented,
            "note": self.note,
            "peak_host_bytes": self.peak_host_bytes,
            "peak_gpu_bytes": self.peak_gpu_bytes,
            "disk_bytes": self.disk_bytes,
            "tokens_per_s": round(self.tokens_per_s, 2),
            "bound": self.bound,
            "flops_per_token": self.flops_per_token,
            "phases": self.phases,
            "components": [
                {"name": c.name, "bytes": c.bytes, "where": c.where} for c in self.components
            ],
        }


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def process_components() -> list[Component]:
    """The trainer process itself (one per GPU): measured constants, trainer/plan/bytes.py."""
    return [
        Component("process: python, torch, libraries imported", PROCESS_OVERHEAD_BYTES, "host"),
        Component("training runtime: kernels, threads, tokenizer", TRAINING_RUNTIME_BYTES, "host"),
    ]


def act_bytes(run: RunShape, on_gpu: bool, dtype: str) -> int:
    """Bytes per activation value: bf16 under GPU autocast, else the weights' dtype."""
    return 2 if on_gpu and run.bf16_autocast else dtype_bytes(dtype)


# parts that do not all live at once: a peak counts the larger phase of them (StepBytes)
STREAMED_HELD = "trunk weights of the running module (fp32 copies + file pages, transient)"
WORKING = {
    STREAMED_HELD,
    "gradients (fp32)",
    "optimizer step temporaries (transient)",
    "saved activations",
    "recomputed block (checkpointing or reversible, transient)",
    "backward temporaries (transient)",
    "loss buffers (transient)",
}


def step_components(step: StepBytes, where: str, trained: str = "") -> list[Component]:
    parts = [
        Component("gradients (fp32)", step.grads, where),
        Component("optimizer step temporaries (transient)", step.step_work, where),
        Component("saved activations", step.saved, where),
        Component(
            "recomputed block (checkpointing or reversible, transient)", step.recompute, where
        ),
        Component("backward temporaries (transient)", step.backward_work, where),
        Component("loss buffers (transient)", step.loss, where),
    ]
    return [c for c in parts if c.bytes]


def phases(step: StepBytes) -> dict[str, int]:
    return {
        "forward_backward": step.forward_backward + step.grads_in_backward,
        "optimizer_step": step.grads + step.step_work,
        "activations_without_checkpointing": step.saved_without_checkpointing,
        "loss_unchunked": step.loss_unchunked,
    }


def disk_components(
    trunk: TrunkShape, expert: ExpertSpec | None, dense_params: int = 0
) -> list[Component]:
    parts = [Component("trunk file", trunk_bytes(trunk, trunk.stored_dtype), "disk")]
    if expert is not None:
        parts.append(
            Component(
                f"expert store ({expert.count} experts, fp32)",
                4 * expert.params * expert.count,
                "disk",
            )
        )
        parts.append(
            Component(
                "job checkpoint (expert, best copy, optimizer)",
                8 * expert.params + 8 * expert.params,
                "disk",
            )
        )
    else:
        size = trunk_bytes(trunk, trunk.stored_dtype) // trunk.params * dense_params
        parts.append(Component("fine-tuned copy (stored dtype)", size, "disk"))
    return parts


def finish(
    *,
    name: str,
    description: str,
    components: list[Component],
    working: dict[str, int],
    flops: float,
    tokens_per_s: float,
    bound: str,
    implemented: bool,
    note: str,
    phases: dict[str, int],
    processes: int = 1,
) -> Placement:
    """Peaks: the persistent components plus the working set on each device (``working``;
    the working parts are listed too, marked by :data:`WORKING`); host memory counts
    ``processes`` trainer processes (one per GPU) less ``working["shared_host"]`` bytes
    they share."""

    def persistent(where: str) -> int:
        return sum(c.bytes for c in components if c.where == where and c.name not in WORKING)

    host = persistent("host") + working.get("host", 0)
    gpu = persistent("gpu") + working.get("gpu", 0)
    disk = sum(c.bytes for c in components if c.where == "disk")
    return Placement(
        name=name,
        description=description,
        components=components,
        peak_host_bytes=host * processes - working.get("shared_host", 0) * (processes - 1),
        peak_gpu_bytes=gpu,
        disk_bytes=disk,
        flops_per_token=flops,
        tokens_per_s=tokens_per_s,
        bound=bound,
        implemented=implemented,
        note=note,
        phases=phases,
    )
