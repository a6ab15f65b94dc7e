"""Forgetting through routing as the library grows: old domains' loss while new ones arrive.

Weights never change, so what an old domain can lose is its documents: a newly promoted
neighbour's centroid comes nearer to some of them and takes them to an expert that serves
them worse. This bench replays a library growing one domain at a time and measures that
loss for every routing rule in the same run (the experts, texts and forwards are shared).

Prints ONE JSON line. The domain table is the route stage's after the corpus's phased
stream and a mixture (``bench/route_recall.py``'s ``build_table``, held-out documents
excluded); each label with a domain gets ONE expert of the trainer's default recipe on its
training documents (``bench/route_recall_experts.py``'s ``train_experts``, ``--cache``
shared with it); every domain of a label is served by that label's expert (in the loop a
split domain trains its own). Step i of the replay is the table of the first i domains in
promotion order (the final rows: centroids and thresholds as the run ended) with their
experts, as the monitor sees it after the i-th registration (``--lag L``: the table also
holds the next L domains, promoted but still waiting for their experts, as in the loop).
At each step every held-out document of a label that has a domain is routed as serving
routes it (``Gate.decide`` with its length, then :meth:`LikelihoodRouter.rerank`, the
serving path itself, on cached forwards), and its loss is the mean next-token loss of its
first ``--tokens`` tokens (the monitor's ``max_tokens``) under what serves it.

A label is old from its first domain's step on (as the monitor counts a domain old after
its own expert, or from the start for one the trunk serves). Its rise at a step is its mean
held-out loss over its lowest earlier value since it became old, minus 1; the monitor's
``max_old_domain_loss_rise`` is the largest of these. Per rule (``rules``):
``max_old_label_loss_rise`` (its label, step, newcomer and the moves of its documents;
``top_rises``: each label's largest, the six largest of them), ``old_labels_over_0_5pct``
(the labels whose rise ever passed 0.5 %), ``mean_loss_last_step`` (the labels' mean
held-out loss at the end: what the routing costs or gains overall), ``docs_taken`` (old
labels' documents that a later domain of another label serves at the end), ``route_recall_full`` /
``route_wrong_full`` at the last step.

Rules: ``gate`` (the length-aware gate alone), ``likelihood`` (the shipped likelihood step
for unsure texts, with incumbency: a newer expert takes a text only by winning it
outright, and for texts the route stage gives a domain without an expert yet),
``likelihood_not_waiting`` (the shipped step without that last part, the rule before 6
December), ``likelihood_all_at_once`` (neither incumbency nor the waiting part: every
candidate at once, the rule before both), ``likelihood_all_at_once_unmixed`` (the shipped
step without incumbency or mixing: a tie leaves the text to the route stage's decision,
the rule that meets the wrong-expert target at 256 characters, docs/experts.md) and
``contest_G`` for each gap of ``--gaps`` (the shipped step, also for texts another domain
with an expert contests within G).

Usage::

    python bench/routing_forgetting.py [--corpus DIR|many] [--cache DIR] [--gaps 0.02,0.05]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from route_recall import build_table, split, subtable  # noqa: E402
from route_recall_experts import add_library_arguments, train_experts  # noqa: E402
from tqdm import tqdm  # noqa: E402

from experts.config import ExpertsConfig  # noqa: E402
from experts.likelihood_routing import LikelihoodRouter, likelihood_router  # noqa: E402
from experts.mixture import Mixture  # noqa: E402
from experts.trunk import load_trunk  # noqa: E402
from ingest.scenario import Scenario  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.embed import default_embedder  # noqa: E402
from router.gate import DomainExperts, Gate, GateExpert  # noqa: E402
from worx import bundled  # noqa: E402

log = logging.getLogger("bench.routing_forgetting")

RISE = 0.005  # the bound on an old domain's loss rise


def expert_id(label: str, domain_id: str) -> str:
    """Each domain's expert id (the gate lists an id once); its label's expert serves it."""
    return f"{label}#{domain_id}"


def label_part(expert: str) -> str:
    return expert.partition("#")[0]


class CachedLosses:
    """A :class:`Mixture`'s ``token_losses`` for one sequence at a time, each row cached
    by (tokens, weights by label): the experts and the trunk never change, so neither does
    a row, and the domains of one label share its expert."""

    def __init__(self, mixture: Mixture) -> None:
        self.mixture, self.trunk = mixture, mixture.trunk
        self.cache: dict[tuple, torch.Tensor] = {}
        self.forwards = 0

    def token_losses(self, batch: torch.Tensor, mask, rows: list[dict]) -> tuple:
        ids = tuple(batch[0].tolist())
        keys = [(ids, tuple(sorted((label_part(e), w) for e, w in row.items()))) for row in rows]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        if todo:
            with torch.no_grad():
                losses, _ = self.mixture.token_losses(batch[todo], None, [rows[i] for i in todo])
            self.forwards += 1
            for i, row_losses in zip(todo, losses, strict=True):
                self.cache[keys[i]] = row_losses  # (T-1,)
        return torch.stack([self.cache[k] for k in keys]), None  # (B, T-1)


def served_loss(cached: CachedLosses, ids: list[int], weights: dict) -> float:
    losses, _ = cached.token_losses(torch.tensor([ids]), None, [weights])  # (1, T-1)
    return float(losses.mean())


def replay(rows, label_of, held, embedder, cached, tokenizer, rules, tokens, lag=0) -> dict:
    """Per rule: each old label's mean held-out loss at every step, and the final routing."""
    gate = Gate()
    docs = [(label, d.text) for label in sorted(held) for d in held[label]]
    vectors = embedder.embed([t for _, t in docs])  # (N, dim)
    ids = [tokenizer(t)["input_ids"][:tokens] for _, t in docs]
    first_step = {}
    for step, row in enumerate(rows):
        first_step.setdefault(row.label_hint, step)
    steps = {name: [] for name in rules}  # rule -> per step {label: mean loss}
    serving = {name: [] for name in rules}  # rule -> per step {doc: what served it}
    final = {}
    for step in tqdm(range(len(rows)), desc="registrations", unit="step", leave=False):
        table = subtable(rows[: step + 1 + lag])  # lag domains wait for their experts
        experts = DomainExperts(
            GateExpert(expert_id(label_of[r.domain_id], r.domain_id), r.domain_id, r.centroid, i)
            for i, r in enumerate(rows[: step + 1])
            if r.domain_id in label_of
        )
        present = [i for i, (label, _) in enumerate(docs) if first_step.get(label, 1e9) <= step]
        decided = gate.decide_many(
            vectors[present], table, experts, [len(docs[i][1]) for i in present]
        )
        for name, router in rules.items():
            losses: dict[str, list[float]] = {}
            served = {}
            for i, decision in zip(present, decided, strict=True):
                if router is not None and len(ids[i]) >= 2:
                    head = ids[i][: router.max_tokens]
                    decision, _ = router.rerank(
                        cached,
                        gate,
                        lambda head=head: torch.tensor([head]),
                        vectors[i],
                        table,
                        experts,
                        decision,
                    )
                served[i] = decision
                if len(ids[i]) >= 2:
                    losses.setdefault(docs[i][0], []).append(
                        served_loss(cached, ids[i], decision.weights)
                    )
            steps[name].append({label: float(np.mean(v)) for label, v in losses.items()})
            serving[name].append({i: served_by(d, label_of) for i, d in served.items()})
            final[name] = served
    return {
        "steps": steps,
        "serving": serving,
        "final": final,
        "docs": docs,
        "first_step": first_step,
    }


