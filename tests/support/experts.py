"""Tiny trunks (GPT-2 and Llama families, built from configs, nothing downloaded) and
experts with a domain: the fixtures and helpers the experts tests share with others."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.testing import build_tiny_trunk
from experts.trunk import Trunk, load_trunk
from worx import bundled

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def trunk_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trunks")
    return {
        family: build_tiny_trunk(
            root / family, family=family, layers=2, width=32, vocab_size=320, seed=0
        )
        for family in ("gpt2", "llama")
    }


@pytest.fixture(scope="session", params=["gpt2", "llama"])
def trunk(request: pytest.FixtureRequest, trunk_dirs: dict[str, Path]) -> Trunk:
    return load_trunk(trunk_dirs[request.param])


@pytest.fixture(scope="session")
def gpt2_trunk(trunk_dirs: dict[str, Path]) -> Trunk:
    return load_trunk(trunk_dirs["gpt2"])


FP = "f" * 64  # the trunk fingerprint of a store whose experts need no real trunk


def randomize(expert: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Give every parameter of ``expert`` seeded random values (a stand-in for training)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in expert.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    return expert


def tiny_expert(seed: int) -> Expert:
    """A seeded random rank-2 expert on layer 0 of a 16-wide trunk (for store tests)."""
    return randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0,), rank=2), hidden_size=16), seed=seed
    )


def domain_texts(domain: str, count: int, skip: int = 0) -> list[str]:
    """``count`` documents of a bundled corpus domain, after the first ``skip``."""
    return bundled.domain_texts(domain, count, skip, max_chars=400)


def make_domain_expert(store, trunk, embedder, expert_id: str, domain: str, seed: int):
    """Store a (randomised) expert whose centroid is the mean embedding of ``domain`` docs."""
    vectors = embedder.embed(domain_texts(domain, 20))
    centroid = vectors.mean(axis=0)
    centroid = centroid / float((centroid**2).sum() ** 0.5)
    expert = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=8), trunk.hidden_size)
    randomize(expert, seed=seed)
    return store.put(expert_id, expert, domain, centroid.tolist())


def domain_record(embedder, domain: str, count: int = 60, domain_id: str | None = None):
    """A :class:`DomainRecord` as discover promotes one: the centroid of ``count`` documents
    of ``domain``, threshold and core threshold by the router's rule (see router/discover.py)."""
    import numpy as np

    from router.config import RouterConfig
    from router.records import DomainRecord

    config = RouterConfig()
    vectors = embedder.embed(domain_texts(domain, count))  # (count, dim)
    centroid = vectors.mean(axis=0)
    centroid = centroid / float(np.linalg.norm(centroid))
    sims = (vectors @ centroid).astype(np.float64)  # (count,)
    threshold = (
        min(
            float(np.quantile(sims, config.threshold_quantile)),
            float(sims.mean() - config.threshold_std * sims.std()),
        )
        - config.threshold_margin
    )
    core = max(float(sims.mean() - config.uncertain_std * sims.std()), threshold)
    return DomainRecord(
        domain_id=domain_id or domain,
        centroid=[round(float(x), 7) for x in centroid],
        threshold=round(threshold, 6),
        size=count,
        cohesion=round(float(sims.mean()), 6),
        label_hint=domain,
        core_threshold=round(core, 6),
    )


def domain_table(embedder, domains):
    """A :class:`DomainTable` holding :func:`domain_record` of each of ``domains``."""
    from router.table import DomainTable

    table = DomainTable()
    for domain in domains:
        table.apply(domain_record(embedder, domain))
    return table
