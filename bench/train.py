"""Benchmark: the expert recipe against a tuned dense fine-tune, on the same tokens.

One run, one trunk, the same documents and the same number of tokens for every
configuration; each configuration runs in a fresh subprocess so its peak resident memory is
its own. Prints ONE JSON line:

* per run: tokens/s, wall and CPU time per token (training steps only), peak RSS (whole
  process, and net of the process after imports and tokenisation, before any model is
  loaded), optimizer-state bytes per trainable parameter, held-out perplexity before and
  after the same tokens;
* ``expert``: the trainer's default expert (``TrainerConfig()``: the kind, size and learning
  rate that the demo and ``worx up`` train), every memory saver on; ``expert_no_*`` and
  ``expert_fp32_adamw`` switch one saver off;
* ``dense``: a dense fine-tune of every weight, its learning rate swept (``--dense-lrs``)
  and the best held-out perplexity taken (each ``dense_lr*`` run is listed);
  ``dense_frozen_embeddings``: the same at the best rate with the (tied) embeddings frozen;
  ``dense_fused_gelu``: the same with PyTorch's fused GELU kernel (the one the expert's
  frozen MLPs run, trainer/frozen_mlp.py) instead of GPT-2's Python ``gelu_new``;
* ``design_*``: other expert designs on the same tokens (the diagnosis of where the gap to
  dense is: docs/trainer.md);
* ``expert_equal_time``: the default expert given the wall-clock time dense used (more
  steps over the same documents: c-BTM's compute-matched comparison);
* the headline ratios: ``ppl_expert_over_dense`` (against the tuned dense),
  ``ppl_expert_over_dense_equal_time``, ``expert_over_dense_time_per_token``,
  ``expert_over_dense_peak_rss`` (net peaks; ``..._total`` with the interpreter's own
  memory), ``optimizer_bytes_per_param_8bit``, ``ppl_8bit_over_fp32``.

The trunk is the bundled default trunk (``data/trunk``, pretrained on general English) when
it exists, else a randomly initialised GPT-2 of the same shape (4 layers, width 256);
``--trunk DIR`` picks another. The domain trained on is ``--domain`` (default
``biomedical``, not in the trunk's pretraining data) of ``--corpus`` (default: the bundled
corpus; any directory of ``<domain>.jsonl[.gz]`` files with a ``text`` field).

Usage::

    python bench/train.py                          # ~8 minutes on 2 CPU cores
    python bench/train.py --runs expert,dense      # the headline pair only
    python bench/train.py --corpus DIR --domain NAME
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SAVERS_OFF = {
    "optimizer": "adamw",
    "activation_checkpointing": False,
    "fused_frozen_mlp": False,
    "mmap_trunk": False,
    "chunked_loss": False,
}
# expert runs: TrainerConfig fields over the trainer's defaults ("expert": fields of its
# [trainer.expert] shape); dense runs: lr and frozen parts
RUNS: dict[str, dict] = {
    "expert": {"kind": "expert", "cfg": {}},  # the recipe exactly as configured by default
    "expert_fp32_adamw": {"kind": "expert", "cfg": {"optimizer": "adamw"}},
    "expert_no_act_ckpt": {"kind": "expert", "cfg": {"activation_checkpointing": False}},
    "expert_no_mmap": {"kind": "expert", "cfg": {"mmap_trunk": False}},
    "expert_no_chunked_loss": {"kind": "expert", "cfg": {"chunked_loss": False}},
    "expert_no_fused_mlp": {"kind": "expert", "cfg": {"fused_frozen_mlp": False}},
    "expert_no_savers": {"kind": "expert", "cfg": SAVERS_OFF},
    "dense": {"kind": "dense"},  # the learning-rate sweep; the best run is reported as "dense"
    "dense_frozen_embeddings": {"kind": "dense", "freeze_embeddings": True},
    # dense with the fused GELU kernel the expert's frozen MLPs use (what dense would gain)
    "dense_fused_gelu": {"kind": "dense", "fused_gelu": True},
    # the expert the demo trained before vocabulary kinds: adapters in the upper half,
    # rank 16, LR 3e-3
    "design_adapter_r16": {
        "kind": "expert",
        "cfg": {"expert": {"kind": "adapter", "rank": 16}, "lr": 3e-3},
    },
    "design_adapter_r128": {"kind": "expert", "cfg": {"expert": {"kind": "adapter"}}},
    # the output vocabulary alone: unembedding delta + logit bias
    "design_output_only": {
        "kind": "expert",
        "cfg": {"expert": {"kind": "vocab", "token_rank": 0}},
    },
    # the default's token delta on the input embeddings (backward through every block)
    "design_tokens_at_embeddings": {
        "kind": "expert",
        "cfg": {"expert": {"token_layer": 0, "token_site": "input"}},
    },
    # twice the vocabulary ranks
    "design_vocab_rank_64": {
        "kind": "expert",
        "cfg": {"expert": {"output_rank": 64, "token_rank": 64}},
    },
    "expert_equal_time": {"kind": "expert", "cfg": {}, "equal_time": True},
}


def corpus_texts(corpus: str | None, domain: str, count: int, skip: int = 0) -> list[str]:
    from worx.bundled import domain_texts

    return domain_texts(domain, count, skip=skip, directory=corpus)


# ---- one configuration, in its own process -------------------------------------------


def run_one(name: str, spec: dict) -> dict:
    """Train one configuration of :data:`RUNS` and measure it (in this process)."""
    import resource

    import psutil
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    import bitsandbytes  # noqa: F401 - imported before the baseline, like everything else
    import transformers
    from transformers.models.gpt2 import modeling_gpt2  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    from experts.trunk import load_trunk, use_fused_gelu
    from trainer.config import TrainerConfig
    from trainer.expert_setup import prepare_trunk
    from trainer.recipes.dense import (
        DenseConfig,
        dense_finetune,
        load_trainable,
        perplexity,
    )
    from trainer.recipes.expert import train_expert

    transformers.AutoTokenizer.from_pretrained(spec["trunk"])  # tokenizer libraries loaded too

    train, heldout = spec["train"], spec["heldout"]
    run = RUNS[name]
    baseline = psutil.Process().memory_info().rss  # interpreter, libraries, texts; no model yet
    out: dict = {}
    if run["kind"] == "expert":
        trunk = load_trunk(spec["trunk"])
        steps = spec["steps"]
        if run.get("equal_time"):
            steps = spec["equal_time_steps"]
        cfg = TrainerConfig(
            max_steps=steps,
            seq_len=spec["seq_len"],
            micro_batch_size=spec["micro_batch"],
            grad_accum_steps=1,
            warmup_steps=max(1, steps // 10),
            eval_every=steps,
            patience=1000,
            max_eval_rows=10_000,
            device="cpu",
            progress=False,
        )
        overrides = dict(run["cfg"])
        shape = {**spec["expert_overrides"], **overrides.pop("expert", {})}  # [trainer.expert]
        if "layers" in shape:
            shape["layers"] = _expert_layers(shape["layers"], trunk.num_layers)
        expert = dataclasses.replace(cfg.expert, **shape)
        cfg = dataclasses.replace(cfg, expert=expert, **overrides)
        cfg.validate()
        prepare_trunk(trunk, cfg, cache_dir=Path(spec["cache_dir"]))
        result = train_expert(trunk, train, heldout, cfg)
        summary = result.summary
        out.update(
            steps=steps,
            lr=cfg.lr,
            expert_config=summary["expert_config"],
            tokens=summary["tokens_seen"],
            train_s=summary["elapsed_s"],
            cpu_s=summary["cpu_s"],
            median_step_s=summary["median_step_s"],
            trainable_params=summary["trainable_params"],
            optimizer_state_bytes=summary["optimizer_state_bytes"],
            optimizer_state_breakdown=summary["optimizer_state_breakdown"],
            heldout_ppl_before=summary["heldout_ppl_before"],
            heldout_ppl=summary["eval_curve"][-1][1],  # after all the tokens (not the best)
        )
    else:
        model, tokenizer = load_trainable(spec["trunk"])
        if run.get("freeze_embeddings"):
            model.get_input_embeddings().weight.requires_grad_(False)  # tied: the output too
        if run.get("fused_gelu"):
            use_fused_gelu(model)
        before = spec.get("dense_ppl_before")  # the same trunk on the same texts: measured once
        if before is None or run.get("freeze_embeddings") or run.get("fused_gelu"):
            before = perplexity(model, tokenizer, heldout, spec["seq_len"], spec["micro_batch"])
        cfg = DenseConfig(
            steps=spec["steps"],
            seq_len=spec["seq_len"],
            micro_batch_size=spec["micro_batch"],
            grad_accum_steps=1,
            lr=spec["dense_lr"],
            warmup_steps=spec["warmup"],
            progress=False,
        )
        result = dense_finetune(model, tokenizer, train, cfg)
        out.update(
            steps=spec["steps"],
            lr=cfg.lr,
            tokens=result.tokens,
            train_s=result.elapsed_s,
            cpu_s=result.cpu_s,
            median_step_s=statistics.median(result.step_times),
            trainable_params=result.trainable_params,
            optimizer_state_bytes=result.optimizer_state_bytes,
            heldout_ppl_before=before,
            heldout_ppl=perplexity(model, tokenizer, heldout, spec["seq_len"], spec["micro_batch"]),
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    # after training: private (anonymous) memory and file-backed pages (a memory-mapped trunk
    # is file-backed: shared with the page cache and every process mapping the same file)
    out.update(_rss_split())
    out.update(
        tokens_per_s=round(out["tokens"] / out["train_s"], 1),
        time_per_token_us=round(1e6 * out["train_s"] / out["tokens"], 3),
        cpu_time_per_token_us=round(1e6 * out["cpu_s"] / out["tokens"], 3),
        # robust to bursts of other load on a shared machine: the median step
        median_time_per_token_us=round(
            1e6 * out["median_step_s"] * out["steps"] / out["tokens"], 3
        ),
        peak_rss_mb=round(peak / 2**20, 1),
        net_peak_rss_mb=round((peak - baseline) / 2**20, 1),
        optimizer_bytes_per_param=round(out["optimizer_state_bytes"] / out["trainable_params"], 4),
        heldout_ppl=round(out["heldout_ppl"], 4),
        heldout_ppl_before=round(out["heldout_ppl_before"], 4),
    )
    return out


def _expert_layers(arg: str, num_layers: int) -> tuple[int, ...]:
    """Trunk layers with an adapter: ``all``, ``upper`` (the upper half) or ``0,2,3``."""
    if arg == "all":
        return tuple(range(num_layers))
    if arg == "upper":
        return tuple(range(num_layers // 2, num_layers))
    layers = tuple(int(x) for x in arg.split(","))
    if any(not 0 <= layer < num_layers for layer in layers):
        raise ValueError(f"--expert-layers {arg!r}: the trunk has layers 0..{num_layers - 1}")
    return layers


def _rss_split() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[f"{key.lower().replace('rss', 'rss_')}_mb_end"] = round(
                int(value.split()[0]) / 1024, 1
            )
    return fields


# ---- the whole comparison ----------------------------------------------------------------


def resolve_trunk(arg: str | None, work: Path) -> tuple[str, str]:
    """(trunk directory, description)."""
    if arg:
        return arg, f"given: {arg}"
    bundled = REPO / "data" / "trunk"
    if (bundled / "config.json").exists():
        return str(bundled), "bundled default trunk (data/trunk)"
    from experts.trunk import build_tiny_trunk

    path = build_tiny_trunk(
        work / "trunk", family="gpt2", layers=4, width=256, heads=4, vocab_size=4096
    )
    return str(path), "random GPT-2, 4 layers, width 256 (no bundled trunk found)"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trunk", help="trunk model directory (default: bundled, else a random GPT-2)"
    )
    parser.add_argument("--corpus", help="labelled corpus directory (default: the bundled one)")
    parser.add_argument("--domain", default="biomedical", help="corpus domain to train on")
    parser.add_argument(
        "--steps", type=int, default=30, help="optimizer steps per run (same for all)"
    )
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--train-docs", type=int, default=150)
    parser.add_argument("--heldout-docs", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--dense-lrs",
        default="3e-4,1e-3,3e-3",
        help="dense learning rates swept (the best held-out perplexity is the baseline)",
    )
    parser.add_argument(
        "--expert-rank", type=int, help="adapter width of every expert run (default: trainer's)"
    )
    parser.add_argument(
        "--expert-layers",
        help="adapter layers of every expert run: 'upper', 'all' or e.g. '0,2,3' "
        "(default: the trainer's, the upper half)",
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs of the default expert (fastest kept)"
    )
    parser.add_argument(
        "--runs", default=",".join(RUNS), help="comma-separated subset of " + ",".join(RUNS)
    )
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.run_one:
        spec = json.loads(Path(args.spec).read_text())
        print(json.dumps(run_one(args.run_one, spec)), flush=True)
        return 0

    if args.expert_rank is not None and args.expert_rank < 1:
        parser.error("--expert-rank must be >= 1")
    if args.expert_layers not in (None, "all", "upper") and not all(
        x.strip().isdigit() for x in args.expert_layers.split(",")
    ):
        parser.error(f"--expert-layers {args.expert_layers!r}: 'all', 'upper' or e.g. '0,2,3'")
    try:
        dense_lrs = [float(x) for x in args.dense_lrs.split(",")]
    except ValueError:
        parser.error(f"--dense-lrs {args.dense_lrs!r}: comma-separated numbers, e.g. 3e-4,1e-3")
    names = args.runs.split(",")
    for name in names:
        if name not in RUNS:
            parser.error(f"unknown run {name!r}; choose from {', '.join(RUNS)}")

    import logging

    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    overrides: dict = {}  # fields of every expert run's [trainer.expert] shape
    if args.expert_rank is not None:
        overrides["rank"] = args.expert_rank
    if args.expert_layers is not None:
        overrides["layers"] = args.expert_layers
    with tempfile.TemporaryDirectory(prefix="worx-bench-train-") as tmp:
        work = Path(tmp)
        trunk_dir, trunk_desc = resolve_trunk(args.trunk, work)
        spec = {
            "trunk": trunk_dir,
            "cache_dir": str(work / "cache"),
            "steps": args.steps,
            "seq_len": args.seq_len,
            "micro_batch": args.micro_batch,
            "threads": args.threads,
            "warmup": max(1, args.steps // 10),
            "expert_overrides": overrides,
            "train": corpus_texts(args.corpus, args.domain, args.train_docs),
            "heldout": corpus_texts(
                args.corpus, args.domain, args.heldout_docs, skip=args.train_docs
            ),
        }
        if not spec["train"] or not spec["heldout"]:
            parser.error(
                f"domain {args.domain!r} has too few documents for --train-docs "
                f"{args.train_docs} and --heldout-docs {args.heldout_docs}"
            )
        _prepare_cache(spec)  # a float32 copy of a float16 trunk, made once, outside the timing
        runs = _run_all(names, spec, work, args, dense_lrs)
        trunk_params = _count_params(trunk_dir)
    print(
        json.dumps(
            _report(runs, spec, trunk_desc, trunk_params, args, time.perf_counter() - started)
        )
    )
    return 0


def _run_all(names: list[str], spec: dict, work: Path, args, dense_lrs: list[float]) -> dict:
    """Every run in its own process; the dense sweep first, so later runs can use its best."""
    runs: dict[str, dict] = {}

    def run(label: str, name: str, **extra) -> dict:
        spec_file = work / f"spec-{label}.json"
        spec_file.write_text(json.dumps({**spec, **extra}))
        result = _run_subprocess(name, spec_file, args.threads)
        print(f"# {label}: {result}", file=sys.stderr, flush=True)
        runs[label] = _merge(runs.get(label), result)
        return runs[label]

    if "expert" in names:
        run("expert", "expert")
    best_lr = None
    if "dense" in names or any(n.startswith("dense_") for n in names):
        sweep = []
        for lr in dense_lrs:  # the trunk's perplexity before training: measured by the first
            before = {"dense_ppl_before": sweep[0]["heldout_ppl_before"]} if sweep else {}
            sweep.append(run(f"dense_lr{lr:g}", "dense", dense_lr=lr, **before))
        best = min(sweep, key=lambda r: r["heldout_ppl"])
        best_lr = best["lr"]
        runs["dense"] = {
            **best,
            # the sweep's runs cost the same per token: the fastest measurement of any
            **{k: min(r[k] for r in sweep) for k in _TIMES},
            "lr_sweep": {f"{r['lr']:g}": r["heldout_ppl"] for r in sweep},
        }
    for name in names:
        if name in ("expert", "dense", "expert_equal_time"):
            continue
        if name in ("dense_frozen_embeddings", "dense_fused_gelu"):
            run(name, name, dense_lr=best_lr)
        else:
            run(name, name)
    for _ in range(args.repeat - 1):  # the machine's other load comes and goes
        if "expert" in names:
            run("expert", "expert")
    if "expert_equal_time" in names and "expert" in runs and "dense" in runs:
        ratio = runs["dense"]["time_per_token_us"] / runs["expert"]["time_per_token_us"]
        steps = max(args.steps, round(args.steps * ratio))
        run("expert_equal_time", "expert_equal_time", equal_time_steps=steps)
    return runs


def _run_subprocess(name: str, spec_file: Path, threads: int) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        # freed tensors go back to the OS at once, so RSS follows live memory (all runs)
        "MALLOC_MMAP_THRESHOLD_": "65536",
        # idle OpenMP threads sleep instead of spinning (a shared, busy machine)
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    done = subprocess.run(
        [sys.executable, __file__, "--run-one", name, "--spec", str(spec_file)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"bench run {name} failed with exit code {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_TIMES = ("time_per_token_us", "cpu_time_per_token_us", "median_time_per_token_us")


def _merge(previous: dict | None, new: dict) -> dict:
    """Keep the first run's figures; time figures: the fastest, with every measurement listed."""
    if previous is None:
        return {**new, **{f"{k}_all": [new[k]] for k in _TIMES}}
    merged = dict(previous)
    for key in _TIMES:
        merged[f"{key}_all"] = previous[f"{key}_all"] + [new[key]]
        merged[key] = min(merged[f"{key}_all"])
    merged["tokens_per_s"] = round(1e6 / merged["time_per_token_us"], 1)
    return merged


