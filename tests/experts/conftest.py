"""Tiny trunks (GPT-2 and Llama families, built from configs, nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experts.trunk import Trunk, build_tiny_trunk, load_trunk

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


def randomize(expert: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Give every parameter of ``expert`` seeded random values (a stand-in for training)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in expert.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    return expert


def domain_texts(domain: str, count: int, skip: int = 0) -> list[str]:
    """``count`` documents of a bundled corpus domain, after the first ``skip``."""
    import gzip
    import json

    path = Path(__file__).resolve().parents[2] / "data" / "corpus" / f"{domain}.jsonl.gz"
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            if i >= skip + count:
                break
            if i >= skip:
                out.append(json.loads(line)["text"][:400])
    return out


def make_domain_expert(store, trunk, embedder, expert_id: str, domain: str, seed: int):
    """Store a (randomised) expert whose centroid is the mean embedding of ``domain`` docs."""
    from experts.expert import Expert, ExpertConfig

    vectors = embedder.embed(domain_texts(domain, 20))
    centroid = vectors.mean(axis=0)
    centroid = centroid / float((centroid**2).sum() ** 0.5)
    expert = Expert(ExpertConfig(layers=(0, 1), rank=8), trunk.hidden_size)
    randomize(expert, seed=seed)
    return store.put(expert_id, expert, domain, centroid.tolist())
