"""Discovery from an empty table over several seeds: the median and range of each figure;
prints ONE JSON line.

One seed of ``bench/discovery.py --mixed`` is one draw: which kinds happen to arrive
together first decides which chain forms, and ``mixed_nmi`` spans 0.83-0.92 over five seeds
on 42 domains. This runs the company-shaped stream (``--mixed N``) and the plain
mixture (``--scratch N``) of ``bench/discovery.py`` for every seed of ``--seeds`` and
reports, per figure, every seed's value, the median, min and max; the baseline (the
same pipeline with IDF off, as in ``bench/discovery.py``) beside it unless
``--no-baseline``. ``mixed_missing_seeds`` counts, per label, the seeds in which it got no
domain (the labels a chain takes again and again).

Usage::

    python bench/discovery_seeds.py --corpus many --seeds 0,1,2,3,4 --mixed 20000 \\
        [--scratch 12000] [--no-baseline] [--set FIELD=VALUE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from discovery import plain_embedder, run_from_scratch, run_mixed  # noqa: E402
from tqdm import tqdm  # noqa: E402

from router.config import RouterConfig  # noqa: E402
from router.embed import default_embedder  # noqa: E402
from worx.scenario import Scenario  # noqa: E402

SPREAD_KEYS = (
    "mixed_nmi",
    "mixed_domains_found",
    "mixed_spurious",
    "mixed_max_delay_docs",
    "mixed_rare_found",
    "mixed_jobs",
    "mixed_second_jobs",
    "mixed_labels_without_job",
    "scratch_nmi",
    "scratch_domains",
)


def one_seed(scenario: Scenario, config: RouterConfig, embedder, seed: int, args) -> dict:
    out: dict = {}
    if args.mixed:
        out.update(run_mixed(scenario, config, embedder, args.mixed, seed, progress=False))
    if args.scratch:
        out.update(run_from_scratch(scenario, config, embedder, args.scratch, seed, False))
    return out


def spread(runs: list[dict], prefix: str = "") -> dict:
    """Per figure of :data:`SPREAD_KEYS` present in ``runs``: every value, median, range."""
    out: dict = {}
    for key in SPREAD_KEYS:
        values = [run[key] for run in runs if key in run]
        if values:
            out[f"{prefix}{key}_by_seed"] = values
            out[f"{prefix}{key}_median"] = statistics.median(values)
            out[f"{prefix}{key}_min"] = min(values)
            out[f"{prefix}{key}_max"] = max(values)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=None, help="as bench/discovery.py's --corpus")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    parser.add_argument("--mixed", type=int, default=20000, metavar="N", help="0: skip")
    parser.add_argument("--scratch", type=int, default=0, metavar="N", help="0: skip")
    parser.add_argument("--no-baseline", action="store_true", help="skip the IDF-off baseline")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="a [router] setting"
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds or not (args.mixed or args.scratch):
        parser.error("give at least one seed and --mixed or --scratch")
    logging.basicConfig(level=logging.WARNING)
    overrides = {}
    for item in args.set:
        field, _, value = item.partition("=")
        overrides[field] = type(getattr(RouterConfig(), field))(value)
    config = RouterConfig(**overrides)
    config.validate()
    scenario = Scenario.from_directory(args.corpus)
    embedder = default_embedder(config)
    ours, base = [], []
    for seed in tqdm(seeds, desc="seeds", disable=args.no_progress):
        ours.append(one_seed(scenario, config, embedder, seed, args))
        if not args.no_baseline:
            base.append(one_seed(scenario, config, plain_embedder(config), seed, args))
    missing = Counter(label for run in ours for label in run.get("mixed_missing", []))
    result = {
        "corpus": str(args.corpus or "data/corpus"),
        "seeds": seeds,
        "mixed_docs": args.mixed,
        "scratch_docs": args.scratch,
        **spread(ours),
        **spread(base, prefix="baseline_"),
        "mixed_missing_seeds": dict(missing.most_common()),
        "config": {k: v for k, v in dataclasses.asdict(config).items() if k in overrides},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
