"""Routing recall at serve time with real trained experts: the gate alone vs. the gate plus
likelihood re-ranking (experts/likelihood_routing.py).

Prints ONE JSON line. The domain table is built as in ``bench/route_recall.py`` (the real
route + discover stages over the corpus minus its held-out documents). Then every label
that has a discovered domain gets ONE expert, trained with the trainer's default recipe
(:func:`trainer.recipes.expert.train_expert`, ``TrainerConfig(max_steps=30, grad_accum_steps=1,
progress=False, device="cpu")``, default kind ``vocab_adapter``) on that label's
*training* documents of the same split (never the held-out ones; the recipe sets its own
evaluation rows aside from them). An expert the recipe finds "not worth it" is not
registered (its domains stay on the trunk, as in the pipeline); each domain of a label is
served by that label's expert.

Each held-out document of a label with an expert, cut to N characters (128, 256, 512)
and whole, is routed three ways, in the same run:

* ``baseline_*``: the route stage's rule alone (``Gate.decide`` without ``chars``);
* ``embed_*``: the gate with each text's length (the length-aware rule), what serving did
  before the likelihood step;
* ours (no prefix): the length-aware rule, then the likelihood step
  (:class:`experts.likelihood_routing.LikelihoodRouter`) for texts the route stage's
  rule leaves unsure.

Keys: ``route_recall_N`` (served by its own label's expert alone), ``route_wrong_N`` (by
another label's expert, or by a mix of tied experts without its own label's),
``route_mixed_with_own_N`` (by a mix of tied experts that includes its own label's: the
likelihood step's mixing, neither right nor wrong), ``route_foreign_N`` (each label's
documents against the table and experts without that label's; share served by any
expert, mean over labels), ``reranked_N`` (share of texts the likelihood step scored).
The loss of every text under the trunk and under every expert is computed once, so
``--grid FILE`` writes the same figures for a grid of settings (candidates x margin x
separation x max_tokens x contest_gap x incumbent) without another forward; the JSON line
reports the one chosen (``--set``, else the router's defaults). ``likelihood_ms`` is the
measured extra forward of one re-ranked request (1 + candidates rows), beside
``score_ms``, a request's own scoring forward (one row of the same text).

``--dump FILE`` writes what the rules see (every text's similarities and mean head losses
at 32 and 64 tokens); ``--scores FILE`` reads such a dump back in place of the forwards
(the same corpus, seed and experts: checked by labels and texts), so a rule or a setting is
measured again in seconds (``max_tokens`` 32 or 64 only; the cost figures still run).

``--sizes 8,16,32,42`` measures the same as the library grows (``curve``): for each size
K, the first K labels of one seeded order (each size holds the smaller ones, as
``bench/route_recall.py --sizes``), their own table from their own phased stream, their
experts (each label's trained once, reused by every size), and per K the domains with an
expert, recall and wrong-expert rate at 256 characters and whole (gate alone and with the
likelihood step), the share re-ranked, and the milliseconds per request
(``likelihood_ms``: the re-ranking forward of a re-ranked request; ``score_ms``: the
request's own scoring forward; ``gate_us_per_request``: the gate's CPU time).

Usage::

    python bench/route_recall_experts.py [--corpus DIR] [--set margin=0.5] [--grid FILE]
        [--cache DIR]   # trained experts kept there and reused on the next run
        [--sizes 8,16,32,42]
        [--dump FILE | --scores FILE]   # write the per-text scores / replay them
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from route_recall import build_table, gate_cost_us, key, split, subtable  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from experts.expert import Expert, ExpertConfig  # noqa: E402
from experts.likelihood_routing import LikelihoodRouter, tied  # noqa: E402
from experts.mixture import Mixture  # noqa: E402
from experts.trunk import load_trunk  # noqa: E402
from ingest.scenario import Scenario  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.embed import default_embedder  # noqa: E402
from router.gate import DomainExperts, Gate, GateExpert  # noqa: E402
from trainer.config import TrainerConfig  # noqa: E402
from trainer.recipes.expert import train_expert  # noqa: E402
from worx import bundled  # noqa: E402

log = logging.getLogger("bench.route_recall_experts")

SCORED_TOKENS = 64  # per-token losses kept per text; any max_tokens <= this is exact
LENGTHS: tuple[int | None, ...] = (256, None)  # None: the whole document
TRUNK_DOCS = 60  # held-out docs per label the trunk serves (no expert), for trunk_served_N
GRID = {
    "candidates": (3, 5, 8),
    "margin": (0.25, 0.5, 1.0, 2.0),
    "separation": (0.0, 0.25, 0.5, 0.6, 0.75, 1.0, 1.25),
    "max_tokens": (32, 64),
    "contest_gap": (0.0, 0.02, 0.05, 0.1, float("inf")),
    "incumbent": (True, False),
}
SETTINGS = (*GRID, "mix_margin")  # --set FIELD=VALUE; the grid keeps the default mix_margin


def recipe_config(steps: int) -> TrainerConfig:
    return TrainerConfig(max_steps=steps, grad_accum_steps=1, progress=False, device="cpu")


def train_experts(trunk, stream: Scenario, labels, steps: int, docs: int, cache: Path | None):
    """``label -> Expert`` (only those the recipe found worth it) and ``label -> outcome``."""
    experts, outcomes = {}, {}
    for label in labels:
        texts = [d.text for d in stream.domains[label][:docs]]
        digest = hashlib.sha256(json.dumps([trunk.fingerprint, steps, texts]).encode()).hexdigest()[
            :16
        ]
        path = None if cache is None else cache / f"{label}-{digest}"
        if path is not None and (path / "outcome.json").exists():
            meta = json.loads((path / "outcome.json").read_text())
            config = ExpertConfig.from_dict(meta["config"])
            tensors = load_file(str(path / "weights.safetensors"))
            expert = Expert.from_tensors(config, meta["hidden_size"], tensors)
            outcome = meta["outcome"]
        else:
            start = time.perf_counter()
            result = train_expert(trunk, texts, [], recipe_config(steps))
            expert, outcome = result.expert, result.outcome
            log.warning(
                "%s: %s in %.0f s %s", label, outcome, time.perf_counter() - start, result.figures
            )
            if path is not None:
                path.mkdir(parents=True, exist_ok=True)
                save_file(expert.tensors(), str(path / "weights.safetensors"))
                meta = {
                    "config": expert.config.to_dict(),
                    "hidden_size": expert.hidden_size,
                    "outcome": outcome,
                }
                (path / "outcome.json").write_text(json.dumps(meta))
        outcomes[label] = outcome
        if outcome == "finished":
            experts[label] = expert
    return experts, outcomes


def gate_expert(table, domain_id: str) -> GateExpert:
    """The domain's one expert (id = the domain's), registered when the domain was promoted."""
    row = table.get(domain_id)
    return GateExpert(domain_id, domain_id, row.centroid, row.created_ms)


def losses_per_text(trunk, mixture: Mixture, texts, labels) -> np.ndarray:
    """``(N, 1 + L, SCORED_TOKENS - 1)`` per-token losses of each text's head under the
    trunk (row 0) and each label's expert (rows 1..L); NaN past a text's end."""
    out = np.full((len(texts), 1 + len(labels), SCORED_TOKENS - 1), np.nan, np.float32)
    rows = [{}] + [{label: 1.0} for label in labels]
    for i, text in enumerate(texts):
        ids = trunk.tokenizer(text)["input_ids"][:SCORED_TOKENS]
        if len(ids) < 2:
            continue
        batch = torch.tensor([ids]).expand(len(rows), -1)  # (1 + L, T)
        with torch.no_grad():
            losses, _ = mixture.token_losses(batch, None, rows)  # (1 + L, T-1)
        out[i, :, : losses.shape[1]] = losses.numpy()
    return out


def read_scores(path: Path) -> dict[str, tuple[dict, list[dict]]]:
    """A ``--dump`` file: per length key, its header and one record per text."""
    blocks: dict[str, tuple[dict, list[dict]]] = {}
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            if "length" in record:
                blocks[record["length"]] = (record, [])
            else:
                blocks[next(reversed(blocks))][1].append(record)
    return blocks


def replayed_losses(block: tuple[dict, list[dict]], truth: list[str], labels) -> np.ndarray:
    """:func:`losses_per_text`'s array rebuilt from a dump's mean head losses (one per
    ``GRID["max_tokens"]``, the short and the full head): the first ``short - 1`` columns
    hold the short mean and the rest what makes the mean of all ``SCORED_TOKENS - 1`` the
    full one, so a ``max_tokens`` of either sees exactly the dumped figure."""
    header, records = block
    if header["labels"] != list(labels) or [r["label"] for r in records] != truth:
        raise SystemExit("--scores: the dump is of other labels or texts (corpus, seed, experts)")
    cut, width = GRID["max_tokens"][0] - 1, SCORED_TOKENS - 1  # columns of each mean
    out = np.full((len(records), 1 + len(labels), width), np.nan, np.float32)
    for i, record in enumerate(records):
        means = record["mean_loss"]  # {"32": (1 + L,), "64": (1 + L,)}; {} below 2 tokens
        if not means:
            continue
        short, full = (np.asarray(means[str(t)], np.float64) for t in GRID["max_tokens"])
        out[i, :, :cut] = short[:, None]
        out[i, :, cut:] = ((width * full - cut * short) / (width - cut))[:, None]
    return out


def reroute(router, gate, vector, table, experts, decision, losses, column) -> tuple:
    """``(domain served or None, re-ranked?)``: the likelihood step on cached losses,
    exactly as :meth:`LikelihoodRouter.rerank` decides (same candidates, same rule)."""
    names = router.candidate_domains(vector, table, experts, decision)
    head = losses[:, : router.max_tokens - 1]  # (1 + L, t)
    if not names or np.isnan(head[0, 0]):
        return (decision.domain_id if decision.weights else None), False
    mean = np.nanmean(head, axis=1)  # (1 + L,)
    scored = {d: float(mean[column[d]]) for d in names}
    chosen = router.choose(decision.domain_id, float(mean[0]), scored, experts)
    if chosen is None and decision.domain_id is None:
        mix = tied(float(mean[0]), scored, router.mix_margin, router.separation, router.mix_top)
        if mix:
            return frozenset(mix), True  # served by the mix of these domains' experts
    served = chosen if (chosen != decision.domain_id or decision.weights) else None
    return served, True


def measure(
    trunk, table, held, embedder, gate, experts_by_label, routers, dump=None, scores=None
) -> dict:
    rows = [r for r in table.rows() if r.status == "active"]
    label_of = {r.domain_id: r.label_hint for r in rows if r.label_hint in experts_by_label}
    labels = sorted(set(label_of.values()))
    # labels with a domain whose expert was not worth it: the trunk serves them
    trunk_labels = sorted({r.label_hint for r in rows if r.label_hint in held} - set(labels))
    # registered in promotion order: the likelihood step's incumbency follows it
    gate_experts = [gate_expert(table, d) for d in sorted(label_of)]
    everyone = DomainExperts(gate_experts)
    column = {d: 1 + labels.index(label_of[d]) for d in label_of}  # domain -> loss row
    mixture = Mixture(trunk, {label: experts_by_label[label] for label in labels})
    docs = [(label, d) for label in labels for d in held[label]]
    n = len(docs)  # docs[:n]: labels with an expert; docs[n:]: labels the trunk serves
    docs += [(label, d) for label in trunk_labels for d in held[label][:TRUNK_DOCS]]
    truth = [label for label, _ in docs]
    figures: dict = {name: {} for name in routers}
    base: dict = {
        "heldout_docs": n,
        "labels_with_expert": labels,
        "labels_trunk_served": trunk_labels,
    }

    def served_label(domain):
        if isinstance(domain, frozenset):  # a mix: the labels of its domains
            return frozenset(label_of[d] for d in domain)
        return None if domain is None else label_of[domain]

    def report(out: dict, prefix: str, k: str, served: list) -> None:
        out[f"{prefix}route_recall_{k}"] = _share(served[:n], truth[:n], right=True)
        out[f"{prefix}route_wrong_{k}"] = _share(served[:n], truth[:n], right=False)
        pairs = zip(served[:n], truth[:n], strict=True)
        mixed = [isinstance(s, frozenset) and t in s for s, t in pairs]
        out[f"{prefix}route_mixed_with_own_{k}"] = float(np.mean(mixed))
        if len(docs) > n:
            out[f"{prefix}trunk_served_{k}"] = float(np.mean([s is None for s in served[n:]]))
        if k == "256":
            own = [s == t for s, t in zip(served[:n], truth[:n], strict=True)]
            out[f"{prefix}route_recall_256_by_label"] = {
                label: round(
                    float(np.mean([o for o, t in zip(own, truth, strict=False) if t == label])), 3
                )
                for label in labels
            }

    for length in LENGTHS:
        k = key(length)
        texts = [d.text[:length] for _, d in docs]
        vectors = embedder.embed(texts)  # (N, dim)
        start = time.perf_counter()
        if scores is None:
            losses = losses_per_text(trunk, mixture, texts, labels)  # (N, 1 + L, S)
        else:
            losses = replayed_losses(scores[k], truth, labels)
        log.warning(
            "length %s: losses of %d texts in %.0f s", k, len(texts), time.perf_counter() - start
        )
        if dump is not None:  # everything the rules see, for analysis without a forward
            ids, sims, thresholds, cohesions, _ = table.scores(vectors[0])
            dump.write(
                json.dumps(
                    {
                        "length": k,
                        "domains": ids,
                        "labels": labels,
                        "thresholds": thresholds.tolist(),
                        "cohesions": cohesions.tolist(),
                        "label_of": label_of,
                        "n_with_expert": n,
                    }
                )
                + "\n"
            )
            for i, text in enumerate(texts):
                means = {
                    t: np.nanmean(losses[i][:, : t - 1], axis=1).round(4).tolist()
                    for t in GRID["max_tokens"]
                    if not np.isnan(losses[i][0, 0])
                }
                dump.write(
                    json.dumps(
                        {
                            "label": truth[i],
                            "chars": len(text),
                            "sims": table.scores(vectors[i])[1].round(5).tolist(),
                            "mean_loss": means,
                        }
                    )
                    + "\n"
                )
            dump.flush()
        embed = gate.decide_many(vectors, table, everyone, [len(t) for t in texts])
        route = gate.decide_many(vectors, table, everyone)
        for prefix, decisions in (("baseline_", route), ("embed_", embed)):
            report(
                base,
                prefix,
                k,
                [served_label(d.domain_id) if d.weights else None for d in decisions],
            )
        for name, router in routers.items():
            outcome = [
                reroute(router, gate, v, table, everyone, d, loss, column)
                for v, d, loss in zip(vectors, embed, losses, strict=True)
            ]
            report(figures[name], "", k, [served_label(s) for s, _ in outcome])
            figures[name][f"reranked_{k}"] = float(np.mean([r for _, r in outcome[:n]]))
        # out-of-domain: each label's documents against the table and experts without it
        foreign: dict[str, list[float]] = defaultdict(list)
        for label in labels:
            sub = subtable([r for r in rows if label_of.get(r.domain_id) != label])
            others = DomainExperts(e for e in gate_experts if label_of[e.domain_id] != label)
            mine = [i for i, t in enumerate(truth[:n]) if t == label]
            lens = [len(texts[i]) for i in mine]
            sub_embed = gate.decide_many(vectors[mine], sub, others, lens)
            sub_route = gate.decide_many(vectors[mine], sub, others)
            foreign["baseline_"].append(float(np.mean([bool(d.weights) for d in sub_route])))
            foreign["embed_"].append(float(np.mean([bool(d.weights) for d in sub_embed])))
            for name, router in routers.items():
                served = [
                    reroute(router, gate, vectors[i], sub, others, d, losses[i], column)[0]
                    for i, d in zip(mine, sub_embed, strict=True)
                ]
                foreign[name].append(float(np.mean([s is not None for s in served])))
        for prefix in ("baseline_", "embed_"):
            base[f"{prefix}route_foreign_{k}"] = float(np.mean(foreign[prefix]))
        for name in routers:
            figures[name][f"route_foreign_{k}"] = float(np.mean(foreign[name]))
    return {"base": base, "figures": figures}


def _share(served, truth, right: bool) -> float:
    """Right: served by its own label's expert alone. Wrong: by another label's expert, or
    by a mix without its own label's (a mix with it is neither: ``route_mixed_with_own``)."""
    if right:
        return float(np.mean([s == t for s, t in zip(served, truth, strict=True)]))

    def wrong(s, t) -> bool:
        if isinstance(s, frozenset):
            return t not in s
        return s is not None and s != t

    return float(np.mean([wrong(s, t) for s, t in zip(served, truth, strict=True)]))


