"""Benchmark: the monitor's CPU per registration as the library grows (issue 26, item 4).

One run registers ``--domains`` (40) tiny experts one after another, each for a new domain
of the 40-domain corpus (data/corpus_many), with two evaluators side by side, registration by
registration: the incremental one ([monitor] defaults: only documents whose routing or
experts changed are scored, every expert re-verified every 10 registrations) and the full
re-score (``incremental = false``, ``verify_every = 1``: what every registration cost
before). Before registration k, domain k's row enters the domain table (as discover
promotes it) and ``--heldout`` of its documents enter the held-out sets; documents are
routed by the router's default embedder, the serving gate and the likelihood step, all
with their default settings. With ``--dense`` the dense baseline takes the same steps
(30 optimizer steps of 4 x 64 tokens each, then every domain's held-out set).

Each evaluation's process CPU seconds (``time.process_time``, what ``EvalRow.cpu_s``
records) is read from the rows; the figures at N are the median of registrations N-2..N
(one scheduled full check of every expert falls in some windows). ``max_loss_diff`` is
the largest difference between the two evaluators' published losses (nats/token), a
check that both measured the same thing. Prints ONE JSON line. The trunk is tiny (2
layers of width 32), so this measures the monitor's own work, not a real trunk's forward.

Usage::

    python bench/monitor_cost.py                    # ~3 min on 2 busy cores, with --dense
    python bench/monitor_cost.py --no-dense --domains 12   # a quick look
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from experts.config import ExpertsConfig  # noqa: E402
from experts.expert import Expert, ExpertConfig  # noqa: E402
from experts.likelihood_routing import likelihood_router  # noqa: E402
from experts.store import ExpertStore  # noqa: E402
from experts.testing import build_tiny_trunk  # noqa: E402
from experts.trunk import Trunk, load_trunk  # noqa: E402
from monitor.baseline import DenseBaseline  # noqa: E402
from monitor.evaluator import Evaluator  # noqa: E402
from monitor.heldout import HeldoutSets  # noqa: E402
from monitor.history import MatrixHistory  # noqa: E402
from monitor.routing import GateRouter  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.embedders import default_embedder  # noqa: E402
from router.gate import Gate  # noqa: E402
from router.promotion import Promotion  # noqa: E402
from router.records import DomainRecord  # noqa: E402
from router.table import DomainTable  # noqa: E402
from trainer.recipes.dense import DenseConfig  # noqa: E402
from worx.bundled import corpus_files, file_domain, read_lines  # noqa: E402

DEFAULT_CORPUS = REPO / "data" / "corpus_many"  # the 40-domain corpus
AT = (7, 40)  # the library sizes compared


def domain_docs(corpus: Path, domain: str, count: int) -> list[tuple[str, str]]:
    out = []
    for line in read_lines(corpus, domains=[domain]):
        out.append((f"{domain}-{len(out)}", line.text))
        if len(out) == count:
            break
    return out


def domain_row(embedder, domain: str, texts: list[str]) -> DomainRecord:
    """The row discover would promote for these documents (centroid, learned thresholds)."""
    config = RouterConfig()
    vectors = embedder.embed(texts)  # (n, dim)
    centroid = vectors.mean(axis=0)
    centroid = centroid / float(np.linalg.norm(centroid))
    sims = (vectors @ centroid).astype(np.float64)  # (n,)
    threshold = Promotion(config).threshold(sims)
    core = max(float(sims.mean() - config.uncertain_std * sims.std()), threshold)
    return DomainRecord(
        domain_id=domain,
        centroid=[round(float(x), 7) for x in centroid],
        threshold=round(threshold, 6),
        size=len(texts),
        cohesion=round(float(sims.mean()), 6),
        label_hint=domain,
        core_threshold=round(core, 6),
    )


def tiny_expert(trunk: Trunk, seed: int) -> Expert:
    torch.manual_seed(seed)
    expert = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=16), trunk.hidden_size)
    with torch.no_grad():
        for param in expert.parameters():
            param.mul_(0.05)
    return expert.requires_grad_(False)


def evaluator(root: Path, trunk: Trunk, table: DomainTable, embedder, incremental: bool):
    e = ExpertsConfig()
    heldout = HeldoutSets(root / "heldout", capacity=64, seed=0)
    router = GateRouter(embedder, Gate(e.gate_top_k, e.gate_temperature), table)
    ev = Evaluator(
        trunk,
        ExpertStore(root.parent / "store", trunk.fingerprint),
        heldout,
        MatrixHistory(root / "monitor"),
        router,
        domains_wait_s=0.0,
        incremental=incremental,
        verify_every=10 if incremental else 1,
    )
    router.use_likelihood(likelihood_router(e), ev.likelihood_mixture, trunk.tokenizer)
    return ev


def at(costs: list[float], n: int) -> float | None:
    window = costs[max(0, n - 3) : n]
    return round(statistics.median(window), 4) if len(costs) >= n else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--domains", type=int, default=max(AT))
    parser.add_argument("--heldout", type=int, default=16, help="held-out documents per domain")
    parser.add_argument("--dense", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    domains = sorted(file_domain(p) for p in corpus_files(args.corpus))[: args.domains]
    if len(domains) < args.domains:
        sys.exit(f"{args.corpus} has {len(domains)} domains, {args.domains} asked for")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="monitor-cost-") as tmp:
        root = Path(tmp)
        trunk_dir = build_tiny_trunk(root / "trunk", layers=2, width=32, vocab_size=400)
        trunk = load_trunk(trunk_dir)
        embedder = default_embedder()
        table = DomainTable()
        store = ExpertStore(root / "store", trunk.fingerprint)
        runs = {
            "incremental": evaluator(root / "inc", trunk, table, embedder, True),
            "full": evaluator(root / "full", trunk, table, embedder, False),
        }
        dense = None
        if args.dense:
            config = DenseConfig(
                steps=30, seq_len=64, micro_batch_size=4, grad_accum_steps=1, progress=False
            )
            dense_heldout = runs["full"].heldout  # the same sets (read only)
            dense = DenseBaseline(
                trunk_dir, dense_heldout, MatrixHistory(root / "dense"), root / "dense", config
            )
        for k, domain in enumerate(domains):
            docs = domain_docs(args.corpus, domain, args.heldout + 40)
            heldout, train = docs[: args.heldout], [t for _, t in docs[args.heldout :]]
            row = domain_row(embedder, domain, train)
            table.apply(row)
            eid = f"{domain}-e1"
            store.put(eid, tiny_expert(trunk, k), domain, row.centroid)
            for ev in runs.values():
                ev.heldout.offer_many(domain, heldout)
                ev.on_registration(eid, domain, row.centroid)
            if dense is not None:
                dense.step(eid, domain, train)
        rows = {name: ev.history.rows("ours") for name, ev in runs.items()}
        costs = {n: [r.cpu_s for r in rs if r.arrived_expert] for n, rs in rows.items()}
        scored = {n: [r.docs_scored for r in rs if r.arrived_expert] for n, rs in rows.items()}
        diff = max(
            abs(a.loss[d] - b.loss[d])
            for a, b in zip(rows["incremental"], rows["full"], strict=True)
            for d in a.loss
        )
        out = {
            "bench": "monitor_cost",
            "domains": args.domains,
            "heldout_per_domain": args.heldout,
            "cpu_s_per_registration": {
                name: {str(n): at(c, n) for n in AT} for name, c in costs.items()
            },
            "docs_scored_per_registration": {
                name: {str(n): s[n - 1] if len(s) >= n else None for n in AT}
                for name, s in scored.items()
            },
            "cpu_s_total": {name: round(sum(c), 2) for name, c in costs.items()},
            "max_loss_diff": diff,
        }
        inc = out["cpu_s_per_registration"]["incremental"]
        full = out["cpu_s_per_registration"]["full"]
        if inc["40"] and inc["7"]:
            out["incremental_40_over_7"] = round(inc["40"] / inc["7"], 2)
            out["full_40_over_7"] = round(full["40"] / full["7"], 2)
        if dense is not None:
            dense_costs = [
                r.cpu_s for r in dense.history.rows("dense_baseline") if r.arrived_expert
            ]
            out["dense_cpu_s_per_registration"] = {str(n): at(dense_costs, n) for n in AT}
    out["wall_s"] = round(time.monotonic() - started, 1)
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