def _prepare_cache(spec: dict) -> None:
    from experts.trunk import load_trunk
    from trainer.config import TrainerConfig
    from trainer.expert_setup import prepare_trunk

    prepare_trunk(load_trunk(spec["trunk"]), TrainerConfig(), cache_dir=Path(spec["cache_dir"]))


def _count_params(trunk_dir: str) -> int:
    from safetensors import safe_open

    total = 0
    for file in Path(trunk_dir).glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - not a dict
                total += _numel(handle.get_slice(name).get_shape())
    return total


def _numel(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _excl_maps(run: dict | None) -> float | None:
    if run is None:
        return None
    parts = run["optimizer_state_breakdown"]
    kept = sum(v for k, v in parts.items() if not k.startswith("qmap"))
    return round(kept / run["trainable_params"], 4)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


def _report(
    runs: dict, spec: dict, trunk_desc: str, trunk_params: int, args, elapsed: float
) -> dict:
    expert, dense = runs.get("expert"), runs.get("dense")
    fp32 = runs.get("expert_fp32_adamw")
    fused = runs.get("dense_fused_gelu")

    def get(run: dict | None, key: str) -> float | None:
        return None if run is None else run[key]

    return {
        "bench": "train",
        "trunk": trunk_desc,
        "trunk_params": trunk_params,
        "corpus": args.corpus or "bundled",
        "domain": args.domain,
        "steps": args.steps,
        "tokens_per_run": get(expert, "tokens") or get(dense, "tokens"),
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "threads": args.threads,
        "expert_config": get(expert, "expert_config"),
        "expert_lr": get(expert, "lr"),
        "expert_trainable_params": get(expert, "trainable_params"),
        "dense_lr_best": get(dense, "lr"),
        "dense_lr_sweep": get(dense, "lr_sweep"),
        "heldout_ppl_trunk": get(expert, "heldout_ppl_before"),
        "heldout_ppl_expert": get(expert, "heldout_ppl"),
        "heldout_ppl_dense": get(dense, "heldout_ppl"),
        "designs": {
            name: {
                "heldout_ppl": run["heldout_ppl"],
                "trainable_params": run["trainable_params"],
                "time_per_token_us": run["time_per_token_us"],
                "over_dense": _ratio(run["heldout_ppl"], get(dense, "heldout_ppl")),
            }
            for name, run in runs.items()
            if name.startswith("design_") or name in ("dense_frozen_embeddings", "dense_fused_gelu")
        },
        "runs": runs,
        "expert_over_dense_time_per_token": _ratio(
            get(expert, "time_per_token_us"), get(dense, "time_per_token_us")
        ),
        "expert_over_dense_median_time_per_token": _ratio(
            get(expert, "median_time_per_token_us"), get(dense, "median_time_per_token_us")
        ),
        "expert_over_dense_cpu_time_per_token": _ratio(
            get(expert, "cpu_time_per_token_us"), get(dense, "cpu_time_per_token_us")
        ),
        "expert_over_dense_peak_rss": _ratio(
            get(expert, "net_peak_rss_mb"), get(dense, "net_peak_rss_mb")
        ),
        "expert_over_dense_peak_rss_total": _ratio(
            get(expert, "peak_rss_mb"), get(dense, "peak_rss_mb")
        ),
        # against dense given the fused GELU kernel too (the expert's frozen MLPs run it)
        "expert_over_dense_fused_gelu_time_per_token": _ratio(
            get(expert, "time_per_token_us"), get(fused, "time_per_token_us")
        ),
        "expert_over_dense_fused_gelu_peak_rss": _ratio(
            get(expert, "net_peak_rss_mb"), get(fused, "net_peak_rss_mb")
        ),
        "optimizer_bytes_per_param_8bit": get(expert, "optimizer_bytes_per_param"),
        # the same without bitsandbytes' two fixed 1 KiB quantisation maps (per optimizer,
        # whatever the parameter count)
        "optimizer_bytes_per_param_8bit_excl_fixed_maps": _excl_maps(expert),
        "optimizer_bytes_per_param_fp32": get(fp32, "optimizer_bytes_per_param"),
        "optimizer_bytes_per_param_dense": get(dense, "optimizer_bytes_per_param"),
        "ppl_8bit_over_fp32": _ratio(get(expert, "heldout_ppl"), get(fp32, "heldout_ppl")),
        "ppl_expert_over_dense": _ratio(get(expert, "heldout_ppl"), get(dense, "heldout_ppl")),
        "equal_time_steps": get(runs.get("expert_equal_time"), "steps"),
        "ppl_expert_over_dense_equal_time": _ratio(
            get(runs.get("expert_equal_time"), "heldout_ppl"), get(dense, "heldout_ppl")
        ),
        "targets": {
            "ppl_expert_over_dense": "<= 1.10",
            "ppl_expert_over_dense_equal_time": "<= 1.0",
            "expert_over_dense_time_per_token": "<= 0.5",
            "expert_over_dense_peak_rss": "<= 0.35",
            "optimizer_bytes_per_param_8bit": "<= 2.1",
            "ppl_8bit_over_fp32": "within 1% (0.99-1.01)",
        },
        "elapsed_s": round(elapsed, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