def cost(trunk, embedder, gate, table, held, experts_by_label, router, count: int = 60) -> dict:
    """Milliseconds of the likelihood step's forward (1 + candidates rows) per re-ranked
    256-character request, beside one scoring forward (1 row) of the same text; and whether
    :meth:`LikelihoodRouter.rerank` (the serving path) decides as the cached evaluation."""
    rows = [r for r in table.rows() if r.status == "active"]
    label_of = {r.domain_id: r.label_hint for r in rows if r.label_hint in experts_by_label}
    labels = sorted(set(label_of.values()))
    column = {d: 1 + labels.index(label_of[d]) for d in label_of}
    everyone = DomainExperts(gate_expert(table, d) for d in sorted(label_of))
    mixture = Mixture(trunk, {d: experts_by_label[label] for d, label in label_of.items()})
    by_label = Mixture(trunk, {label: experts_by_label[label] for label in labels})
    texts = [d.text[:256] for label in labels for d in held[label]]
    texts = texts[:: max(1, len(texts) // (count * 3))]  # spread over the labels
    rerank_ms, score_ms, agree = [], [], []
    for text in texts:
        vector = embedder.embed([text])[0]
        decision = gate.decide(vector, table, everyone, chars=len(text))
        ids = torch.tensor([trunk.tokenizer(text)["input_ids"][: router.max_tokens]])
        if ids.shape[1] < 2 or not router.candidate_domains(vector, table, everyone, decision):
            continue
        start = time.perf_counter()
        served, _ = router.rerank(
            mixture, gate, lambda ids=ids: ids, vector, table, everyone, decision
        )
        rerank_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        with torch.no_grad():
            mixture.token_losses(ids, None, [served.weights])
        score_ms.append((time.perf_counter() - start) * 1000)
        losses = losses_per_text(trunk, by_label, [text], labels)[0]
        cached, _ = reroute(router, gate, vector, table, everyone, decision, losses, column)
        if served.domain_id is None and served.weights:  # a mix (expert id = domain id here)
            agree.append(cached == frozenset(served.weights))
        else:
            agree.append(cached == (served.domain_id if served.weights else None))
        if len(rerank_ms) == count:
            break
    return {
        "likelihood_ms": round(float(np.median(rerank_ms)), 2) if rerank_ms else None,
        "score_ms": round(float(np.median(score_ms)), 2) if score_ms else None,
        "cost_requests": len(rerank_ms),
        "serving_path_agrees": float(np.mean(agree)) if agree else None,
    }


def add_library_arguments(parser: argparse.ArgumentParser) -> None:
    """The corpus, the table's stream and the experts' recipe (shared by the benches that
    train one expert per label: this one and ``bench/routing_forgetting.py``)."""
    parser.add_argument("--corpus", type=Path, default=None, help="default: data/corpus")
    parser.add_argument("--trunk", type=Path, default=None, help="default: the bundled trunk")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-domain", type=int, default=600, help="docs per phase (cap)")
    parser.add_argument("--mixture", type=int, default=1000, help="docs of the final mixture")
    parser.add_argument("--steps", type=int, default=30, help="recipe steps per expert")
    parser.add_argument("--train-docs", type=int, default=300, help="training docs per label")
    parser.add_argument(
        "--heldout-cap", type=int, default=0, help="held-out docs per label (0: all; smoke)"
    )
    parser.add_argument("--cache", type=Path, default=None, help="keep/reuse trained experts")


CURVE_KEYS = ("route_recall", "route_wrong", "route_mixed_with_own", "reranked")


def curve(stream: Scenario, held: dict, config: RouterConfig, embedder, trunk, router, args):
    """Per size K in ``args.sizes``: the first K labels of one seeded order, their own table
    and experts, and what :func:`measure` and :func:`cost` find (see the module's doc)."""
    order = stream.names
    random.Random(f"sizes:{args.seed}").shuffle(order)  # the order bench/route_recall.py uses
    gate, trained, outcomes, points = Gate(), {}, {}, []
    for size in [int(s) for s in args.sizes.split(",")]:
        names = order[:size]
        part = Scenario({n: stream.domains[n] for n in names})
        part_held = {n: held[n] for n in names if n in held}
        table = build_table(part, config, embedder, args.per_domain, args.mixture, args.seed)
        labels = sorted({r.label_hint for r in table.rows() if r.status == "active"} & set(held))
        new = [label for label in labels if label not in outcomes]
        more, more_outcomes = train_experts(
            trunk, stream, new, args.steps, args.train_docs, args.cache
        )
        trained.update(more)
        outcomes.update(more_outcomes)
        experts = {label: trained[label] for label in labels if label in trained}
        figures = measure(trunk, table, part_held, embedder, gate, experts, {"ours": router})
        ours, base = figures["figures"]["ours"], figures["base"]
        rows = [r for r in table.rows() if r.status == "active"]
        point = {
            "labels": size,
            "domains": len(rows),
            "domains_with_expert": sum(1 for r in rows if r.label_hint in experts),
            "labels_with_expert": len(base["labels_with_expert"]),
        }
        for length in ("256", "full"):
            for name in CURVE_KEYS:
                point[f"{name}_{length}"] = round(ours[f"{name}_{length}"], 4)
            for name in ("route_recall", "route_wrong"):
                point[f"embed_{name}_{length}"] = round(base[f"embed_{name}_{length}"], 4)
        point.update(cost(trunk, embedder, gate, table, part_held, experts, router))
        point["gate_us_per_request"] = gate_cost_us(table, part_held, embedder, gate)
        log.warning("routing curve %s", json.dumps(point))
        points.append(point)
    return points, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_library_arguments(parser)
    parser.add_argument("--grid", type=Path, default=None, help="write the settings grid here")
    parser.add_argument("--dump", type=Path, default=None, help="write per-text scores here")
    parser.add_argument(
        "--scores", type=Path, default=None, help="replay a --dump file instead of the forwards"
    )
    parser.add_argument(
        "--sizes",
        default="",
        help="comma-separated library sizes (labels) for the routing curve, e.g. 8,16,32,42",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a setting of the likelihood step (candidates, margin, separation, max_tokens, "
        "mix_margin, contest_gap)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.scores is not None and (args.dump is not None or args.sizes):
        parser.error("--scores replays one table's dump: not with --dump or --sizes")
    chosen = {}
    for item in args.set:
        field, _, value = item.partition("=")
        if field not in SETTINGS:
            parser.error(f"unknown setting {field!r}: one of {sorted(SETTINGS)}")
        if field == "incumbent":
            chosen[field] = value.lower() in ("1", "true", "yes")
        else:
            chosen[field] = int(value) if field in ("candidates", "max_tokens") else float(value)
    shipped = LikelihoodRouter(**chosen)
    if args.scores is not None and shipped.max_tokens not in GRID["max_tokens"]:
        parser.error(f"--scores: a dump holds max_tokens {GRID['max_tokens']} only")
    routers = {"ours": shipped}
    if args.grid is not None:
        for c, m, s, t, g, i in itertools.product(*GRID.values()):
            routers[f"c{c}_m{m}_s{s}_t{t}_g{g}_i{int(i)}"] = LikelihoodRouter(
                c, m, s, t, contest_gap=g, incumbent=i
            )

    config = RouterConfig()
    embedder = default_embedder(config)
    stream, held = split(Scenario.from_directory(args.corpus), config)
    if args.heldout_cap:
        held = {label: docs[: args.heldout_cap] for label, docs in held.items()}
    trunk = load_trunk(args.trunk or bundled.trunk_dir())
    if args.sizes:
        if max(int(s) for s in args.sizes.split(",")) > len(stream.names):
            parser.error(f"--sizes: the corpus has {len(stream.names)} labels")
        points, outcomes = curve(stream, held, config, embedder, trunk, shipped, args)
        line = {
            "corpus": str(args.corpus or "data/corpus"),
            "seed": args.seed,
            "steps": args.steps,
            "experts_not_worth_it": sorted(k for k, v in outcomes.items() if v != "finished"),
            "curve": points,
            "likelihood": {k: getattr(shipped, k) for k in SETTINGS},
            "torch_threads": torch.get_num_threads(),
        }
        print(json.dumps(line))
        return 0
    table = build_table(stream, config, embedder, args.per_domain, args.mixture, args.seed)
    labels = sorted({r.label_hint for r in table.rows() if r.status == "active"} & set(held))
    experts, outcomes = train_experts(
        trunk, stream, labels, args.steps, args.train_docs, args.cache
    )
    gate = Gate()
    dump = None if args.dump is None else args.dump.open("w")
    try:
        scores = None if args.scores is None else read_scores(args.scores)
        result = measure(trunk, table, held, embedder, gate, experts, routers, dump, scores)
    finally:
        if dump is not None:
            dump.close()
    line = {
        "corpus": str(args.corpus or "data/corpus"),
        "seed": args.seed,
        "steps": args.steps,
        "domains": len([r for r in table.rows() if r.status == "active"]),
        "experts_not_worth_it": sorted(k for k, v in outcomes.items() if v != "finished"),
        **result["figures"]["ours"],
        **result["base"],
        "likelihood": {k: getattr(shipped, k) for k in SETTINGS},
        **cost(trunk, embedder, gate, table, held, experts, shipped),
        "torch_threads": torch.get_num_threads(),
    }
    if args.grid is not None:
        grid = {k: v for k, v in result["figures"].items() if k != "ours"}
        args.grid.write_text(json.dumps(grid, indent=1, sort_keys=True))
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
