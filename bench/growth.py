"""Benchmark: state-preserving growth and reversible stacks (issue 16), one JSON line.

(b) Trunk pretraining with growth vs from scratch, same total FLOPs. The recipe
(``trainer.recipes.pretrain_trunk.pretrain``, bundled corpus) trains ``2x32`` (layers x
width), grows to ``4x32`` (zero-output blocks), then to ``4x64`` (widened); the baseline
trains ``4x64`` from scratch for as many steps as the same FLOPs buy. FLOPs per step are
``6 * N * tokens`` with ``N`` the parameters a token's forward multiplies by (all but the
position embeddings; the tied embedding counted once, as the output layer). Figures: the
final held-out loss of each (token-weighted over the training domains' held-out slices;
target grown <= scratch) and the loss jump at each growth (the same probe batch right
before and right after; target |jump| <= 1e-4 nats).

(c) Reversible vs standard (GPT-2) trunk at depth 4, 8 and 16 (width 64): the peak bytes of
activations per token of one training step (forward, loss and backward of a fixed batch),
counted exactly with :class:`trainer.plan.saved.SavedBytes` (saved-tensor hooks: load
independent; target flat within 10% for reversible, growing for standard), and the final
held-out loss after the same steps with the same data (target within 2%).

(a) comes from ``bench/growth_experts.py`` (``expert_growth_figures``) when that file
exists, merged under ``"experts"``.

No figure of parts (b) and (c) depends on time or load; part (a) reports training seconds,
so run the whole bench under ``flock /tmp/worx-bench.lock``. Usage::

    python bench/growth.py            # ~8 minutes on 2 idle cores
    python bench/growth.py --quick    # smoke run, ~2 minutes
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from trainer.plan.saved import SavedBytes  # noqa: E402
from trainer.recipes.pretrain_trunk import PretrainConfig, pretrain  # noqa: E402

COMMON = dict(
    vocab_size=512,
    context=32,
    batch_size=8,
    lr=3e-3,
    max_docs_per_domain=100,
    eval_tokens=4096,
    threads=1,  # one thread: on a shared, busy machine two spin against each other
    seed=0,
    progress=False,
    save_dtype="float32",
)
DEPTHS = (4, 8, 16)


def _flops_per_step(layers: int, width: int, vocab: int) -> int:
    """6 N tokens: N per block 12 d^2 + 13 d (GPT-2 with biases and norms), the tied
    embedding once (the output layer's matmul), the final norm."""
    n = layers * (12 * width * width + 13 * width) + vocab * width + 2 * width
    return 6 * n * COMMON["batch_size"] * COMMON["context"]


def _heldout_loss(report: dict[str, Any]) -> float:
    rows = [r for r in report["heldout"].values() if r["trained_on"]]
    return sum(r["loss"] * r["tokens"] for r in rows) / sum(r["tokens"] for r in rows)


def _run(root: Path, name: str, **fields: Any) -> dict[str, Any]:
    return pretrain(PretrainConfig(out_dir=str(root / name), **{**COMMON, **fields}))


def growth_vs_scratch(root: Path, phase_steps: int) -> dict[str, Any]:
    """(b): ``2x32 -> 4x32 -> 4x64`` vs ``4x64`` from scratch at the same FLOPs."""
    shapes = [(2, 32), (4, 32), (4, 64)]
    grow_at = (f"{phase_steps}:4x32", f"{2 * phase_steps}:4x64")
    grown = _run(root, "grown", layers=2, width=32, heads=1, steps=3 * phase_steps, grow_at=grow_at)
    vocab = grown["vocab_size"]
    flops = sum(phase_steps * _flops_per_step(layers, width, vocab) for layers, width in shapes)
    scratch_steps = round(flops / _flops_per_step(4, 64, vocab))
    scratch = _run(root, "scratch", layers=4, width=64, heads=2, steps=scratch_steps)
    jumps = [g["loss_after"] - g["loss_before"] for g in grown["growth"]]
    grown_loss, scratch_loss = _heldout_loss(grown), _heldout_loss(scratch)
    return {
        "max_abs_loss_jump_at_growth": max(abs(j) for j in jumps),
        "grown_over_scratch_final_loss": round(grown_loss / scratch_loss, 4),
        "growth": {
            "shapes": [f"{layers}x{width}" for layers, width in shapes],
            "steps_per_shape": phase_steps,
            "scratch_steps": scratch_steps,
            "flops_grown": flops,
            "flops_scratch": scratch_steps * _flops_per_step(4, 64, vocab),
            "loss_jumps": jumps,
            "loss_before_growth": [g["loss_before"] for g in grown["growth"]],
            "optimizer_tensors_carried": [g["optimizer_tensors_carried"] for g in grown["growth"]],
            "heldout_loss_grown": round(grown_loss, 4),
            "heldout_loss_scratch": round(scratch_loss, 4),
            "params_final": grown["parameters"],
        },
    }


def activation_bytes_per_token(reversible: bool, layers: int, width: int = 64) -> float:
    """Peak saved-activation bytes per token of one training step of a fresh model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from experts.reversible import ReversibleConfig, ReversibleLMHeadModel

    shape = dict(
        vocab_size=COMMON["vocab_size"],
        n_embd=width,
        n_layer=layers,
        n_head=width // 32,
        n_positions=COMMON["context"],
        resid_pdrop=0.0,
    )
    torch.manual_seed(0)
    if reversible:
        model = ReversibleLMHeadModel(ReversibleConfig(**shape))
    else:
        model = GPT2LMHeadModel(GPT2Config(**shape, embd_pdrop=0.0, attn_pdrop=0.0))
    model.train()
    ids = torch.randint(0, COMMON["vocab_size"], (COMMON["batch_size"], COMMON["context"]))
    counter = SavedBytes(model)
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.peak / ids.numel()


def reversible_vs_standard(root: Path, steps: int) -> dict[str, Any]:
    """(c): activation bytes per token and held-out loss at depths 4, 8, 16."""
    bytes_per_token: dict[str, dict[int, float]] = {"standard": {}, "reversible": {}}
    loss: dict[str, dict[int, float]] = {"standard": {}, "reversible": {}}
    for kind in ("standard", "reversible"):
        for depth in DEPTHS:
            bytes_per_token[kind][depth] = activation_bytes_per_token(kind == "reversible", depth)
            report = _run(
                root,
                f"{kind}-{depth}",
                layers=depth,
                width=64,
                heads=2,
                steps=steps,
                reversible=kind == "reversible",
            )
            loss[kind][depth] = round(_heldout_loss(report), 4)
    ratios = {d: loss["reversible"][d] / loss["standard"][d] for d in DEPTHS}
    worst = max(ratios.values(), key=lambda r: abs(r - 1.0))
    return {
        "reversible_activation_growth_4_to_16": round(
            bytes_per_token["reversible"][16] / bytes_per_token["reversible"][4], 4
        ),
        "standard_activation_growth_4_to_16": round(
            bytes_per_token["standard"][16] / bytes_per_token["standard"][4], 4
        ),
        "reversible_over_standard_loss": round(worst, 4),
        "reversible": {
            "width": 64,
            "steps": steps,
            "activation_bytes_per_token": {
                k: {d: round(v) for d, v in row.items()} for k, row in bytes_per_token.items()
            },
            "heldout_loss": loss,
            "loss_ratio_by_depth": {d: round(r, 4) for d, r in ratios.items()},
        },
    }


def expert_figures(quick: bool) -> dict[str, Any] | None:
    """Part (a) from bench/growth_experts.py, or None while that file does not exist."""
    path = REPO / "bench" / "growth_experts.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("growth_experts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expert_growth_figures(quick=quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (few steps)")
    parser.add_argument("--no-experts", action="store_true", help="skip part (a)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    default_threads = torch.get_num_threads()
    torch.set_num_threads(COMMON["threads"])
    phase_steps, steps = (15, 10) if args.quick else (150, 80)
    with tempfile.TemporaryDirectory(prefix="worx-bench-growth-") as tmp:
        root = Path(tmp)
        figures: dict[str, Any] = {"bench": "growth", "quick": args.quick}
        figures.update(growth_vs_scratch(root, phase_steps))
        figures.update(reversible_vs_standard(root, steps))
    torch.set_num_threads(default_threads)  # part (a) runs as its own script would
    experts = None if args.no_experts else expert_figures(args.quick)
    if args.no_experts:
        figures["experts"] = "skipped (--no-experts)"
    else:
        figures["experts"] = experts if experts is not None else "bench/growth_experts.py absent"
    figures["note"] = (
        "losses and activation bytes do not depend on load (saved-tensor hooks, seeded "
        "runs); float32 on the CPU"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
