"""Benchmark: the planner (``worx plan``, trainer/plan/) against measured peak memory.

Randomly initialised Llama-shaped trunks of about 5M, 50M and 300M parameters are written
as safetensors (float32) with a BPE tokenizer; on each, a few optimizer steps of the
project's expert recipe (``train_expert`` with ``TrainerConfig()``'s expert and savers) and
of the dense fine-tune (``dense_finetune``) run on the CPU, each in a fresh subprocess
(``MALLOC_MMAP_THRESHOLD_=65536`` so RSS follows live memory, ``OMP_WAIT_POLICY=PASSIVE``,
as bench/train.py). Peak memory is the child's ``ru_maxrss`` (the memory-mapped trunk's
file pages count once touched). The prediction is ``plan_training``'s placement for the
same run on a CPU-only machine: ``expert_cpu_mmap`` and ``dense_cpu``.

Prints ONE JSON line: per run predicted and measured peak (whole process, and net of the
process after imports), their relative errors, ``max_abs_rel_error_peak_memory`` (target
<= 0.15), the measured and predicted time per token, and per size
``expert_over_dense_time_per_token`` and ``expert_over_dense_peak_rss`` (net peaks, as
bench/train.py; ``..._total`` with the interpreter).

Usage::

    python bench/plan_check.py                    # 5M, 50M, 300M: ~10 minutes on 2 cores
    python bench/plan_check.py --sizes 5m,50m     # quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Llama layouts (build_tiny_trunk: MLP width 8/3 d, untied unembedding, vocab 8192)
SIZES = {
    "5m": {"layers": 4, "width": 256, "heads": 4},  # 6.3M
    "50m": {"layers": 12, "width": 512, "heads": 8},  # 46M
    "300m": {"layers": 24, "width": 1024, "heads": 16},  # 319M
}
VOCAB = 8192


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


# ---- one run, in its own process ---------------------------------------------------------


def run_one(kind: str, spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    # what trainer.plan.bytes.PROCESS_OVERHEAD_BYTES was measured with
    import bitsandbytes  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoTokenizer  # noqa: F401
    from transformers.models.gpt2 import modeling_gpt2  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    import experts.trunk  # noqa: F401
    from trainer.config import TrainerConfig
    from trainer.recipes.dense import DenseConfig, dense_finetune, load_trainable
    from trainer.recipes.expert import train_expert

    baseline = _status()["VmHWM"]
    texts, steps = spec["train"], spec["steps"]
    if kind == "expert":
        from experts.trunk import load_trunk

        trunk = load_trunk(spec["trunk"])
        cfg = TrainerConfig(
            max_steps=steps,
            seq_len=spec["seq_len"],
            micro_batch_size=spec["micro_batch"],
            grad_accum_steps=1,
            warmup_steps=1,
            eval_every=steps,
            patience=1000,
            max_eval_rows=spec["micro_batch"],
            start_candidates=0,
            device="cpu",
            progress=False,
        )
        result = train_expert(trunk, texts, spec["heldout"], cfg)
        summary = result.summary
        tokens, step_s = summary["tokens_seen"], summary["median_step_s"]
        cpu_s = summary["cpu_s"]
        losses = [loss for _, loss in summary["loss_curve"]]
        trainable = summary["trainable_params"]
    else:
        model, tokenizer = load_trainable(spec["trunk"])
        cfg = DenseConfig(
            steps=steps,
            seq_len=spec["seq_len"],
            micro_batch_size=spec["micro_batch"],
            grad_accum_steps=1,
            lr=1e-4,
            warmup_steps=1,
            progress=False,
        )
        result = dense_finetune(model, tokenizer, texts, cfg)
        tokens, step_s = result.tokens, statistics.median(result.step_times)
        cpu_s = result.cpu_s
        losses, trainable = result.losses, result.trainable_params
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {
        "peak_bytes": peak,
        "baseline_bytes": baseline,
        "tokens": tokens,
        "steps": steps,
        "median_step_s": step_s,
        "time_per_token_us": round(1e6 * step_s * steps / tokens, 2),
        "cpu_time_per_token_us": round(1e6 * cpu_s / tokens, 2),
        "trainable_params": trainable,
        "losses": [round(x, 4) if math.isfinite(x) else None for x in losses],  # strict JSON
    }


# ---- the comparison ----------------------------------------------------------------------


def predict(trunk_dir: str, spec: dict) -> dict[str, object]:
    from trainer.config import TrainerConfig
    from trainer.plan import ExpertSpec, Hardware, RunShape, TrunkShape, plan_training

    trunk = TrunkShape.from_path(trunk_dir)
    config = TrainerConfig()
    expert = ExpertSpec.from_trainer_config(trunk, config)
    run = RunShape.from_trainer_config(
        config, micro_batch=spec["micro_batch"], seq_len=spec["seq_len"], grad_accum=1
    )
    plan = plan_training(trunk, expert, run, Hardware(gpus=0, host_bytes=2**40))
    by_name = {p.name: p for p in plan.expert_candidates + plan.dense_candidates}
    return {
        "trunk_params": trunk.params,
        "expert_params": expert.params,
        "expert": by_name["expert_cpu_mmap"],
        "dense": by_name["dense_cpu"],
        "mfu": plan.hardware.mfu,
        "host_flops": plan.hardware.host_flops,
    }


def _child(args: list[str], threads: int) -> str:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd=REPO
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"bench child {args[:2]} failed with exit code {done.returncode}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=",".join(SIZES), help="subset of " + ",".join(SIZES))
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per run")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        spec = json.loads(Path(args.spec).read_text())
        print(json.dumps(run_one(args.run_one, spec)), flush=True)
        return 0
    if args.build:
        from experts.testing import build_tiny_trunk

        shape = SIZES[args.build[1]]
        build_tiny_trunk(args.build[0], family="llama", vocab_size=VOCAB, **shape)
        return 0
    sizes = args.sizes.split(",")
    for size in sizes:
        if size not in SIZES:
            parser.error(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    if args.steps < 2 or args.micro_batch < 1 or args.seq_len < 8:
        parser.error("--steps must be >= 2, --micro-batch >= 1 and --seq-len >= 8")

    from tqdm import tqdm

    from worx.bundled import domain_texts

    started = time.perf_counter()
    tokens_needed = (args.steps + 2) * args.micro_batch * args.seq_len
    train = domain_texts("biomedical", max(40, tokens_needed // 100))
    heldout = domain_texts("biomedical", 8, skip=len(train))
    runs: dict[str, dict] = {}
    ratios: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="worx-bench-plan-") as tmp:
        bar = tqdm(total=3 * len(sizes), desc="plan_check", unit="job", file=sys.stderr)
        for size in sizes:
            trunk_dir = str(Path(tmp) / size)
            bar.set_postfix_str(f"{size}: building the trunk")
            _child(["--build", trunk_dir, size], args.threads)
            bar.update()
            spec = {
                "trunk": trunk_dir,
                "steps": args.steps,
                "micro_batch": args.micro_batch,
                "seq_len": args.seq_len,
                "threads": args.threads,
                "train": train,
                "heldout": heldout,
            }
            spec_file = Path(tmp) / f"spec-{size}.json"
            spec_file.write_text(json.dumps(spec))
            planned = predict(trunk_dir, spec)
            for kind in ("expert", "dense"):
                bar.set_postfix_str(f"{size}: {kind}")
                measured = json.loads(
                    _child(["--run-one", kind, "--spec", str(spec_file)], args.threads)
                )
                placement = planned[kind]
                predicted = placement.peak_host_bytes
                net_pred = predicted - _overhead()
                net_meas = measured["peak_bytes"] - measured["baseline_bytes"]
                runs[f"{kind}_{size}"] = {
                    "trunk_params": planned["trunk_params"],
                    "trainable_params": measured["trainable_params"],
                    "placement": placement.name,
                    "predicted_peak_mib": round(predicted / 2**20, 1),
                    "measured_peak_mib": round(measured["peak_bytes"] / 2**20, 1),
                    "rel_error_peak": round(
                        (predicted - measured["peak_bytes"]) / measured["peak_bytes"], 4
                    ),
                    "predicted_net_peak_mib": round(net_pred / 2**20, 1),
                    "measured_net_peak_mib": round(net_meas / 2**20, 1),
                    "rel_error_net_peak": round((net_pred - net_meas) / net_meas, 4),
                    "measured_baseline_mib": round(measured["baseline_bytes"] / 2**20, 1),
                    "time_per_token_us": measured["time_per_token_us"],
                    "cpu_time_per_token_us": measured["cpu_time_per_token_us"],
                    "predicted_time_per_token_us": round(1e6 / placement.tokens_per_s, 2),
                    # model FLOP/s achieved over the planner's host peak (Hardware.host_flops)
                    "measured_mfu": round(
                        placement.flops_per_token
                        * 1e6
                        / measured["time_per_token_us"]
                        / planned["host_flops"],
                        4,
                    ),
                    "tokens": measured["tokens"],
                    "losses": measured["losses"],
                }
                bar.update()
            expert, dense = runs[f"expert_{size}"], runs[f"dense_{size}"]
            ratios[size] = {
                "trunk_params": planned["trunk_params"],
                "expert_over_dense_time_per_token": _ratio(
                    expert["time_per_token_us"], dense["time_per_token_us"]
                ),
                "expert_over_dense_cpu_time_per_token": _ratio(
                    expert["cpu_time_per_token_us"], dense["cpu_time_per_token_us"]
                ),
                "expert_over_dense_peak_rss": _ratio(
                    expert["measured_net_peak_mib"], dense["measured_net_peak_mib"]
                ),
                "expert_over_dense_peak_rss_total": _ratio(
                    expert["measured_peak_mib"], dense["measured_peak_mib"]
                ),
                "predicted_expert_over_dense_peak_total": _ratio(
                    expert["predicted_peak_mib"], dense["predicted_peak_mib"]
                ),
            }
        bar.close()
    errors = [abs(r["rel_error_peak"]) for r in runs.values()]
    net_errors = [abs(r["rel_error_net_peak"]) for r in runs.values()]
    print(
        json.dumps(
            {
                "bench": "plan_check",
                "steps": args.steps,
                "micro_batch": args.micro_batch,
                "seq_len": args.seq_len,
                "threads": args.threads,
                "process_overhead_mib_assumed": round(_overhead() / 2**20, 1),
                "max_abs_rel_error_peak_memory": round(max(errors), 4),
                "max_abs_rel_error_net_peak_memory": round(max(net_errors), 4),
                "target": "max_abs_rel_error_peak_memory <= 0.15",
                "expert_over_dense_time_per_token": {
                    s: r["expert_over_dense_time_per_token"] for s, r in ratios.items()
                },
                "expert_over_dense_peak_rss": {
                    s: r["expert_over_dense_peak_rss"] for s, r in ratios.items()
                },
                "by_size": ratios,
                "runs": runs,
                "elapsed_s": round(time.perf_counter() - started, 1),
            }
        )
    )
    return 0


def _overhead() -> int:
    from trainer.plan import PROCESS_OVERHEAD_BYTES

    return PROCESS_OVERHEAD_BYTES


if __name__ == "__main__":
    sys.exit(main())
