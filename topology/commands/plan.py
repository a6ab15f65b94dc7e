"""`worx plan`: will a trunk fit, where does each byte live, how fast will a job run?"""

from __future__ import annotations

import argparse
import sys

_SHAPES = "llama-7b, llama-13b, gpt2, gpt2-xl, bundled"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="size a training job: bytes per component, placement, fits or not, tokens/s",
        description="Plan expert training and dense fine-tuning side by side for a trunk "
        "(a model directory, a config.json or a named shape: " + _SHAPES + "), an expert "
        "(kind and size, as the trainer builds it), the training shape and savers, and the "
        "hardware. Prints bytes per component, where each lives in the first placement that "
        "fits, whether it fits and why not, and tokens/s from FLOPs at --mfu. "
        "docs/trainer.md, 'Sizing: worx plan'.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--trunk", default="bundled", help="model dir, config.json or name")
    parser.add_argument(
        "--reversible",
        action="store_true",
        help="plan the trunk's reversible variant (GPT-2 layout; a worx_reversible "
        "directory is one already): dense activations held flat in depth",
    )
    parser.add_argument(
        "--expert-kind",
        default=None,
        help="adapter, vocab or vocab_adapter (default: the trainer's)",
    )
    parser.add_argument(
        "--expert-size",
        default=None,
        help="expert parameters, e.g. 150M (the rank is chosen to match)",
    )
    parser.add_argument("--rank", default=None, help="adapter rank (instead of --expert-size)")
    parser.add_argument(
        "--experts",
        default="1",
        help="experts the mixture holds (stored; dense fine-tunes them all)",
    )
    parser.add_argument("--top-k", default="1", help="experts active per token (dense FLOPs)")
    parser.add_argument("--micro-batch", default="8", help="rows per forward/backward")
    parser.add_argument("--seq-len", default="128", help="tokens per row")
    parser.add_argument("--grad-accum", default="4", help="micro-batches per optimizer step")
    parser.add_argument("--optimizer", default="adamw8bit", help="adamw8bit or adamw")
    parser.add_argument(
        "--trunk-dtype",
        default="auto",
        help="float32, bfloat16, float16 (auto: bfloat16 on GPUs, else float32)",
    )
    parser.add_argument(
        "--stream-layers", default="2", help="blocks held on a GPU when the trunk streams to it"
    )
    parser.add_argument("--no-act-ckpt", action="store_true", help="no activation checkpointing")
    parser.add_argument("--no-chunked-loss", action="store_true", help="full logits")
    parser.add_argument("--no-fused-mlp", action="store_true", help="no fused frozen MLP")
    parser.add_argument("--no-mmap", action="store_true", help="copy the trunk into memory")
    parser.add_argument("--no-offload", action="store_true", help="no optimizer offload")
    parser.add_argument("--gpus", default="0", help="GPUs on the node (0: the CPU trains)")
    parser.add_argument("--gpu-mem", default="80GiB", help="memory of each GPU")
    parser.add_argument("--host-mem", default=None, help="host RAM (default: this machine's)")
    parser.add_argument("--disk", default=None, help="free disk (default: free here)")
    parser.add_argument("--mfu", default="0.4", help="model FLOP utilisation assumed")
    parser.add_argument("--gpu-tflops", default="989", help="peak bf16 TFLOP/s per GPU")
    parser.add_argument("--host-tflops", default="0.2", help="peak TFLOP/s of the host CPU")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.set_defaults(func=run)


class _BadArgument(ValueError):
    pass