def served_by(decision, label_of: dict) -> str:
    """What serves a decision, by label: ``trunk``, a label, or ``mix:a+b``."""
    if not decision.weights:
        return "trunk"
    if decision.domain_id is None:
        return "mix:" + "+".join(sorted({label_part(e) for e in decision.weights}))
    return label_of.get(decision.domain_id, "trunk")


def figures(result: dict, rows, label_of, name: str) -> dict:
    """The monitor's forgetting figures of one rule over the replay."""
    per_step, first_step = result["steps"][name], result["first_step"]
    worst, over, rises = (0.0, None, None), set(), {}
    for label, start in first_step.items():
        best = None
        for step in range(start, len(per_step)):
            loss = per_step[step].get(label)
            if loss is None:
                continue
            if best is not None:
                rise = loss / best - 1
                if rise > RISE:
                    over.add(label)
                if rise > rises.get(label, (0.0,))[0]:
                    rises[label] = (rise, label, step, rows[step].label_hint)
                if rise > worst[0]:
                    worst = (rise, label, step)
            best = loss if best is None else min(best, loss)
    domain_label = {r.domain_id: r.label_hint for r in rows}
    step_of = {r.domain_id: s for s, r in enumerate(rows)}
    taken = recall = wrong = 0
    for i, decision in result["final"][name].items():
        label = result["docs"][i][0]
        domain = decision.domain_id if decision.weights else None
        served_label = label_of.get(domain) if domain else None
        recall += served_label == label
        wrong += served_label is not None and served_label != label
        if domain and domain_label[domain] != label and step_of[domain] > first_step[label]:
            taken += 1
    n = max(1, len(result["final"][name]))
    moves: Counter = Counter()
    if worst[1] is not None:
        before, after = result["serving"][name][worst[2] - 1], result["serving"][name][worst[2]]
        for i, now in after.items():
            if result["docs"][i][0] == worst[1] and before.get(i, now) != now:
                moves[f"{before[i]} -> {now}"] += 1
    return {
        "max_old_label_loss_rise": round(worst[0], 5),
        "max_rise_label": worst[1],
        "max_rise_step": worst[2],
        "max_rise_newcomer": None if worst[2] is None else rows[worst[2]].label_hint,
        "max_rise_moves": dict(moves),
        "top_rises": [  # (rise, label, step, newcomer)
            (round(r[0], 5), *r[1:]) for r in sorted(rises.values(), reverse=True)[:6]
        ],
        "old_labels_over_0_5pct": sorted(over),
        "mean_loss_last_step": round(float(np.mean(list(per_step[-1].values()))), 4),
        "docs_taken": taken,
        "route_recall_full": round(recall / n, 4),
        "route_wrong_full": round(wrong / n, 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_library_arguments(parser)
    parser.add_argument("--tokens", type=int, default=128, help="tokens scored per document")
    parser.add_argument("--heldout-per-label", type=int, default=32, help="as the monitor's")
    parser.add_argument("--gaps", default="0.02,0.05,0.1", help="contest gaps to compare")
    parser.add_argument(
        "--lag",
        type=int,
        default=0,
        help="domains promoted ahead of their experts: step i's table holds the first i + 1 "
        "+ LAG domains, its experts the first i + 1 (in the loop a domain waits for its job)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    start = time.perf_counter()
    config = RouterConfig()
    embedder = default_embedder(config)
    stream, held = split(Scenario.from_directory(args.corpus), config)
    cap = args.heldout_cap or args.heldout_per_label
    held = {label: docs[:cap] for label, docs in held.items()}
    trunk = load_trunk(args.trunk or bundled.trunk_dir())
    table = build_table(stream, config, embedder, args.per_domain, args.mixture, args.seed)
    rows = sorted(
        (r for r in table.rows() if r.status == "active"), key=lambda r: (r.created_ms, r.domain_id)
    )
    labels = sorted({r.label_hint for r in rows} & set(held))
    trained, outcomes = train_experts(
        trunk, stream, labels, args.steps, args.train_docs, args.cache
    )
    label_of = {r.domain_id: r.label_hint for r in rows if r.label_hint in trained}
    held = {label: held[label] for label in labels}
    by_domain = {expert_id(label, d): trained[label] for d, label in label_of.items()}
    cached = CachedLosses(Mixture(trunk, by_domain))
    shipped = likelihood_router(ExpertsConfig())  # the defaults, as serving builds them
    rules: dict[str, LikelihoodRouter | None] = {
        "gate": None,
        "likelihood_all_at_once": replace(shipped, incumbent=False, contest_waiting=False),
        "likelihood_not_waiting": replace(shipped, contest_waiting=False),
        "likelihood": shipped,
        "likelihood_all_at_once_unmixed": replace(
            shipped, incumbent=False, mix_margin=float("inf")
        ),
    }
    for gap in [float(g) for g in args.gaps.split(",") if g]:
        rules[f"contest_{gap:g}"] = replace(shipped, contest_gap=gap)
    result = replay(
        rows, label_of, held, embedder, cached, trunk.tokenizer, rules, args.tokens, args.lag
    )
    line = {
        "bench": "routing_forgetting",
        "corpus": str(args.corpus or "data/corpus"),
        "seed": args.seed,
        "domains": len(rows),
        "labels": len(labels),
        "labels_with_expert": len(trained),
        "experts_not_worth_it": sorted(k for k, v in outcomes.items() if v != "finished"),
        "heldout_docs": len(result["docs"]),
        "tokens": args.tokens,
        "lag": args.lag,
        "likelihood_defaults": asdict(shipped),
        "rules": {name: figures(result, rows, label_of, name) for name in rules},
        "forwards": cached.forwards,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
