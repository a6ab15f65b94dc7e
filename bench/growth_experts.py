"""Benchmark: experts that grow with a drifting domain (issue 16, Must-show part (a)).

One domain of the bundled corpus (``python_code``) is streamed in three drift phases: its
files grouped by standard-library package in name order (``a``-``f``, ``g``-``o``,
``p``-``z``; the codec tables of ``encodings`` left out), so each phase's code is about
other things than the last one's. Each phase trains on its own documents with the same
budget (``steps`` optimizer steps of ``micro_batch_size x seq_len`` tokens), three ways:

* ``growing``: phase 1 a fresh default expert; each later phase starts from the previous
  phase's expert *grown* (experts/growth.py, function-preserving: the expert recipe's
  growth rule forced on, ``growth_rank_factor`` 2 on every rank);
* ``same_size``: each later phase a same-size branch of the previous expert (growth off);
* ``retrained``: at each phase one fresh expert trained on all the documents so far, with
  the lineage's total budget (``steps x phase`` steps).

Per phase: held-out perplexity on that phase's documents and on every phase's held-out
documents so far (forgetting inside the lineage), parameters per expert, training seconds,
and the fit ratio the default growth rule reads (the parent's held-out ppl on the new
phase over its own at registration; the rule grows at ``TrainerConfig.growth_fit_ratio``).

:func:`expert_growth_figures` returns the figures (bench/growth.py imports it);
``python bench/growth_experts.py [--quick]`` prints them as one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DOMAIN = "python_code"
PHASES = (("a", "f"), ("g", "o"), ("p", "z"))  # package name ranges, by first letter
LEFT_OUT = ("encodings",)  # codec tables: near-identical files


def phase_documents(train: int, heldout: int) -> list[dict[str, Any]]:
    """The three phases' documents: ``{"packages", "train", "heldout"}`` each."""
    from worx.bundled import read_lines

    by_phase: list[list[str]] = [[] for _ in PHASES]
    for line in read_lines(None, domains=[DOMAIN]):
        parts = str(line.body.get("id", "")).split("/")  # python_code/<package>/<file>/<n>
        package = parts[1] if len(parts) > 1 else ""
        if not package or package in LEFT_OUT:
            continue
        for index, (low, high) in enumerate(PHASES):
            if low <= package[0].lower() <= high:
                by_phase[index].append(line.text)
    phases = []
    for (low, high), texts in zip(PHASES, by_phase, strict=True):
        if len(texts) < train + heldout:
            raise ValueError(
                f"phase {low}-{high} has {len(texts)} documents, not {train + heldout}"
            )
        # every 4th document held out, so both halves span the phase's packages
        held = texts[::4][:heldout]
        rest = [t for i, t in enumerate(texts) if i % 4 != 0][:train]
        phases.append({"packages": f"{low}-{high}", "train": rest, "heldout": held})
    return phases


def _ppl(trunk, expert, texts: list[str], max_tokens: int) -> float:
    from experts.mixture import Mixture
    from monitor.scoring import score_texts

    mixture = Mixture(trunk, {"e": expert})
    scores = score_texts(
        mixture.token_losses, trunk.tokenizer, texts, [{"e": 1.0}] * len(texts), max_tokens
    )
    return math.exp(scores.mean)


def expert_growth_figures(quick: bool = False) -> dict[str, Any]:
    """Growing experts vs same-size branches vs one retrained expert, three drift phases."""
    import torch

    from experts.trunk import load_trunk
    from trainer.config import TrainerConfig
    from trainer.recipes.expert import train_expert
    from worx.bundled import trunk_dir

    torch.manual_seed(0)
    steps, train, heldout, max_tokens = (6, 24, 6, 128) if quick else (30, 90, 16, 256)
    base = TrainerConfig(
        max_steps=steps,
        grad_accum_steps=1,
        eval_every=steps,
        progress=False,
        device="cpu",
        start_candidates=0,
    )
    trunk = load_trunk(trunk_dir())
    phases = phase_documents(train, heldout)

    def run(name: str, config: TrainerConfig, lineage: bool) -> dict[str, Any]:
        out: dict[str, list] = {
            "ppl_phase": [],
            "ppl_seen": [],
            "params": [],
            "train_s": [],
            "fit_ratio": [],
        }
        parent, own = None, None
        for index, phase in enumerate(phases):
            if lineage:
                texts, cfg = phase["train"], config
            else:  # retrained: all the documents so far, the lineage's total budget
                texts = [t for p in phases[: index + 1] for t in p["train"]]
                total = steps * (index + 1)
                cfg = dataclasses.replace(config, max_steps=total, eval_every=total)
            started = time.perf_counter()
            result = train_expert(
                trunk,
                texts,
                phase["heldout"],
                cfg,
                parent=parent if lineage else None,
                parent_id="parent",
                own_ppl={"parent": own} if own else None,
            )
            out["train_s"].append(round(time.perf_counter() - started, 1))
            growth = result.summary.get("growth") or {}
            out["fit_ratio"].append(growth.get("parent_fit_ratio"))
            expert = result.expert
            seen = [t for p in phases[: index + 1] for t in p["heldout"]]
            out["ppl_phase"].append(round(_ppl(trunk, expert, phase["heldout"], max_tokens), 2))
            out["ppl_seen"].append(round(_ppl(trunk, expert, seen, max_tokens), 2))
            out["params"].append(expert.num_params())
            parent, own = expert, result.figures["heldout_ppl_after"]
        return out

    started = time.perf_counter()
    growing = run("growing", dataclasses.replace(base, growth_fit_ratio=1e-9), True)
    same = run("same_size", dataclasses.replace(base, growth_fit_ratio=0.0), True)
    retrained = run("retrained", base, False)
    return {
        "bench": "growth_experts",
        "quick": quick,
        "domain": DOMAIN,
        "phases": [
            {
                "packages": p["packages"],
                "train_docs": len(p["train"]),
                "heldout_docs": len(p["heldout"]),
            }
            for p in phases
        ],
        "steps_per_phase": steps,
        "tokens_per_step": base.micro_batch_size * base.seq_len * base.grad_accum_steps,
        "eval_max_tokens": max_tokens,
        "default_growth_fit_ratio": TrainerConfig().growth_fit_ratio,
        "growing": growing,
        "same_size": same,
        "retrained": retrained,
        "growing_over_same_size_final_ppl_seen": round(
            growing["ppl_seen"][-1] / same["ppl_seen"][-1], 4
        ),
        "growing_over_retrained_final_ppl_seen": round(
            growing["ppl_seen"][-1] / retrained["ppl_seen"][-1], 4
        ),
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter run (smaller phases)")
    args = parser.parse_args(argv)
    print(json.dumps(expert_growth_figures(quick=args.quick)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
