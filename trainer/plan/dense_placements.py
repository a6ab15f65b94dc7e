"""The placements of dense fine-tuning: on the CPU (Adam moments in memory or on disk) and
on GPUs (a replica per GPU, ZeRO-3 sharding, ZeRO-Offload to host memory or NVMe). Terms:
:mod:`trainer.plan.placement`."""

from __future__ import annotations

from trainer.plan.bytes import GPU_CONTEXT_BYTES, StepBytes, dense_step
from trainer.plan.placement import (
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
from trainer.plan.throughput import compute_tokens_per_s, dense_flops_per_token


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
        inputs = Inputs(trunk, run, hw, step, flops, compute)
        return [_cpu(inputs, disk_states=False), _cpu(inputs, disk_states=True)]
    compute = hw.gpus * compute_tokens_per_s(flops, hw.gpu_flops, hw.mfu)
    step = dense_step(trunk, run, act_bytes(run, True, "float32"), on_gpu=True, params=total)
    inputs = Inputs(trunk, run, hw, step, flops, compute)
    out = [_gpu(inputs)]
    if hw.gpus > 1:
        out.append(_zero3(inputs))
    out.append(_offload(inputs, total, nvme=False))
    out.append(_offload(inputs, total, nvme=True))
    return out


def _fine_tuned_copy(inputs: Inputs) -> list[Component]:
    return disk_components(inputs.trunk, None, inputs.step.weights // 4)


def _cpu(inputs: Inputs, disk_states: bool) -> Placement:
    run, hw, step, compute = inputs.run, inputs.hw, inputs.step, inputs.compute
    components = [
        *process_components(),
        Component("weights (fp32, trainable)", step.weights, "host"),
        Component("optimizer state (fp32 Adam)", step.optimizer, "disk" if disk_states else "host"),
    ]
    components += step_components(step, "host", "dense")
    components += _fine_tuned_copy(inputs)
    if disk_states:
        io = 2 * step.optimizer  # read and write the moments once per optimizer step
        rate = min(compute, run.tokens * run.grad_accum * hw.disk_bytes_per_s / io)
        return finish(
            name="dense_cpu_optimizer_on_disk",
            description="weights and gradients in memory, Adam moments on disk",
            components=components,
            working={"host": step.working},
            flops=inputs.flops,
            tokens_per_s=rate,
            bound="disk read/write" if rate < compute else "compute",
            implemented=False,
            note="not in this project (ZeRO-Infinity style)",
            phases=phases(step),
        )
    return finish(
        name="dense_cpu",
        description="every weight, gradient and Adam moment in memory",
        components=components,
        working={"host": step.working},
        flops=inputs.flops,
        tokens_per_s=compute,
        bound="compute",
        implemented=True,
        note="trainer/recipes/dense.py (dense_finetune) on the CPU",
        phases=phases(step),
    )


def _gpu(inputs: Inputs) -> Placement:
    step = inputs.step
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *process_components(),
        Component("weights (fp32, trainable)", step.weights, "gpu"),
        Component("optimizer state (fp32 Adam)", step.optimizer, "gpu"),
    ]
    if step.autocast_copies:
        components.append(
            Component("bf16 weight copies (autocast cache)", step.autocast_copies, "gpu")
        )
    components += step_components(step, "gpu", "dense")
    components += _fine_tuned_copy(inputs)
    return finish(
        name="dense_gpu",
        description="a full replica per GPU (data parallel)",
        components=components,
        working={"gpu": step.working},
        flops=inputs.flops,
        tokens_per_s=inputs.compute,
        bound="compute",
        implemented=True,
        note="trainer/recipes/dense.py on a GPU (bench/train_gpu.py)",
        phases=phases(step),
        processes=inputs.hw.gpus,
    )


def _zero3(inputs: Inputs) -> Placement:
    step, g = inputs.step, inputs.hw.gpus
    per_layer = 4 * inputs.trunk.layer_params
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *process_components(),
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
    components += step_components(sharded, "gpu", "dense (1/g shard)")
    components += _fine_tuned_copy(inputs)
    return finish(
        name="dense_gpu_zero3",
        description=f"weights, gradients and Adam sharded over {g} GPUs (ZeRO-3 / FSDP)",
        components=components,
        working={"gpu": sharded.working},
        flops=inputs.flops,
        tokens_per_s=inputs.compute,
        bound="compute",
        implemented=False,
        note="not in this project's dense baseline (DeepSpeed ZeRO-3, FSDP)",
        phases=phases(sharded),
        processes=g,
    )


def _offload(inputs: Inputs, total: int, nvme: bool) -> Placement:
    run, hw, step, compute = inputs.run, inputs.hw, inputs.step, inputs.compute
    g = hw.gpus
    shard = f" (1/{g} per GPU, ZeRO-3)" if g > 1 else ""
    states_where = "disk" if nvme else "host"
    host_states = step.grads + (0 if nvme else step.weights + step.optimizer)
    gathered = 2 * 2 * inputs.trunk.layer_params if g > 1 else 0
    components = [
        Component("CUDA context (assumed)", GPU_CONTEXT_BYTES, "gpu"),
        *process_components(),
        Component(f"bf16 weights{shard}", 2 * total // g, "gpu"),
        Component(f"bf16 gradients{shard}", 2 * total // g, "gpu"),
        Component("gathered blocks (2, bf16)", gathered, "gpu"),
        Component("fp32 master weights", step.weights, states_where),
        Component("optimizer state (fp32 Adam)", step.optimizer, states_where),
        Component("fp32 gradients on the host", step.grads, "host"),
        Component("saved activations", step.saved, "gpu"),
        Component("loss buffers (transient)", step.loss, "gpu"),
        Component("backward temporaries (transient)", step.backward_work, "gpu"),
    ]
    components = [c for c in components if c.bytes]
    components += _fine_tuned_copy(inputs)
    # the node's processes share one partitioned copy of the host states
    working = {"gpu": step.forward_backward, "shared_host": host_states}
    tokens_per_step = run.tokens * run.grad_accum * g
    # per step: each GPU sends its bf16 gradients and receives its bf16 weights (in
    # parallel); the host steps every parameter; NVMe reads and writes masters and moments
    seconds = (4 * total / g) / hw.pcie_bytes_per_s + total / hw.host_adam_params_per_s
    if nvme:
        seconds += 2 * (step.weights + step.optimizer) / hw.disk_bytes_per_s
    rate = min(compute, tokens_per_step / seconds)
    what = "NVMe (ZeRO-Infinity)" if nvme else "host memory (ZeRO-Offload)"
    return finish(
        name="dense_gpu_offload_nvme" if nvme else "dense_gpu_offload",
        description=f"bf16 weights and gradients on the GPUs{shard}; fp32 masters and Adam "
        f"in {what}; the Adam step runs on the host",
        components=components,
        working=working,
        flops=inputs.flops,
        tokens_per_s=rate,
        bound="host step and copies" if rate < compute else "compute",
        implemented=False,
        note="not in this project's dense baseline (DeepSpeed ZeRO-Offload / Infinity)",
        phases=phases(step),
        processes=g,
    )
