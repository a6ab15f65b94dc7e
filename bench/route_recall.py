"""Routing recall at serve time: do prompt-length texts reach their domain's expert?

Prints ONE JSON line. The domain table comes from the real pipeline: the route and
discover stages (as ``bench/discovery.py`` runs them: every domain in turn, then a
mixture) over the corpus's documents *minus* the held-out ones (the pipeline's own split,
``stable_fraction(doc_id, heldout_salt) < heldout_fraction``). Every discovered domain
whose majority label (``label_hint``) is one of the corpus's labels "has an expert" (one
per domain, registered with the domain's centroid, as the trainer registers it); the
labels are used only for that mapping and for scoring.

Then each held-out document of a label that has an expert, cut to its first N characters
(128, 256, 512) and whole, is routed by the serving gate (:class:`router.gate.Gate`):

* ``route_recall_N``: the share served by an expert of a domain of its own label;
* ``route_wrong_N``: the share served by an expert of another label's domain;
* ``route_nearest_N``: the share whose nearest domain is one of its own label's (the
  ceiling of any rule that picks the nearest domain);
* ``route_foreign_N``: out-of-domain texts. For each label in turn, the table and experts
  without that label's domains; the share of its held-out documents then served by any
  expert (mean over labels; a novel text should stay on the trunk).

``ours`` is the gate given each text's length (the length-aware rule); ``baseline_*``
is today's rule, measured in the same run: the route stage's decision alone
(``Gate.decide`` without ``chars``). Keys ending in ``_full`` are whole documents.

``--sizes 8,16,32,42`` measures the same as the library grows instead: for each size K,
the first K labels of one seeded order (each size holds the smaller ones), their own
table from their own phased stream, and ``curve``: per K the domains found, recall and
wrong-expert rate at 256 characters and whole, and the gate's CPU time per request
(``gate_us_per_request``: ``Gate.decide_many`` over the held-out texts, median of 3).
The likelihood re-ranking needs trained experts: ``bench/route_recall_experts.py``.

Usage::

    python bench/route_recall.py [--corpus DIR] [--seed N] [--set floor=0.5]
        [--sizes 8,16,32,42]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from discovery import Pipeline  # noqa: E402

from ingest.scenario import LabelledDoc, Scenario  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.embed import default_embedder  # noqa: E402
from router.gate import DomainExperts, Gate, GateExpert  # noqa: E402
from router.records import DomainRecord  # noqa: E402
from router.table import DomainTable  # noqa: E402
from worx.ids import stable_fraction  # noqa: E402

log = logging.getLogger("bench.route_recall")

LENGTHS: tuple[int | None, ...] = (128, 256, 512, None)  # None: the whole document


def split(scenario: Scenario, config: RouterConfig) -> tuple[Scenario, dict[str, list]]:
    """(the stream's documents, the held-out documents per label), by the pipeline's split."""
    train: dict[str, list[LabelledDoc]] = {}
    held: dict[str, list[LabelledDoc]] = {}
    for name, docs in scenario.domains.items():
        for doc in docs:
            out = stable_fraction(doc.doc_id, salt=config.heldout_salt) < config.heldout_fraction
            (held if out else train).setdefault(name, []).append(doc)
    return Scenario(train), held


def build_table(
    scenario: Scenario, config: RouterConfig, embedder, per_domain: int, mixture: int, seed: int
) -> DomainTable:
    """The domain table the route stage ends with after the phased stream and a mixture."""
    order = scenario.names
    random.Random(seed).shuffle(order)
    pipe = Pipeline(config, embedder)
    for doc in scenario.phases_then_mixture(order, per_domain, mixture, seed=seed):
        pipe.feed(doc)
    pipe.flush()
    return pipe.route.table


def subtable(rows: list[DomainRecord]) -> DomainTable:
    table = DomainTable()
    for row in rows:
        table.apply(row)
    return table


def key(length: int | None) -> str:
    return "full" if length is None else str(length)


def experts_by_label(
    table: DomainTable, held: dict[str, list[LabelledDoc]]
) -> tuple[list[DomainRecord], dict[str, str], list[GateExpert]]:
    """The active rows, the label of each domain whose label has held-out documents (it
    "has an expert"), and one expert per such domain, registered with its centroid."""
    rows = [r for r in table.rows() if r.status == "active"]
    label_of = {r.domain_id: r.label_hint for r in rows if r.label_hint in held}
    experts = [GateExpert(f"{d}-e1", d, table.get(d).centroid) for d in sorted(label_of)]
    return rows, label_of, experts


def measure(table: DomainTable, held: dict[str, list[LabelledDoc]], embedder, gate: Gate) -> dict:
    rows, label_of, experts = experts_by_label(table, held)
    labels = sorted(set(label_of.values()))  # the labels that have an expert
    docs = [(label, d) for label in labels for d in held[label]]
    out: dict = {
        "domains": len(rows),
        "domains_with_expert": len(label_of),
        "labels": len(held),
        "labels_with_expert": labels,
        "labels_without_expert": sorted(set(held) - set(labels)),
        "heldout_docs": len(docs),
    }
    everyone = DomainExperts(experts)
    for length in LENGTHS:
        texts = [d.text[:length] for _, d in docs]
        chars = [len(t) for t in texts]
        vectors = embedder.embed(texts)  # (N, dim)
        truth = [label for label, _ in docs]
        nearest = [label_of.get(table.nearest(v)[0]) for v in vectors]
        out[f"route_nearest_{key(length)}"] = float(
            np.mean([n == t for n, t in zip(nearest, truth, strict=True)])
        )
        per_label: dict[str, list[bool]] = defaultdict(list)
        for name, lens in (("", chars), ("baseline_", None)):
            decisions = gate.decide_many(vectors, table, everyone, lens)
            served = [
                label_of[d.domain_id] if d.weights else None for d in decisions
            ]  # the label of the serving expert's domain; None: the trunk alone
            right = [s == t for s, t in zip(served, truth, strict=True)]
            out[f"{name}route_recall_{key(length)}"] = float(np.mean(right))
            out[f"{name}route_wrong_{key(length)}"] = float(
                np.mean([s is not None and s != t for s, t in zip(served, truth, strict=True)])
            )
            if length == 256:
                for t, ok in zip(truth, right, strict=True):
                    per_label[f"{name}{t}"].append(ok)
        if length == 256:
            out["route_recall_256_by_label"] = {
                k: round(float(np.mean(v)), 3) for k, v in sorted(per_label.items())
            }
        # out-of-domain: each label's documents against the table without its domains
        foreign: dict[str, list[float]] = defaultdict(list)
        for label in labels:
            kept = [r for r in rows if label_of.get(r.domain_id) != label]
            others = DomainExperts(e for e in experts if label_of[e.domain_id] != label)
            mine = [i for i, t in enumerate(truth) if t == label]
            sub = subtable(kept)
            for name, lens in (("", [chars[i] for i in mine]), ("baseline_", None)):
                decisions = gate.decide_many(vectors[mine], sub, others, lens)
                foreign[name].append(float(np.mean([bool(d.weights) for d in decisions])))
        for name, shares in foreign.items():
            out[f"{name}route_foreign_{key(length)}"] = float(np.mean(shares))
    return out


def gate_cost_us(
    table: DomainTable, held: dict[str, list[LabelledDoc]], embedder, gate: Gate
) -> float:
    """CPU microseconds per request of the gate's decision over every held-out text of a
    label with an expert, whole (median of 3 runs; the embedding is not counted)."""
    _, label_of, listed = experts_by_label(table, held)
    experts = DomainExperts(listed)
    texts = [d.text for label in sorted(set(label_of.values())) for d in held[label]]
    vectors = embedder.embed(texts)
    chars = [len(t) for t in texts]
    runs = []
    for _ in range(3):
        start = time.process_time()
        gate.decide_many(vectors, table, experts, chars)
        runs.append((time.process_time() - start) / max(1, len(texts)) * 1e6)
    return round(statistics.median(runs), 1)


def curve(
    stream: Scenario, held: dict, config: RouterConfig, embedder, gate: Gate, sizes, args
) -> list[dict]:
    """The figures of :func:`measure` for nested label subsets of each size in ``sizes``."""
    order = stream.names
    random.Random(f"sizes:{args.seed}").shuffle(order)
    points = []
    for size in sizes:
        names = order[:size]
        part = Scenario({n: stream.domains[n] for n in names})
        part_held = {n: held[n] for n in names if n in held}
        table = build_table(part, config, embedder, args.per_domain, args.mixture, args.seed)
        figures = measure(table, part_held, embedder, gate)
        point = {"labels": len(names), "domains": figures["domains"]}
        point["labels_with_expert"] = len(figures["labels_with_expert"])
        for length in ("256", "full"):
            for name in ("route_recall", "route_wrong", "route_nearest"):
                point[f"{name}_{length}"] = round(figures[f"{name}_{length}"], 4)
        point["gate_us_per_request"] = gate_cost_us(table, part_held, embedder, gate)
        log.warning("routing curve %s", json.dumps(point))
        points.append(point)
    return points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", type=Path, default=None, help="labelled corpus directory (default: data/corpus)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-domain", type=int, default=600, help="docs per phase (cap)")
    parser.add_argument("--mixture", type=int, default=1000, help="docs of the final mixture")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a setting of the gate's length-aware rule, e.g. --set floor=0.5 "
        "(floor, ref_chars, power, margin)",
    )
    parser.add_argument(
        "--sizes",
        default="",
        help="comma-separated library sizes (labels) for the routing curve, e.g. 8,16,32,42",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    overrides = {}
    for item in args.set:
        field, _, value = item.partition("=")
        if field not in ("floor", "ref_chars", "power", "margin"):
            parser.error(f"unknown gate setting {field!r}: floor, ref_chars, power or margin")
        overrides[field] = float(value)
    gate = Gate(**overrides)
    config = RouterConfig()
    embedder = default_embedder(config)
    stream, held = split(Scenario.from_directory(args.corpus), config)
    result = {"corpus": str(args.corpus or "data/corpus"), "seed": args.seed}
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
        if max(sizes) > len(stream.names):
            parser.error(f"--sizes: the corpus has {len(stream.names)} labels")
        result["curve"] = curve(stream, held, config, embedder, gate, sizes, args)
    else:
        table = build_table(stream, config, embedder, args.per_domain, args.mixture, args.seed)
        result.update(measure(table, held, embedder, gate))
    result["gate"] = {k: getattr(gate, k) for k in ("floor", "ref_chars", "power", "margin")}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
