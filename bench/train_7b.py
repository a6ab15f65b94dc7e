"""Benchmark: an expert trained on a Llama-7B-shaped trunk streamed from disk, on the CPU.

Writes (once; reused when complete) a randomly initialised Llama-7B-shaped trunk as bf16
safetensors (6.74e9 parameters, 13.5 GB; :func:`experts.random_trunk.write_random_llama`)
to ``--trunk-dir`` (default ``$WORX_7B_DIR`` or ``/tmp/worx-7b``, outside the repository),
then trains the trainer's default expert on it for ``--steps`` optimizer steps in a fresh
subprocess, with the recipe's own savers: ``trainer.stream_trunk`` (the trunk opened with
:func:`trainer.mapped_trunk.load_mapped_trunk`, never loaded; each weight copied to fp32 as
its module runs, its pages dropped after), activation checkpointing, 8-bit AdamW and the
chunked loss. The data are the bundled corpus' ``--domain`` documents, tokenised by the
bundled tokenizer (copied into the trunk directory: the trunk loader insists on one).

Prints ONE JSON line: ``trunk_params``, ``steps``, ``seconds_per_step`` (each step's) and
``median_seconds_per_step``, ``losses``, ``peak_rss_gib`` (the child's ``ru_maxrss``,
file-backed pages included), the disk reads (``/proc/self/io`` ``read_bytes``: what the
page cache did not have), and the planner's figures for the same layout
(``planned_peak_gib``: trainer.plan's ``expert_cpu_streamed`` placement) and for a dense
fine-tune on the same machine (``dense_planned_peak_gib``, ``dense_fits``, ``dense_reason``).

Usage::

    python bench/train_7b.py                       # 15-40 minutes on 2 shared cores, 1.6 GiB
    python bench/train_7b.py --lr 1e-2             # the trainer's default LR (too high here)
    python bench/train_7b.py --shape 1b --trunk-dir /tmp/worx-1b   # a 1.2B trunk, minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from experts.random_trunk import LLAMA_7B, LlamaShape  # noqa: E402

SHAPES = {
    "7b": LLAMA_7B,
    "1b": LlamaShape(layers=16, hidden=2048, heads=16, intermediate=5632, vocab=32000),
}
GIB = 2**30


def _proc(file: str, keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/self/{file}").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in keys:
            out[key] = int(value.split()[0])
    return out


def _read_bytes() -> int:
    return _proc("io", ("read_bytes",))["read_bytes"]


# ---- the training run, in its own process ------------------------------------------------


def run_child(spec: dict) -> dict:
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    torch.set_num_threads(spec["threads"])
    import bitsandbytes  # noqa: F401 - imported before the run like everything else

    from trainer.config import TrainerConfig
    from trainer.mapped_trunk import load_mapped_trunk
    from trainer.recipes.expert import ExpertRecipe
    from worx.bundled import domain_texts

    texts = domain_texts(spec["domain"], spec["docs"] + 4)
    started = time.perf_counter()
    reads = _read_bytes()
    trunk = load_mapped_trunk(spec["trunk_dir"])  # the fingerprint reads every weight once
    open_s = time.perf_counter() - started
    open_read = _read_bytes() - reads
    cfg = TrainerConfig(
        max_steps=spec["steps"],
        seq_len=spec["seq_len"],
        micro_batch_size=spec["micro_batch"],
        grad_accum_steps=1,
        warmup_steps=1,
        eval_every=spec["steps"],
        patience=1000,
        max_eval_rows=1,
        status_every=1,
        device="cpu",
        stream_trunk=True,
        stream_read_ahead=spec["read_ahead"],
        progress=True,
    )
    cfg = dataclasses.replace(cfg, lr=spec["lr"])
    cfg.validate()
    step_reads: list[int] = []
    last = [_read_bytes()]

    def on_event(state: str, fields: dict) -> None:
        if state == "step":
            now = _read_bytes()
            step_reads.append(now - last[0])
            last[0] = now
        elif state == "started":
            last[0] = _read_bytes()

    recipe = ExpertRecipe(trunk, cfg, on_event=on_event)
    try:
        recipe.setup(texts[:-4], texts[-4:])
        recipe.train()
        result = recipe.save()
    finally:
        recipe.cleanup()
    summary = result.summary
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    status = _proc("status", ("VmHWM", "RssAnon", "RssFile"))
    return {
        "trunk_params": trunk.num_params(),
        "trunk_dtype": str(trunk.dtype).removeprefix("torch."),
        "expert_config": summary["expert_config"],
        "expert_params": summary["trainable_params"],
        "lr": cfg.lr,
        "steps": summary["steps"],
        "tokens_per_step": spec["micro_batch"] * spec["seq_len"],
        "seconds_per_step": [round(s, 1) for s in recipe.step_times],
        "median_seconds_per_step": round(statistics.median(recipe.step_times), 1),
        "losses": [loss for _, loss in summary["loss_curve"]],
        "heldout_ppl_before": summary["heldout_ppl_before"],
        "heldout_ppl_after": summary["heldout_ppl_after"],
        "peak_rss_gib": round(peak / GIB, 3),
        "vmhwm_gib": round(status["VmHWM"] * 1024 / GIB, 3),
        "rss_anon_gib_end": round(status["RssAnon"] * 1024 / GIB, 3),
        "rss_file_gib_end": round(status["RssFile"] * 1024 / GIB, 3),
        "open_s": round(open_s, 1),
        "open_disk_read_gib": round(open_read / GIB, 2),
        "disk_read_gib_per_step": [round(b / GIB, 2) for b in step_reads],
        "optimizer_state_bytes": summary["optimizer_state_bytes"],
        "savers": summary["savers"],
    }


# ---- the planner's prediction for the same layout ----------------------------------------


def planned(trunk_dir: Path, spec: dict, host_bytes: int, disk_bytes: int) -> dict:
    from trainer.config import TrainerConfig
    from trainer.plan import ExpertSpec, Hardware, RunShape, TrunkShape, plan_training

    trunk = TrunkShape.from_path(trunk_dir)
    expert = ExpertSpec.from_trainer_config(trunk, TrainerConfig())
    run = RunShape.from_trainer_config(
        TrainerConfig(),
        micro_batch=spec["micro_batch"],
        seq_len=spec["seq_len"],
        grad_accum=1,
        mmap_trunk=True,
        trunk_dtype=trunk.stored_dtype,
        stream_layers=spec["planned_layers_held"],
    )
    hardware = Hardware(gpus=0, host_bytes=host_bytes, disk_bytes=disk_bytes)
    plan = plan_training(trunk, expert, run, hardware)
    streamed = {p.name: p for p in plan.expert_candidates}["expert_cpu_streamed"]
    return {
        "planned_peak_gib": round(streamed.peak_host_bytes / GIB, 3),
        "planned_placement": streamed.name,
        "planned_layers_held": spec["planned_layers_held"],
        "planner_expert_choice": plan.expert.name,
        "planned_tokens_per_s": round(streamed.tokens_per_s, 2),
        "dense_planned_peak_gib": round(plan.dense.peak_host_bytes / GIB, 3),
        "dense_placement": plan.dense.name,
        "dense_fits": plan.dense.fits,
        "dense_reason": plan.dense.reason,
        "planner_host_gib": round(host_bytes / GIB, 2),
    }


# ---- the whole benchmark -----------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_dir = os.environ.get("WORX_7B_DIR", "/tmp/worx-7b")
    parser.add_argument("--trunk-dir", default=default_dir, help=f"default {default_dir}")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--read-ahead", type=int, default=2, help="trainer.stream_read_ahead")
    parser.add_argument(
        "--lr",
        type=float,
        default=6.25e-4,
        help="the expert's peak LR (default: trainer.lr 1e-2 x 256/4096, the width ratio to the "
        "bundled trunk it was swept on; docs/trainer.md)",
    )
    parser.add_argument("--domain", default="biomedical")
    parser.add_argument("--seed", type=int, default=0, help="of the trunk's weights")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))), flush=True)
        return 0

    import psutil

    from experts.random_trunk import write_random_llama

    shape = SHAPES[args.shape]
    trunk_dir = Path(args.trunk_dir)
    written = time.perf_counter()
    write_random_llama(trunk_dir, shape, seed=args.seed)
    write_s = time.perf_counter() - written
    rows = args.steps * args.micro_batch
    spec = {
        "trunk_dir": str(trunk_dir),
        "steps": args.steps,
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "threads": args.threads,
        "read_ahead": args.read_ahead,
        "lr": args.lr,
        "domain": args.domain,
        "docs": 40 + rows,  # far more tokens than the steps and the held-out row take
        # one block's float32 copies live in backward: two blocks' worth of bf16 bytes
        "planned_layers_held": 2,
    }
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "MALLOC_MMAP_THRESHOLD_": "65536",  # RSS follows live memory (as bench/plan_check.py)
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    memory = psutil.virtual_memory()
    print(
        f"training on {trunk_dir} ({memory.available / GIB:.1f} GiB available)",
        file=sys.stderr,
        flush=True,
    )
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )  # the child's progress and logs go to this terminal's stderr
    if done.returncode != 0:
        raise SystemExit(f"the training child failed with exit code {done.returncode}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    disk = shutil.disk_usage(trunk_dir)
    out = {
        "trunk_dir": str(trunk_dir),
        "shape": args.shape,
        "trunk_file_gib": round(
            sum(f.stat().st_size for f in trunk_dir.glob("*.safetensors")) / GIB, 2
        ),
        "write_s": round(write_s, 1),
        **measured,
        **planned(trunk_dir, spec, memory.total, disk.free),
        "machine": {
            "cpu_threads": args.threads,
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
            "ram_total_gib": round(memory.total / GIB, 2),
        },
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
