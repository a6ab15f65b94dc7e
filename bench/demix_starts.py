"""DEMix starts in a library of many experts: the nearest domains' experts vs the newest.

A new domain's expert may start as a copy of a stored expert (the trainer's
``start_candidates``, docs/trainer.md): the recipe scores each candidate on the job's
held-out rows and copies the best if it beats the trunk. Which experts are candidates
matters once the library holds more experts than that: the trainer took the newest 8, and
now takes the experts of the 8 domains nearest the job's centroid
(:func:`trainer.starts.nearest_starts`). This bench measures both rules side by side on
the same data.

Every label of the corpus gets one expert of the trainer's default recipe from zero (30
steps on its first ``--train-docs`` training documents; ``--cache`` keeps them), registered
in a seeded random order. Each of the last ``--targets`` labels of that order is then
trained as a new domain twice, with the library of the labels before it: candidates = the
newest ``--candidates`` of them (``newest``, the baseline) and the ``--candidates``
nearest by the cosine of their centroids (the mean embedding of their training
documents, as a promoted domain's) to the target's (ours). Same training and held-out
documents, same recipe and seeds; a run is skipped and reused when both rules give the
same candidates.

Prints ONE JSON line: per target the start each rule chose (a label, or null: from zero),
its held-out perplexity at the start and after training, and the ratio ours / newest;
their median, maximum and geometric mean, and the share of targets whose start differs.

    python bench/demix_starts.py [--corpus many] [--targets 8] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from route_recall import split  # noqa: E402
from route_recall_experts import recipe_config, train_experts  # noqa: E402

from experts.trunk import load_trunk  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.embed import default_embedder  # noqa: E402
from trainer.recipes.expert import train_expert  # noqa: E402
from trainer.starts import nearest_starts  # noqa: E402
from worx import bundled  # noqa: E402
from worx.scenario import Scenario  # noqa: E402

log = logging.getLogger("bench.demix_starts")


def run(trunk, train, heldout, steps: int, candidates: dict) -> dict:
    start = time.perf_counter()
    result = train_expert(trunk, train, heldout, recipe_config(steps), candidates=candidates)
    summary = result.summary
    started = summary.get("started_from_expert_id")
    return {
        "start": started,
        "start_ppl": summary["start_candidates_ppl"].get(started) if started else None,
        "ppl_trunk": round(result.figures["heldout_ppl_trunk"], 4),
        "ppl_after": round(result.figures["heldout_ppl_after"], 4),
        "outcome": result.outcome,
        "elapsed_s": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="many", help="a directory or a preset (many)")
    parser.add_argument("--trunk", type=Path, default=None, help="default: the bundled trunk")
    parser.add_argument("--seed", type=int, default=0, help="the library's registration order")
    parser.add_argument("--targets", type=int, default=8, help="last labels trained as new")
    parser.add_argument("--candidates", type=int, default=8, help="start candidates per rule")
    parser.add_argument("--steps", type=int, default=30, help="recipe steps per expert")
    parser.add_argument("--train-docs", type=int, default=300, help="training docs per label")
    parser.add_argument("--heldout-docs", type=int, default=16, help="held-out docs per target")
    parser.add_argument("--cache", type=Path, default=None, help="keep/reuse the library")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    config = RouterConfig()
    embedder = default_embedder(config)
    stream, held = split(Scenario.from_directory(args.corpus), config)
    order = stream.names
    random.Random(args.seed).shuffle(order)
    if not 0 < args.targets < len(order):
        parser.error(f"--targets: 1 to {len(order) - 1} for {len(order)} labels")
    trunk = load_trunk(args.trunk or bundled.trunk_dir())
    texts = {label: [d.text for d in stream.domains[label][: args.train_docs]] for label in order}
    centroids = {}
    for label in order:
        mean = embedder.embed(texts[label]).mean(axis=0)  # (dim,)
        centroids[label] = mean / max(float(np.linalg.norm(mean)), 1e-12)
    library, _ = train_experts(trunk, stream, order[:-1], args.steps, args.train_docs, args.cache)

    rows = {}
    for position in range(len(order) - args.targets, len(order)):
        target = order[position]
        before = [label for label in order[:position] if label in library]
        stored = [
            SimpleNamespace(
                expert_id=label, domain_id=label, centroid=centroids[label], created_ms=k
            )
            for k, label in enumerate(before)
        ]
        nearest = nearest_starts(stored, centroids[target], args.candidates)
        chosen = {"newest": before[-args.candidates :], "nearest": [m.expert_id for m in nearest]}
        heldout = [d.text for d in held.get(target, [])[: args.heldout_docs]]
        row = {"library": len(before)}
        for rule in ("newest", "nearest"):
            if rule == "nearest" and sorted(chosen["nearest"]) == sorted(chosen["newest"]):
                row["nearest"] = {**row["newest"], "reused": True}
                continue
            candidates = {label: library[label] for label in chosen[rule]}
            row[rule] = run(trunk, texts[target], heldout, args.steps, candidates)
            log.warning("%s %s: %s", target, rule, row[rule])
        row["ratio"] = round(row["nearest"]["ppl_after"] / row["newest"]["ppl_after"], 4)
        rows[target] = row

    ratios = [r["ratio"] for r in rows.values()]
    line = {
        "bench": "demix_starts",
        "corpus": args.corpus,
        "seed": args.seed,
        "steps": args.steps,
        "candidates": args.candidates,
        "library_labels": len(library),
        "ppl_nearest_over_newest_median": round(statistics.median(ratios), 4),
        "ppl_nearest_over_newest_max": max(ratios),
        "ppl_nearest_over_newest_geomean": round(
            math.exp(statistics.fmean(math.log(r) for r in ratios)), 4
        ),
        "start_differs_share": round(
            sum(r["nearest"]["start"] != r["newest"]["start"] for r in rows.values()) / len(rows), 3
        ),
        "targets": rows,
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
