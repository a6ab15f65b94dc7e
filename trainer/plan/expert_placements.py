"""The placements of expert training: on the CPU (trunk resident, memory-mapped or
streamed from its file) and on GPUs (everything on each GPU, optimizer offloaded, or the
trunk streamed from host memory). Terms: :mod:`trainer.plan.placement`."""

from __future__ import annotations

from trainer.plan.bytes import (
    GPU_CONTEXT_BYTES,
    PROCESS_OVERHEAD_BYTES,
    StepBytes,
    expert_step,
    streamed_held_bytes,
    streamed_trunk_bytes,
    trunk_bytes,
)
from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.placement import (
    STREAMED_HELD,
    Component,
    Inputs,
    Placement,
    act_bytes,
    disk_components,
    finish,
    phases,
    process_components,
    step_components,
)
from trainer.plan.run import Hardware, RunShape
from trainer.plan.shapes import TrunkShape
from trainer.plan.throughput import compute_tokens_per_s, expert_flops_per_token


def expert_placements(
    trunk: TrunkShape, expert: ExpertSpec, run: RunShape, hw: Hardware
) -> list[Placement]:
    flops = expert_flops_per_token(trunk, expert, run.seq_len)
    dtype = run.trunk_dtype
    whole = trunk_bytes(trunk, dtype)
    if hw.gpus == 0:
        compute = compute_tokens_per_s(flops, hw.host_flops, hw.mfu)
        step = expert_step(trunk, expert, run, act_bytes(run, False, dtype))
        # a streamed trunk computes in fp32: each tensor is copied up as its module runs
        fp32 = expert_step(trunk, expert, run, 4)
        return [
            _cpu(Inputs(trunk, run, hw, step, flops, compute), expert, whole, stream=False),
            _cpu(Inputs(trunk, run, hw, fp32, flops, compute), expert, whole, stream=True),
        ]
    compute = hw.gpus * compute_tokens_per_s(flops, hw.gpu_flops, hw.mfu)
    step = expert_step(trunk, expert, run, act_bytes(run, True, dtype))
    inputs = Inputs(trunk, run, hw, step, flops, compute)
    out = [_gpu(inputs, expert, whole, offload=False)]
    if run.offload_optimizer:
        out.append(_gpu(inputs, expert, whole, offload=True))
    streamed = streamed_trunk_bytes(trunk, dtype, run.stream_layers)
    out.append(_gpu_streamed(inputs, expert, whole, streamed))
    return out


def _common(expert: ExpertSpec, step: StepBytes, where: str) -> list[Component]:
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


def _grad_fraction(trunk: TrunkShape, expert: ExpertSpec) -> float:
    lowest = expert.grad_layers_from
    return 0.0 if lowest is None else (trunk.layers - lowest) / trunk.layers


def _cpu(inputs: Inputs, expert: ExpertSpec, whole: int, stream: bool) -> Placement:
    trunk, run, hw, step, compute = inputs.trunk, inputs.run, inputs.hw, inputs.step, inputs.compute
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
        extra = []
        if run.mmap_trunk and trunk.stored_dtype != run.trunk_dtype:
            # mmap_trunk_weights maps a copy in the loaded dtype, written once
            extra.append(Component(f"trunk cache file ({run.trunk_dtype})", whole, "disk"))
    components = [*process_components(), trunk_part, *extra, *_common(expert, step, "host")]
    components += step_components(step, "host", "expert")
    components += disk_components(trunk, expert)
    working = step.working
    if stream:  # the held weights live during forward/backward only, not the optimizer step
        working = max(
            step.forward_backward + step.grads_in_backward + held, step.grads + step.step_work
        )
    return finish(
        name=name,
        description=description,
        components=components,
        working={"host": working},
        flops=inputs.flops,
        tokens_per_s=rate,
        bound=bound,
        implemented=True,
        note=note,
        phases=phases(step),
    )


def _gpu(inputs: Inputs, expert: ExpertSpec, whole: int, offload: bool) -> Placement:
    run, step = inputs.run, inputs.step
    context = Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu")
    trunk_part = Component(f"trunk weights ({run.trunk_dtype})", whole, "gpu")
    state_where = "host" if offload else "gpu"
    components = [
        context,
        *process_components(),
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
            for c in step_components(step, "gpu", "expert")
            if not c.name.startswith("optimizer step")
        ]
        components.append(
            Component("optimizer step temporaries (transient)", step.step_work, "host")
        )
        name, what = "expert_gpu_offload", "optimizer state and fp32 masters in host memory"
        note = "trainer/recipes/expert.py, trainer.offload_optimizer (FlatOptimizer host_offload)"
    else:
        working = {"gpu": step.working}
        components += step_components(step, "gpu", "expert")
        name, what = "expert_gpu", "everything on each GPU"
        note = "trainer/recipes/expert.py with trainer.offload_optimizer = false"
    components += disk_components(inputs.trunk, expert)
    return finish(
        name=name,
        description=f"trunk on each GPU, one job per GPU; {what}",
        components=components,
        working=working,
        flops=inputs.flops,
        tokens_per_s=inputs.compute,
        bound="compute",
        implemented=True,
        note=note,
        phases=phases(step),
        processes=inputs.hw.gpus,
    )


def _gpu_streamed(inputs: Inputs, expert: ExpertSpec, whole: int, streamed: int) -> Placement:
    run, hw, step, compute = inputs.run, inputs.hw, inputs.step, inputs.compute
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *process_components(),
        Component(f"trunk weights, pinned ({run.trunk_dtype})", whole, "host"),
        Component(f"trunk blocks held on the GPU ({run.trunk_dtype})", streamed, "gpu"),
        Component("expert weights (fp32)", step.weights, "gpu"),
        Component("optimizer state", step.optimizer, "host"),
        Component("fp32 master weights (flat)", step.weights, "host"),
    ]
    components += [
        c for c in step_components(step, "gpu", "expert") if not c.name.startswith("optimizer step")
    ]
    components.append(Component("optimizer step temporaries (transient)", step.step_work, "host"))
    components += disk_components(inputs.trunk, expert)
    passes = 1 + _grad_fraction(inputs.trunk, expert)
    per_gpu = run.tokens * hw.pcie_bytes_per_s / max(1.0, whole * passes)
    rate = min(compute, hw.gpus * per_gpu)
    working = {
        "gpu": max(step.forward_backward + step.grads_in_backward, 2 * step.grads),
        "host": step.step_work,
        "shared_host": whole,  # one pinned trunk copy shared by the node's processes
    }
    return finish(
        name="expert_gpu_streamed",
        description=f"trunk in host memory, {run.stream_layers} blocks at a time copied to "
        "each GPU (ZeRO-Infinity style); optimizer offloaded",
        components=components,
        working=working,
        flops=inputs.flops,
        tokens_per_s=rate,
        bound="PCIe" if rate < compute else "compute",
        implemented=False,
        note="not in this project: the recipe keeps the trunk on the GPU",
        phases=phases(step),
        processes=hw.gpus,
    )
