"""Every expert kind: function-preserving at insertion, isolated, stored and refused by kind."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from experts.expert import Expert, ExpertConfig, ExpertConfigError
from experts.mixture import Mixture
from experts.store import WEIGHTS, ExpertRefused, ExpertStore
from tests.support.experts import randomize
from tests.support.trainer import tensor_hashes

BEFORE_KINDS = Path(__file__).parent / "data" / "store_before_kinds"  # written by 9f86a1a


def kinds(vocab: int) -> dict[str, ExpertConfig]:
    """One config of every kind (and both places of the token delta) for a 2-layer trunk."""
    vocab_parts = dict(vocab_size=vocab, output_rank=3, logit_bias=True)
    at_input = dict(token_site="input", **vocab_parts)  # the token delta entering its block
    return {
        "adapter": ExpertConfig(kind="adapter", layers=(0, 1), rank=4),
        "vocab": ExpertConfig(
            layers=(), rank=0, kind="vocab", token_rank=2, token_layer=0, **at_input
        ),
        "vocab_output_only": ExpertConfig(
            layers=(), rank=0, kind="vocab", token_rank=0, token_layer=0, **at_input
        ),
        "vocab_adapter": ExpertConfig(
            layers=(1,), rank=4, kind="vocab_adapter", token_rank=2, token_layer=0, **at_input
        ),
        "vocab_adapter_tokens_beside_mlp": ExpertConfig(
            layers=(1,),
            rank=4,
            kind="vocab_adapter",
            token_rank=2,
            token_layer=1,
            token_site="mlp",
            **vocab_parts,
        ),
        "vocab_adapter_tokens_at_1": ExpertConfig(
            layers=(1,), rank=4, kind="vocab_adapter", token_rank=2, token_layer=1, **at_input
        ),
    }


def _vocab(trunk) -> int:
    return int(trunk.model.get_output_embeddings().weight.shape[0])


def _batch(trunk):
    enc = trunk.tokenizer(
        ["The court held that", "def f(x): return x", "In the beginning"],
        return_tensors="pt",
        padding=True,
    )
    return enc["input_ids"], enc["attention_mask"]


@pytest.mark.parametrize(
    "kind",
    [
        "adapter",
        "vocab",
        "vocab_output_only",
        "vocab_adapter",
        "vocab_adapter_tokens_at_1",
        "vocab_adapter_tokens_beside_mlp",
    ],
)
def test_every_kind_is_function_preserving_at_insertion(trunk, kind: str) -> None:
    config = kinds(_vocab(trunk))[kind]
    ids, mask = _batch(trunk)
    fresh = Expert(config, trunk.hidden_size)
    mixture = Mixture(trunk, {"e": fresh})
    with torch.no_grad():
        alone = mixture.forward(ids, mask)
        inserted = mixture.forward(ids, mask, [{"e": 1.0}, {"e": 0.4}, {}])
        trained = Mixture(trunk, {"e": randomize(Expert(config, trunk.hidden_size), 3)}).forward(
            ids, mask, [{"e": 1.0}] * 3
        )
    assert torch.equal(inserted, alone)  # bit for bit: every part starts at exactly zero
    assert not torch.allclose(trained, alone)  # the same kind, trained, does change outputs


@pytest.mark.parametrize(
    "kind",
    ["vocab", "vocab_adapter", "vocab_adapter_tokens_at_1", "vocab_adapter_tokens_beside_mlp"],
)
def test_each_row_gets_only_its_own_experts(trunk, kind: str) -> None:
    """Rows routed to different experts in one batch equal each row's forward on its own."""
    config = kinds(_vocab(trunk))[kind]
    experts = {
        name: randomize(Expert(config, trunk.hidden_size), seed)
        for seed, name in [(1, "a"), (2, "b")]
    }
    mixture = Mixture(trunk, experts)
    ids, mask = _batch(trunk)
    weights = [{"a": 1.0}, {"b": 0.7}, {}]
    with torch.no_grad():
        together = mixture.forward(ids, mask, weights)
        for row, routing in enumerate(weights):
            alone = mixture.forward(ids[row : row + 1], mask[row : row + 1], [routing])
            torch.testing.assert_close(together[row : row + 1], alone, rtol=1e-5, atol=1e-5)


