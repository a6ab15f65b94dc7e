"""Where each byte lives: the placements of expert training and of dense fine-tuning.

A placement lists its components as ``(name, bytes, where)`` with ``where`` one of
``gpu`` (per GPU), ``host`` (RAM of the node; with ``gpus=0`` the CPU trains, so its
working memory is host memory) and ``disk``. Its peaks are not the sum of the components:
gradients, the optimizer's temporaries and the activations do not all live at once, so a
peak is the persistent parts plus the larger of two phases, the peak of forward/backward
and the optimizer step (:class:`trainer.plan.bytes.StepBytes`).

Placements are listed fastest first; :func:`trainer.plan.plan.plan_training` picks the
first that fits. ``implemented`` says whether this project's recipes run it today.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from trainer.plan.bytes import (
    GPU_CONTEXT_BYTES,
    PROCESS_OVERHEAD_BYTES,
    TRAINING_RUNTIME_BYTES,
    StepBytes,
    dense_step,
    expert_step,
    streamed_held_bytes,
    streamed_trunk_bytes,
    trunk_bytes,
)
from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.run import Hardware, RunShape
from trainer.plan.shapes import TrunkShape, dtype_bytes
from trainer.plan.throughput import (
    compute_tokens_per_s,
    dense_flops_per_token,
    expert_flops_per_token,
)

GIB = 2**30


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


def _process() -> list[Component]:
    """The trainer process itself (one per GPU): measured constants, trainer/plan/bytes.py."""
    return [
        Component("process: python, torch, libraries imported", PROCESS_OVERHEAD_BYTES, "host"),
        Component("training runtime: kernels, threads, tokenizer", TRAINING_RUNTIME_BYTES, "host"),
    ]


def _act_bytes(run: RunShape, on_gpu: bool, dtype: str) -> int:
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


def _step_components(step: StepBytes, where: str, trained: str = "") -> list[Component]:
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


def _phases(step: StepBytes) -> dict[str, int]:
    return {
        "forward_backward": step.forward_backward + step.grads_in_backward,
        "optimizer_step": step.grads + step.step_work,
        "activations_without_checkpointing": step.saved_without_checkpointing,
        "loss_unchunked": step.loss_unchunked,
    }


def _disk(trunk: TrunkShape, expert: ExpertSpec | None, dense_params: int = 0) -> list[Component]:
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


def _finish(
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


# ---- expert training ---------------------------------------------------------------------


def expert_placements(
    trunk: TrunkShape, expert: ExpertSpec, run: RunShape, hw: Hardware
) -> list[Placement]:
    flops = expert_flops_per_token(trunk, expert, run.seq_len)
    dtype = run.trunk_dtype
    whole = trunk_bytes(trunk, dtype)
    if hw.gpus == 0:
        compute = compute_tokens_per_s(flops, hw.host_flops, hw.mfu)
        step = expert_step(trunk, expert, run, _act_bytes(run, False, dtype))
        # a streamed trunk computes in fp32: each tensor is copied up as its module runs
        fp32 = expert_step(trunk, expert, run, 4)
        return [
            _expert_cpu(trunk, expert, run, hw, step, flops, compute, whole, False),
            _expert_cpu(trunk, expert, run, hw, fp32, flops, compute, whole, True),
        ]
    compute = hw.gpus * compute_tokens_per_s(flops, hw.gpu_flops, hw.mfu)
    step = expert_step(trunk, expert, run, _act_bytes(run, True, dtype))
    out = [_expert_gpu(trunk, expert, run, hw, step, flops, compute, whole, offload=False)]
    if run.offload_optimizer:
        out.append(_expert_gpu(trunk, expert, run, hw, step, flops, compute, whole, offload=True))
    streamed = streamed_trunk_bytes(trunk, dtype, run.stream_layers)
    out.append(_expert_gpu_streamed(trunk, expert, run, hw, step, flops, compute, whole, streamed))
    return out


def _expert_common(expert: ExpertSpec, step: StepBytes, where: str) -> list[Component]:
    return [
        Component("expert weights (fp32)", step.weights, where),
        Component(
            f"optimizer state ({'8-bit' if 'bit' in _opt_name(step, expert) else 'fp32'} Adam)",
            step.optimizer,
            where,
        ),
    ]


def _opt_name(step: StepBytes, expert: ExpertSpec) -> str:
    return "adamw8bit" if step.optimizer < 4 * expert.params else "adamw"


def _expert_cpu(trunk, expert, run, hw, step, flops, compute, whole, stream):
    if stream:
        name = "expert_cpu_streamed"
        description = (
            "trunk streamed from its file: each module's weights copied to fp32 as it runs, "
            "their pages dropped after (the next blocks read ahead into the page cache); "
            "expert and optimizer in memory"
        )
        # trainer.stream_trunk holds no trunk bytes between modules: while one runs, its
        # weights' fp32 copies and one tensor's file pages (measured: bench/train_7b.py)
        held = streamed_held_bytes(trunk, run.trunk_dtype)
        trunk_part = Component(STREAMED_HELD, held, "host")
        extra = []
        passes = 1 + _grad_fraction(trunk, expert)
        io_bytes = whole * passes  # every weight read once per pass through its module
        free = hw.host_bytes - PROCESS_OVERHEAD_BYTES - held - step.working
        if free >= whole:
            bound_rate, bound = compute, "compute (the trunk file fits in the page cache)"
        else:
            bound_rate = run.tokens * hw.disk_bytes_per_s / max(1, io_bytes)
            bound = "disk read" if bound_rate < compute else "compute"
        rate = min(compute, bound_rate)
        note = "trainer.stream_trunk (trainer/stream_trunk.py; bench/train_7b.py)"
        implemented = True
    else:
        name = "expert_cpu_mmap" if run.mmap_trunk else "expert_cpu_resident"
        where = (
            "memory-mapped: file pages count in RSS once touched"
            if run.mmap_trunk
            else ("copied into process memory")
        )
        description = f"whole trunk in memory ({where}); expert and optimizer in memory"
        trunk_part = Component(f"trunk weights ({run.trunk_dtype})", whole, "host")
        rate, bound = compute, "compute"
        note = "trainer/recipes/expert.py on the CPU (trainer.mmap_trunk)"
        implemented = True
        extra = []
        if run.mmap_trunk and trunk.stored_dtype != run.trunk_dtype:
            # mmap_trunk_weights maps a copy in the loaded dtype, written once
            extra.append(Component(f"trunk cache file ({run.trunk_dtype})", whole, "disk"))
    components = [*_process(), trunk_part, *extra, *_expert_common(expert, step, "host")]
    components += _step_components(step, "host", "expert")
    components += _disk(trunk, expert)
    working = step.working
    if stream:  # the held weights live during forward/backward only, not the optimizer step
        working = max(
            step.forward_backward + step.grads_in_backward + held, step.grads + step.step_work
        )
    return _finish(
        name,
        description,
        components,
        {"host": working},
        flops,
        rate,
        bound,
        implemented,
        note,
        _phases(step),
    )


def _grad_fraction(trunk: TrunkShape, expert: ExpertSpec) -> float:
    lowest = expert.grad_layers_from
    return 0.0 if lowest is None else (trunk.layers - lowest) / trunk.layers


def _expert_gpu(trunk, expert, run, hw, step, flops, compute, whole, offload):
    context = Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu")
    trunk_part = Component(f"trunk weights ({run.trunk_dtype})", whole, "gpu")
    state_where = "host" if offload else "gpu"
    components = [
        context,
        *_process(),
        trunk_part,
        Component("expert weights (fp32)", step.weights, "gpu"),
    ]
    opt = "8-bit" if run.optimizer == "adamw8bit" else "fp32"
    components.append(Component(f"optimizer state ({opt} Adam)", step.optimizer, state_where))
    if offload:
        components.append(Component("fp32 master weights (flat)", step.weights, "host"))
        gpu_working = max(step.forward_backward + step.grads_in_backward, 2 * step.grads)
        host_working = step.step_work  # the flat gradient and the step's temporaries
        working = {"gpu": gpu_working, "host": host_working}
        components += [
            c
            for c in _step_components(step, "gpu", "expert")
            if not c.name.startswith("optimizer step")
        ]
        components.append(
            Component("optimizer step temporaries (transient)", step.step_work, "host")
        )
        name, what = "expert_gpu_offload", "optimizer state and fp32 masters in host memory"
        note = "trainer/recipes/expert.py, trainer.offload_optimizer (FlatOptimizer host_offload)"
    else:
        working = {"gpu": step.working}
        components += _step_components(step, "gpu", "expert")
        name, what = "expert_gpu", "everything on each GPU"
        note = "trainer/recipes/expert.py with trainer.offload_optimizer = false"
    components += _disk(trunk, expert)
    description = f"trunk on each GPU, one job per GPU; {what}"
    return _finish(
        name,
        description,
        components,
        working,
        flops,
        compute,
        "compute",
        True,
        note,
        _phases(step),
        processes=hw.gpus,
    )


def _expert_gpu_streamed(trunk, expert, run, hw, step, flops, compute, whole, streamed):
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *_process(),
        Component(f"trunk weights, pinned ({run.trunk_dtype})", whole, "host"),
        Component(f"trunk blocks held on the GPU ({run.trunk_dtype})", streamed, "gpu"),
        Component("expert weights (fp32)", step.weights, "gpu"),
        Component("optimizer state", step.optimizer, "host"),
        Component("fp32 master weights (flat)", step.weights, "host"),
    ]
    components += [
        c
        for c in _step_components(step, "gpu", "expert")
        if not c.name.startswith("optimizer step")
    ]
    components.append(Component("optimizer step temporaries (transient)", step.step_work, "host"))
    components += _disk(trunk, expert)
    passes = 1 + _grad_fraction(trunk, expert)
    per_gpu = run.tokens * hw.pcie_bytes_per_s / max(1.0, whole * passes)
    rate = min(compute, hw.gpus * per_gpu)
    working = {
        "gpu": max(step.forward_backward + step.grads_in_backward, 2 * step.grads),
        "host": step.step_work,
        "shared_host": whole,  # one pinned trunk copy shared by the node's processes
    }
    return _finish(
        "expert_gpu_streamed",
        f"trunk in host memory, {run.stream_layers} blocks at a time copied to each GPU "
        "(ZeRO-Infinity style); optimizer offloaded",
        components,
        working,
        flops,
        rate,
        "PCIe" if rate < compute else "compute",
        False,
        "not in this project: the recipe keeps the trunk on the GPU",
        _phases(step),
        processes=hw.gpus,
    )


# ---- dense fine-tuning -------------------------------------------------------------------


def dense_placements(
    trunk: TrunkShape,
    run: RunShape,
    hw: Hardware,
    extra_params: int = 0,
    active_params: int = 0,
) -> list[Placement]:
    """``extra_params``: weights fine-tuned beside the trunk (a whole mixture's experts), of
    which ``active_params`` compute for each token (top-k experts)."""
    total = trunk.params + extra_params
    flops = dense_flops_per_token(trunk, run.seq_len, active_params)
    if hw.gpus == 0:
        compute = compute_tokens_per_s(flops, hw.host_flops, hw.mfu)
        step = dense_step(trunk, run, 4, on_gpu=False, params=total)
        return [
            _dense_cpu(trunk, run, hw, step, flops, compute, disk_states=False),
            _dense_cpu(trunk, run, hw, step, flops, compute, disk_states=True),
        ]
    compute = hw.gpus * compute_tokens_per_s(flops, hw.gpu_flops, hw.mfu)
    step = dense_step(trunk, run, _act_bytes(run, True, "float32"), on_gpu=True, params=total)
    out = [_dense_gpu(trunk, run, hw, step, flops, compute, total)]
    if hw.gpus > 1:
        out.append(_dense_zero3(trunk, run, hw, step, flops, compute, total))
    out.append(_dense_offload(trunk, run, hw, step, flops, compute, total, nvme=False))
    out.append(_dense_offload(trunk, run, hw, step, flops, compute, total, nvme=True))
    return out


def _dense_cpu(trunk, run, hw, step, flops, compute, disk_states):
    components = [
        *_process(),
        Component("weights (fp32, trainable)", step.weights, "host"),
        Component("optimizer state (fp32 Adam)", step.optimizer, "disk" if disk_states else "host"),
    ]
    components += _step_components(step, "host", "dense")
    components += _disk(trunk, None, step.weights // 4)
    if disk_states:
        io = 2 * step.optimizer  # read and write the moments once per optimizer step
        rate = min(compute, run.tokens * run.grad_accum * hw.disk_bytes_per_s / io)
        return _finish(
            "dense_cpu_optimizer_on_disk",
            "weights and gradients in memory, Adam moments on disk",
            components,
            {"host": step.working},
            flops,
            rate,
            "disk read/write" if rate < compute else "compute",
            False,
            "not in this project (ZeRO-Infinity style)",
            _phases(step),
        )
    return _finish(
        "dense_cpu",
        "every weight, gradient and Adam moment in memory",
        components,
        {"host": step.working},
        flops,
        compute,
        "compute",
        True,
        "trainer/recipes/dense.py (dense_finetune) on the CPU",
        _phases(step),
    )


def _dense_gpu(trunk, run, hw, step, flops, compute, total):
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *_process(),
        Component("weights (fp32, trainable)", step.weights, "gpu"),
        Component("optimizer state (fp32 Adam)", step.optimizer, "gpu"),
    ]
    if step.autocast_copies:
        components.append(
            Component("bf16 weight copies (autocast cache)", step.autocast_copies, "gpu")
        )
    components += _step_components(step, "gpu", "dense")
    components += _disk(trunk, None, step.weights // 4)
    return _finish(
        "dense_gpu",
        "a full replica per GPU (data parallel)",
        components,
        {"gpu": step.working},
        flops,
        compute,
        "compute",
        True,
        "trainer/recipes/dense.py on a GPU (bench/train_gpu.py)",
        _phases(step),
        processes=hw.gpus,
    )


def _dense_zero3(trunk, run, hw, step, flops, compute, total):
    g = hw.gpus
    per_layer = 4 * trunk.layer_params
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *_process(),
        Component(f"weights shard (fp32, 1/{g})", step.weights // g, "gpu"),
        Component(f"optimizer state shard (fp32 Adam, 1/{g})", step.optimizer // g, "gpu"),
        Component("gathered blocks (2, bf16 and fp32 in flight)", 2 * per_layer, "gpu"),
    ]
    sharded = StepBytes(
        **{
            **step.__dict__,
            "grads": step.grads // g,
            "step_work": step.step_work // g,
            "autocast_copies": 0,
        }
    )
    components += _step_components(sharded, "gpu", "dense (1/g shard)")
    components += _disk(trunk, None, step.weights // 4)
    return _finish(
        "dense_gpu_zero3",
        f"weights, gradients and Adam sharded over {g} GPUs (ZeRO-3 / FSDP)",
        components,
        {"gpu": sharded.working},
        flops,
        compute,
        "compute",
        False,
        "not in this project's dense baseline (DeepSpeed ZeRO-3, FSDP)",
        _phases(sharded),
        processes=g,
    )


def _dense_offload(trunk, run, hw, step, flops, compute, total, nvme):
    g = hw.gpus
    shard = f" (1/{g} per GPU, ZeRO-3)" if g > 1 else ""
    states_where = "disk" if nvme else "host"
    host_states = step.grads + (0 if nvme else step.weights + step.optimizer)
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *_process(),
        Component(f"bf16 weights{shard}", 2 * total // g, "gpu"),
        Component(f"bf16 gradients{shard}", 2 * total // g, "gpu"),
        Component("gathered blocks (2, bf16)", 2 * 2 * trunk.layer_params if g > 1 else 0, "gpu"),
        Component("fp32 master weights", step.weights, states_where),
        Component("optimizer state (fp32 Adam)", step.optimizer, states_where),
        Component("fp32 gradients on the host", step.grads, "host"),
        Component("saved activations", step.saved, "gpu"),
        Component("loss buffers (transient)", step.loss, "gpu"),
        Component("backward temporaries (transient)", step.backward_work, "gpu"),
    ]
    components = [c for c in components if c.bytes]
    components += _disk(trunk, None, step.weights // 4)
    # the node's processes share one partitioned copy of the host states
    working = {"gpu": step.forward_backward, "shared_host": host_states}
    tokens_per_step = run.tokens * run.grad_accum * g
    # per step: each GPU sends its bf16 gradients and receives its bf16 weights (in
    # parallel); the host steps every parameter; NVMe reads and writes masters and moments
    seconds = (4 * total / g) / hw.pcie_bytes_per_s + total / hw.host_adam_params_per_s
    if nvme:
        seconds += 2 * (step.weights + step.optimizer) / hw.disk_bytes_per_s
    rate = min(compute, tokens_per_step / seconds)
    name = "dense_gpu_offload_nvme" if nvme else "dense_gpu_offload"
    what = "NVMe (ZeRO-Infinity)" if nvme else "host memory (ZeRO-Offload)"
    return _finish(
        name,
        f"bf16 weights and gradients on the GPUs{shard}; fp32 masters and Adam in {what}; "
        "the Adam step runs on the host",
        components,
        working,
        flops,
        rate,
        "host step and copies" if rate < compute else "compute",
        False,
        "not in this project's dense baseline (DeepSpeed ZeRO-Offload / Infinity)",
        _phases(step),
        processes=g,
    )
