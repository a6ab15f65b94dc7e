"""The incremental evaluator publishes exactly what a full re-score publishes.

Two evaluators follow one run side by side, each on its own copy of the held-out sets and
history, with the same trunk, store, embedder and domain table: one re-scores every
document of every domain at every step and verifies every expert each time (the monitor
before monitor/loss_cache.py), the other scores only documents whose (text, routing,
experts' sha256) it has not measured. The run has what can change a document's loss:
each registration's own domain, domains promoted between registrations that take other
domains' documents, the likelihood step re-ranking (and mixing) unsure short documents,
a held-out set growing (back-fill of every earlier row) and an on-demand re-evaluation.
Every published figure must agree: routings exactly, numbers to 1e-6 (relative for numbers
above 1, e.g. perplexities): a document scored in another batch may differ in its last bits
(float summation order), ~5e-8 nats here.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from experts.likelihood_routing import LikelihoodRouter
from experts.store import ExpertStore
from experts.testing import build_tiny_trunk
from experts.trunk import load_trunk
from monitor.evaluator import Evaluator
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from monitor.records import EvalRow
from monitor.routing import GateRouter
from router.gate import Gate
from router.table import DomainTable
from tests.support.experts import domain_record
from tests.support.smallrun import TrigramEmbedder, corpus_docs, train_expert

# registration order; "news" never gets an expert (the trunk serves it)
EXPERTS = ("python_code", "legal", "tech_docs", "scripture", "biomedical", "fiction_austen")
FIRST_TABLE = ("python_code", "legal", "news")  # rows before any registration
TOL = 1e-6
COST_FIELDS = {"created_ms", "cpu_s", "docs_scored", "experts_verified"}


def _docs(domain: str) -> list[tuple[str, str]]:
    """6 whole documents and 3 short heads (the route stage leaves those unsure)."""
    docs = corpus_docs(domain, 60)
    heads = [(f"{i}-head", t[:60]) for i, t in docs[40:43]]
    return docs[:6] + heads


def _close(a, b, where: str, worst: list[float]) -> None:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), where
            return
        worst.append(abs(a - b) / max(1.0, abs(b)))  # perplexities: relative
        assert math.isclose(a, b, rel_tol=TOL, abs_tol=TOL), f"{where}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            _close(a[k], b[k], f"{where}.{k}", worst)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]", worst)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _same_rows(inc: list[EvalRow], full: list[EvalRow], worst: list[float]) -> None:
    assert [r.step for r in inc] == [r.step for r in full]
    for a, b in zip(inc, full, strict=True):
        da, db = a.to_dict(), b.to_dict()
        for name in COST_FIELDS:
            da.pop(name), db.pop(name)
        _close(da, db, f"{a.run}:{a.step}", worst)


@dataclasses.dataclass
class Pair:
    table: DomainTable
    embedder: TrigramEmbedder
    incremental: Evaluator
    full: Evaluator
    published: list[tuple[list[EvalRow], list[EvalRow]]]  # what each call returned
    incumbent: bool  # the likelihood step's incumbency (both evaluators)


def _evaluator(
    root: Path, trunk, store, table, embedder, incremental: bool, incumbent: bool
) -> Evaluator:
    heldout = HeldoutSets(root / "heldout", capacity=12, seed=1)
    for domain in (*EXPERTS, "news"):
        heldout.offer_many(domain, _docs(domain))
    router = GateRouter(embedder, Gate(top_k=2), table)
    evaluator = Evaluator(
        trunk,
        store,
        heldout,
        MatrixHistory(root / "monitor"),
        router,
        max_tokens=48,
        batch_size=4,
        incremental=incremental,
        verify_every=1 if not incremental else 3,
        domains_wait_s=0.0,
    )
    # margins 0: any expert that helps takes an unsure head; ties are mixed when all
    # candidates are taken at once (with incumbency the older expert keeps a tied head)
    likelihood = LikelihoodRouter(
        candidates=3,
        margin=0.0,
        separation=0.05,
        max_tokens=32,
        mix_margin=0.0,
        incumbent=incumbent,
    )
    router.use_likelihood(likelihood, evaluator.likelihood_mixture, trunk.tokenizer)
    return evaluator


@pytest.fixture(scope="module", params=[False, True], ids=["all_at_once", "incumbent"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("incremental")
    trunk = load_trunk(
        build_tiny_trunk(root / "trunk", family="gpt2", layers=2, width=32, vocab_size=400)
    )
    embedder = TrigramEmbedder()
    table = DomainTable()
    for domain in FIRST_TABLE:
        table.apply(domain_record(embedder, domain))
    writer = ExpertStore(root / "store", trunk.fingerprint)
    centroids = {}
    for i, domain in enumerate(EXPERTS):
        texts = [t for _, t in corpus_docs(domain, 40)[12:36]]
        centroid = embedder.embed(texts).mean(axis=0)
        centroids[domain] = (centroid / np.linalg.norm(centroid)).tolist()
        expert = train_expert(trunk, texts, seed=i, steps=12)
        writer.put(f"{domain}-e1", expert, domain, centroids[domain])
    stores = [ExpertStore(root / "store", trunk.fingerprint) for _ in range(2)]
    incumbent = request.param
    inc = _evaluator(root / "inc", trunk, stores[0], table, embedder, True, incumbent)
    full = _evaluator(root / "full", trunk, stores[1], table, embedder, False, incumbent)
    pair = Pair(table, embedder, inc, full, [], incumbent)

    def both(call) -> None:
        pair.published.append((call(inc), call(full)))

    for k, domain in enumerate(EXPERTS):
        if domain not in FIRST_TABLE:  # promoted before its expert, as discover does
            table.apply(domain_record(embedder, domain))
        eid = f"{domain}-e1"
        both(lambda e, eid=eid, d=domain: e.on_registration(eid, d, centroids[d]))
        if k == 2:  # more held-out documents of an old domain: its column is back-filled
            extra = corpus_docs("legal", 60)[50:53]
            for e in (inc, full):
                assert e.heldout.offer_many("legal", extra)
    both(lambda e: e.evaluate_now())
    return pair


def test_every_published_figure_equals_a_full_re_score(pair: Pair) -> None:
    worst: list[float] = []
    for inc_rows, full_rows in pair.published:
        _same_rows(inc_rows, full_rows, worst)
    _same_rows(pair.incremental.history.rows("ours"), pair.full.history.rows("ours"), worst)
    # the per-document losses and routings the next step compares against
    detail_inc = pair.incremental.history.data["detail"]["ours"]
    detail_full = pair.full.history.data["detail"]["ours"]
    _close(detail_inc, detail_full, "detail", worst)
    assert max(worst) <= TOL


def test_the_run_had_what_can_change_a_loss(pair: Pair) -> None:
    """Not a vacuous comparison: routings changed in old domains, the likelihood step
    decided some heads, some were mixed, a column was back-filled."""
    rows = pair.full.history.rows("ours")
    assert [r.arrived_domain for r in rows] == [None, *EXPERTS]
    moved = {d for r in rows[1:] for d, share in r.routing_changed.items() if share > 0}
    assert moved - {r.arrived_domain for r in rows}, "no old domain lost documents"
    detail = pair.full.history.data["detail"]["ours"]
    weights = [w for docs in detail.values() for v in docs.values() for w in v["routing"].values()]
    if not pair.incumbent:
        assert any(0.0 < w < 1.0 for w in weights)  # mixed or split routings
    assert rows[-1].heldout_size["legal"] == 12 and rows[0].heldout_size["legal"] == 12
    assert "legal" not in rows[4].routing_changed  # its held-out set changed before step 4


def test_the_incremental_evaluator_scores_only_what_changed(pair: Pair) -> None:
    inc = pair.incremental.history.rows("ours")
    full = pair.full.history.rows("ours")
    total = sum(r.docs_scored for r in full)
    assert sum(r.docs_scored for r in inc) < total / 2, ([r.docs_scored for r in inc], total)
    # the full re-score scores every document at every step (and every earlier row's
    # back-filled column); the incremental one only new keys: never more
    assert all(a.docs_scored <= b.docs_scored for a, b in zip(inc, full, strict=True))
    # every expert verified at every step by one, on the schedule (every 3rd) by the other
    assert [r.experts_verified for r in full] == [len(r.expert_ids) for r in full]
    assert [r.experts_verified for r in inc][1:] == [1, 1, 3, 1, 1, 6]
    assert inc[-1].experts_verified == 6  # evaluate_now: every expert
    assert all(r.cpu_s > 0 for r in inc + full)
    assert all(r.weight_changes == [] for r in inc + full)
