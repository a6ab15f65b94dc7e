"""A small but real run for the monitor tests (and the hostile ones that read a run): tiny
trunk, three trained experts, a store; the fixtures ``small_run`` and ``run_copy``.

Domains: three get an expert (in this order), one ("news") never does: the trunk serves
it. All four are rows of the domain table the router routes by (as discover would write).
Each expert is trained for a few steps on its own domain's documents (disjoint from the
held-out ones), so the matrix shows real improvements on the diagonal.
"""

from __future__ import annotations

import itertools
import shutil
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from experts.store import ExpertStore
from experts.testing import build_tiny_trunk
from experts.trunk import Trunk, load_trunk
from monitor.baseline import DenseBaseline
from monitor.evaluator import Evaluator
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from monitor.routing import GateRouter
from router.gate import Gate
from tests.support.experts import domain_table
from trainer.recipes.dense import DenseConfig
from worx.bundled import read_lines

DENSE = DenseConfig(
    steps=25,
    seq_len=64,
    micro_batch_size=4,
    grad_accum_steps=1,
    lr=8e-3,
    warmup_steps=2,
    progress=False,
)
EXPERT_DOMAINS = ("python_code", "legal", "scripture")
ALL_DOMAINS = (*EXPERT_DOMAINS, "news")


def corpus_docs(domain: str, limit: int) -> list[tuple[str, str]]:
    lines = itertools.islice(read_lines(domains=[domain]), limit)
    return [(line.body["id"], line.text) for line in lines]


class TrigramEmbedder:
    """Hashed character-trigram counts, L2-normalised (a stand-in for the router's embedder)."""

    def __init__(self, dim: int = 128) -> None:
        self.dim = dim

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)  # (N, dim)
        for i, text in enumerate(texts):
            low = text.lower()[:2000]
            for k in range(len(low) - 2):
                out[i, zlib.crc32(low[k : k + 3].encode()) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def train_expert(trunk: Trunk, texts: list[str], seed: int, steps: int = 40) -> Expert:
    torch.manual_seed(seed)
    expert = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=16), trunk.hidden_size)
    mixture = Mixture(trunk, {"new": expert})
    opt = torch.optim.Adam(expert.parameters(), lr=1e-2)
    enc = trunk.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=64)
    for step in range(steps):
        rows = torch.arange(step * 4, step * 4 + 4) % enc["input_ids"].shape[0]
        ids, mask = enc["input_ids"][rows], enc["attention_mask"][rows]  # (4, T)
        loss = mixture.loss(ids, mask, [{"new": 1.0}] * 4).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    expert.requires_grad_(False)
    return expert


@dataclass
class SmallRun:
    root: Path
    trunk: Trunk
    store: ExpertStore
    heldout: HeldoutSets
    history: MatrixHistory
    evaluator: Evaluator
    experts: dict[str, tuple[Expert, str, list[float]]]  # id -> (expert, domain, centroid)
    train_texts: dict[str, list[str]]  # domain -> the texts its expert was trained on


def build_small_run(root: Path, heldout_docs: int = 6, register: bool = True) -> SmallRun:
    torch.manual_seed(0)
    trunk_dir = build_tiny_trunk(root / "trunk", family="gpt2", layers=2, width=32, vocab_size=400)
    trunk = load_trunk(trunk_dir)
    store = ExpertStore(root / "store", trunk.fingerprint)
    heldout = HeldoutSets(root / "heldout", capacity=heldout_docs, seed=1)
    embedder = TrigramEmbedder()
    router = GateRouter(embedder, Gate(top_k=1), domain_table(embedder, ALL_DOMAINS))
    experts = {}
    train_texts: dict[str, list[str]] = {}
    for i, domain in enumerate(ALL_DOMAINS):
        docs = corpus_docs(domain, 40)
        heldout.offer_many(domain, docs[:heldout_docs])
        if domain in EXPERT_DOMAINS:
            texts = train_texts[domain] = [t for _, t in docs[heldout_docs:]]
            centroid = router.embedder.embed(texts).mean(axis=0)
            centroid = (centroid / np.linalg.norm(centroid)).tolist()
            expert = train_expert(trunk, texts, seed=i)
            eid = f"{domain}-e1"
            store.put(eid, expert, domain, centroid)
            experts[eid] = (expert, domain, centroid)
    history = MatrixHistory(root / "monitor")
    evaluator = Evaluator(trunk, store, heldout, history, router, max_tokens=64)
    run = SmallRun(root, trunk, store, heldout, history, evaluator, experts, train_texts)
    if register:
        baseline = DenseBaseline(
            trunk_dir, heldout, history, root / "baseline", DENSE, max_tokens=64
        )
        for eid, (_, domain, centroid) in experts.items():
            evaluator.on_registration(eid, domain, centroid)
            baseline.step(eid, domain, train_texts[domain])
    return run


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmallRun]:
    """Tiny trunk, three trained experts registered, four domains (one never gets one)."""
    torch.set_num_threads(1)
    yield build_small_run(tmp_path_factory.mktemp("small-run"))


@pytest.fixture
def run_copy(small_run: SmallRun, tmp_path: Path) -> SmallRun:
    """A private copy of the small run's files, reopened by fresh objects (as after a restart)."""
    from experts.store import ExpertStore
    from monitor.evaluator import Evaluator
    from monitor.heldout import HeldoutSets
    from monitor.history import MatrixHistory

    for part in ("store", "heldout", "monitor"):
        shutil.copytree(small_run.root / part, tmp_path / part)
    store = ExpertStore(tmp_path / "store", small_run.trunk.fingerprint)
    heldout = HeldoutSets(tmp_path / "heldout", capacity=small_run.heldout.capacity, seed=1)
    history = MatrixHistory(tmp_path / "monitor")
    evaluator = Evaluator(
        small_run.trunk, store, heldout, history, small_run.evaluator.router, max_tokens=64
    )
    trunk, experts, texts = small_run.trunk, small_run.experts, small_run.train_texts
    return SmallRun(tmp_path, trunk, store, heldout, history, evaluator, experts, texts)
