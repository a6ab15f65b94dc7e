"""Trunk loading: frozen, both families, a fingerprint that tracks config and weights only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from experts.testing import build_tiny_trunk
from experts.trunk import TrunkError, load_trunk, trunk_fingerprint


def test_trunk_is_frozen_in_eval_mode_with_family_layout(trunk) -> None:
    assert not trunk.model.training
    assert all(not p.requires_grad for p in trunk.model.parameters())
    assert trunk.num_layers == 2 and trunk.hidden_size == 32
    assert len(trunk.blocks()) == 2
    expected = "GPT2MLP" if trunk.family == "gpt2" else "LlamaMLP"
    assert type(trunk.mlp(1)).__name__ == expected
    with pytest.raises(IndexError):
        trunk.mlp(2)
    ids = torch.tensor([trunk.tokenizer("hello world")["input_ids"]])
    assert trunk.model(input_ids=ids).logits.shape == (1, ids.shape[1], len(trunk.tokenizer))


def test_fingerprint_ignores_load_dtype_but_tracks_weights(trunk_dirs, tmp_path: Path) -> None:
    path = trunk_dirs["gpt2"]
    assert load_trunk(path, dtype=torch.bfloat16).fingerprint == trunk_fingerprint(path)
    other = build_tiny_trunk(
        tmp_path / "seed1", family="gpt2", layers=2, width=32, vocab_size=320, seed=1
    )
    assert trunk_fingerprint(other) != trunk_fingerprint(path)
    changed = tmp_path / "changed"
    shutil.copytree(path, changed)
    config = json.loads((changed / "config.json").read_text())
    config["layer_norm_epsilon"] = 1e-3
    (changed / "config.json").write_text(json.dumps(config))
    assert trunk_fingerprint(changed) != trunk_fingerprint(path)


def test_directory_without_safetensors_is_refused(trunk_dirs, tmp_path: Path) -> None:
    broken = tmp_path / "nosafe"
    shutil.copytree(trunk_dirs["llama"], broken)
    for file in broken.glob("*.safetensors"):
        file.unlink()
    with pytest.raises(TrunkError, match="safetensors"):
        load_trunk(broken)
    with pytest.raises(TrunkError, match="config.json"):
        load_trunk(tmp_path)