def _int(args: argparse.Namespace, name: str, low: int) -> int:
    text = getattr(args, name)
    try:
        value = int(text)
    except ValueError:
        raise _BadArgument(f"--{name.replace('_', '-')} {text!r} is not a whole number") from None
    if value < low:
        raise _BadArgument(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    return value


def _float(args: argparse.Namespace, name: str) -> float:
    text = getattr(args, name)
    try:
        value = float(text)
    except ValueError:
        raise _BadArgument(f"--{name.replace('_', '-')} {text!r} is not a number") from None
    if not value > 0:
        raise _BadArgument(f"--{name.replace('_', '-')} must be > 0, got {value}")
    return value


def _size(text: str | None, flag: str, default: int) -> int:
    from trainer.plan import parse_bytes

    if text is None:
        return default
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise _BadArgument(f"{flag}: {exc}") from None


def build(args: argparse.Namespace):
    """The plan the arguments ask for (raises _BadArgument with a one-line reason)."""
    import dataclasses
    import shutil

    import psutil

    from experts.shape import KINDS
    from trainer.config import TrainerConfig
    from trainer.plan import (
        ExpertSpec,
        Hardware,
        RunShape,
        ShapeError,
        TrunkShape,
        parse_count,
        plan_training,
    )

    try:
        trunk = TrunkShape.resolve(args.trunk)
        if args.reversible:
            trunk = dataclasses.replace(trunk, reversible=True)
    except ShapeError as exc:
        raise _BadArgument(f"--trunk: {exc}") from None
    gpus = _int(args, "gpus", 0)
    count, top_k = _int(args, "experts", 1), _int(args, "top_k", 1)
    if top_k > count:
        raise _BadArgument(f"--top-k {top_k} is more than --experts {count}")
    config = TrainerConfig()
    kind = args.expert_kind or config.expert.kind
    if kind not in KINDS:
        raise _BadArgument(f"--expert-kind {kind!r}: use one of {', '.join(KINDS)}")
    if args.expert_size is not None and args.rank is not None:
        raise _BadArgument("give --expert-size or --rank, not both")
    try:
        if args.expert_size is not None:
            size = parse_count(args.expert_size)
            expert = ExpertSpec.sized(trunk, kind, size, config, count=count)
        else:
            ranks = {}  # --expert-kind and --rank: [trainer.expert] kind and rank
            if args.rank is not None:
                rank = _int(args, "rank", 1)
                ranks = (
                    {"output_rank": rank, "token_rank": rank} if kind == "vocab" else {"rank": rank}
                )
            shape = dataclasses.replace(config.expert, kind=kind, **ranks)
            config = dataclasses.replace(config, expert=shape)
            expert = ExpertSpec.from_trainer_config(trunk, config, count=count)
    except ValueError as exc:
        raise _BadArgument(f"expert: {exc}") from None
    dtype = args.trunk_dtype
    if dtype == "auto":
        dtype = "bfloat16" if gpus else "float32"
    try:
        run = RunShape(
            micro_batch=_int(args, "micro_batch", 1),
            seq_len=_int(args, "seq_len", 2),
            grad_accum=_int(args, "grad_accum", 1),
            optimizer=args.optimizer,
            activation_checkpointing=not args.no_act_ckpt,
            chunked_loss=not args.no_chunked_loss,
            fused_frozen_mlp=not args.no_fused_mlp,
            mmap_trunk=not args.no_mmap,
            offload_optimizer=not args.no_offload,
            trunk_dtype=dtype,
            stream_layers=_int(args, "stream_layers", 1),
        )
        hardware = Hardware(
            gpus=gpus,
            gpu_bytes=_size(args.gpu_mem, "--gpu-mem", 0),
            host_bytes=_size(args.host_mem, "--host-mem", psutil.virtual_memory().total),
            disk_bytes=_size(args.disk, "--disk", shutil.disk_usage(".").free),
            gpu_flops=_float(args, "gpu_tflops") * 1e12,
            host_flops=_float(args, "host_tflops") * 1e12,
            mfu=_float(args, "mfu"),
        )
    except ValueError as exc:
        raise _BadArgument(str(exc)) from None
    return plan_training(trunk, expert, run, hardware, active_experts=top_k)


def run(args: argparse.Namespace) -> int:
    try:
        plan = build(args)
    except _BadArgument as exc:
        print(f"worx plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(plan.to_json())
    else:
        _print_tables(plan)
    return 0


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**27 else f"{n / 2**20:,.1f} MiB"


def _rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:,.0f}" if tokens_per_s >= 10 else f"{tokens_per_s:.2g}"


def _print_tables(plan) -> None:
    from rich.columns import Columns
    from rich.console import Console
    from rich.table import Table

    console = Console()
    trunk, hw = plan.trunk, plan.hardware
    where = f"{hw.gpus} GPU(s) of {_gib(hw.gpu_bytes)}" if hw.gpus else "the CPU (no GPU)"
    console.print(
        f"[bold]{trunk.name or 'trunk'}[/]: {trunk.family}, {trunk.params / 1e9:.3f}B params, "
        f"{trunk.layers} layers x {trunk.hidden}; expert {plan.expert_spec.config.kind} "
        f"{plan.expert_spec.params / 1e6:.1f}M params (x{plan.expert_spec.count} in the "
        f"mixture); micro-batch {plan.run.micro_batch} x {plan.run.seq_len} tokens; on {where}, "
        f"host {_gib(hw.host_bytes)}, disk {_gib(hw.disk_bytes)}"
    )
    tables = []
    for title, placement in (("expert training", plan.expert), ("dense fine-tuning", plan.dense)):
        table = Table(title=f"{title}: {placement.name}", title_justify="left")
        table.add_column("component")
        table.add_column("bytes", justify="right")
        table.add_column("where")
        for component in placement.components:
            table.add_row(component.name, _gib(component.bytes), component.where)
        table.add_section()
        if hw.gpus:
            table.add_row("[bold]peak per GPU[/]", _gib(placement.peak_gpu_bytes), "gpu")
        table.add_row("[bold]peak host[/]", _gib(placement.peak_host_bytes), "host")
        table.add_row("[bold]disk[/]", _gib(placement.disk_bytes), "disk")
        verdict = (
            "[green]fits[/]" if placement.fits else f"[red]does not fit[/]: {placement.reason}"
        )
        table.caption = (
            f"{verdict}. {placement.description}. "
            f"{_rate(placement.tokens_per_s)} tokens/s at MFU {hw.mfu:g} ({placement.bound}). "
            f"{'Runs in this project' if placement.implemented else 'Not in this project'}: "
            f"{placement.note}."
        )
        table.caption_justify = "left"
        tables.append(table)
    console.print(Columns(tables))
    console.print(plan.summary)
    console.print(
        "Peaks are the persistent parts plus the larger phase (forward/backward or the "
        "optimizer step), not the sum of the rows; --json lists every placement considered."
    )