def test_adding_experts_of_every_kind_leaves_the_trunk_and_earlier_experts_bit_identical(
    trunk, tmp_path: Path
) -> None:
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    configs = kinds(_vocab(trunk))
    first = randomize(Expert(configs["vocab_adapter"], trunk.hidden_size), seed=10)
    store.put("A", first, "dom-a", [1.0, 0.0])
    table: dict[str, Expert] = {"A": store.get("A")}
    ids, mask = _batch(trunk)
    a_hashes, trunk_hashes = tensor_hashes(table["A"]), tensor_hashes(trunk.model)
    a_file = hashlib.sha256((tmp_path / "store" / "A" / WEIGHTS).read_bytes()).hexdigest()
    with torch.no_grad():
        before = Mixture(trunk, table).forward(ids, mask, [{"A": 1.0}] * 3)
    for seed, (kind, config) in enumerate(configs.items(), start=11):
        expert = randomize(Expert(config, trunk.hidden_size), seed=seed)
        store.put(f"B-{kind}", expert, f"dom-{kind}", [0.0, 1.0])
        table = {**table, f"B-{kind}": store.get(f"B-{kind}")}
    with torch.no_grad():
        after = Mixture(trunk, table).forward(ids, mask, [{"A": 1.0}] * 3)
        others = Mixture(trunk, table).forward(
            ids, mask, [{"B-vocab": 1.0}, {"B-adapter": 0.5, "B-vocab_adapter": 0.5}, {}]
        )
    assert tensor_hashes(table["A"]) == a_hashes
    assert tensor_hashes(store.get("A")) == a_hashes
    assert tensor_hashes(trunk.model) == trunk_hashes
    assert hashlib.sha256((tmp_path / "store" / "A" / WEIGHTS).read_bytes()).hexdigest() == a_file
    assert torch.equal(after, before)
    assert not torch.allclose(others[:2], before[:2])


def test_every_kind_round_trips_through_the_store(trunk, tmp_path: Path) -> None:
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    for seed, (kind, config) in enumerate(kinds(_vocab(trunk)).items()):
        expert = randomize(Expert(config, trunk.hidden_size), seed=seed)
        manifest = store.put(kind.replace("_", "-"), expert, "dom", [1.0])
        loaded = store.get(manifest.expert_id)
        assert loaded.config == config
        assert manifest.config.get("kind", "adapter") == config.kind
        assert tensor_hashes(loaded) == tensor_hashes(expert)


def test_an_expert_stored_before_kinds_loads_bit_for_bit_as_an_adapter(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(BEFORE_KINDS, root)
    store = ExpertStore(root, "f" * 64)
    expert = store.get("old-adapter-1")
    assert expert.config == ExpertConfig(kind="adapter", layers=(0, 1), rank=4)
    assert expert.config.kind == "adapter"
    on_disk = load_file(str(root / "old-adapter-1" / WEIGHTS))
    assert set(on_disk) == set(expert.tensors())
    for name, tensor in on_disk.items():
        assert torch.equal(expert.tensors()[name], tensor)
    # written again today, the same expert gives the same bytes (the format did not change)
    again = ExpertStore(tmp_path / "again", "f" * 64)
    manifest = again.put(
        "old-adapter-1",
        expert,
        "dom-old",
        [1.0, 0.0],
        created_ms=1764547200000,
        summary={"written_by": "9f86a1a"},
    )
    assert manifest.sha256 == store.manifest("old-adapter-1").sha256
    assert manifest.config == {"activation": "gelu", "layers": [0, 1], "rank": 4}


def test_an_unknown_kind_is_refused_with_a_reason(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(BEFORE_KINDS, root)
    path = root / "old-adapter-1" / "manifest.json"
    body = json.loads(path.read_text())
    body["config"]["kind"] = "token_router"
    path.write_text(json.dumps(body))
    store = ExpertStore(root, "f" * 64, quarantine=False)
    with pytest.raises(ExpertRefused) as refused:
        store.get("old-adapter-1")
    assert refused.value.reason == "bad_manifest"
    assert "unknown expert kind 'token_router'" in str(refused.value)
    with pytest.raises(ExpertConfigError, match="unknown expert kind"):
        ExpertConfig.from_dict({"layers": [0], "rank": 2, "kind": "moe"})


@pytest.mark.parametrize(
    "body, message",
    [
        ({"layers": [0], "rank": 2, "output_rank": 4}, "unknown keys"),
        ({"layers": [0], "rank": 2, "kind": "vocab_adapter", "output_rank": 2}, "vocab_size"),
        (
            {"layers": [0], "rank": 2, "kind": "vocab", "vocab_size": 9, "output_rank": 2},
            "no adapters",
        ),
        ({"layers": [0], "rank": 2, "kind": "vocab_adapter", "vocab_size": 9}, "at least one"),
        (
            {
                "layers": [0],
                "rank": 2,
                "kind": "vocab_adapter",
                "vocab_size": 9,
                "token_rank": 1,
                "token_layer": -1,
            },
            "token_layer",
        ),
        (
            {"layers": [0], "rank": 2, "kind": "vocab_adapter", "vocab_size": 9, "logit_bias": 1},
            "bool",
        ),
    ],
)
def test_bad_configs_of_the_vocabulary_kinds_are_refused(body: dict, message: str) -> None:
    with pytest.raises(ExpertConfigError, match=message):
        ExpertConfig.from_dict(body)


def test_a_token_delta_beyond_the_trunk_is_refused_by_the_mixture(gpt2_trunk) -> None:
    config = ExpertConfig(
        layers=(0,),
        rank=2,
        kind="vocab_adapter",
        vocab_size=_vocab(gpt2_trunk),
        output_rank=0,
        token_rank=2,
        token_layer=5,
        token_site="input",
        logit_bias=False,
    )
    mixture = Mixture(gpt2_trunk, {"e": Expert(config, gpt2_trunk.hidden_size)})
    ids, mask = _batch(gpt2_trunk)
    with pytest.raises(ValueError, match="beyond the trunk"):
        mixture.forward(ids, mask, [{"e": 1.0}] * 3)
