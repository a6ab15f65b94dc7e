"""Tiny trunk, corpus texts, training jobs and a tiny pretraining run: what the trainer
tests share with others (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from experts.testing import build_tiny_trunk
from experts.trunk import Trunk, load_trunk
from worx.bundled import domain_texts

torch.set_num_threads(1)


def corpus_texts(domain: str, count: int, skip: int = 0) -> list[str]:
    """``count`` documents of a bundled corpus domain, after skipping ``skip``."""
    return domain_texts(domain, count, skip)


@pytest.fixture(scope="session")
def trunk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_trunk(
        tmp_path_factory.mktemp("trainer-trunk"), family="gpt2", layers=3, width=32, vocab_size=320
    )


@pytest.fixture(scope="session")
def trunk(trunk_dir: Path) -> Trunk:
    return load_trunk(trunk_dir)


def tensor_hashes(module: torch.nn.Module) -> dict[str, str]:
    """sha256 of every parameter and buffer of ``module`` (bit-identity checks)."""
    import hashlib

    return {
        name: hashlib.sha256(
            t.detach().contiguous().view(torch.uint8).numpy().tobytes()
        ).hexdigest()
        for name, t in module.state_dict().items()
    }


def make_job(topic: str, placed: list[dict], job_id: str, heldout: int = 4, **changes) -> Any:
    """A TrainJob over ``placed`` docs: the last ``heldout`` are held out."""
    from router.records import DocRef, TrainJob

    partition = placed[0]["partition"]
    ref = DocRef(
        topic=topic, partition=partition, start=placed[0]["offset"], end=placed[-1]["offset"] + 1
    )
    body = {
        "job_id": job_id,
        "domain_id": "scripture",
        "reason": "new_domain",
        "refs": [{k: v for k, v in ref.to_dict().items() if k != "schema_version"}],
        "train_doc_ids": [p["doc_id"] for p in placed[:-heldout]],
        "heldout_doc_ids": [p["doc_id"] for p in placed[-heldout:]],
        "centroid": [0.6, 0.8],
    }
    body.update(changes)
    return TrainJob(**body)


def tiny_pretrain_config(out: Path, **overrides) -> Any:
    """A :class:`PretrainConfig` of a 2-layer, 32-wide trunk pretrained for 40 steps into
    ``out`` on a few documents of each bundled domain; ``overrides`` change any field."""
    from trainer.recipes.pretrain_trunk import PretrainConfig

    fields = dict(
        out_dir=str(out),
        layers=2,
        width=32,
        heads=2,
        vocab_size=320,
        context=32,
        batch_size=8,
        steps=40,
        lr=3e-3,
        warmup_steps=5,
        max_docs_per_domain=12,
        eval_tokens=512,
        threads=1,
        seed=3,
        progress=False,
    )
    fields.update(overrides)
    return PretrainConfig(**fields)
