"""experts.growth: growing an expert is function-preserving, leaves the parent bit-identical,
and refuses what cannot be grown."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from experts.expert import Expert, ExpertConfig, ExpertConfigError
from experts.growth import grow, growth_record, scaled_config, union_config
from experts.mixture import Mixture
from tests.support.experts import randomize
from tests.support.trainer import tensor_hashes


def _vocab(trunk) -> int:
    return int(trunk.model.get_output_embeddings().weight.shape[0])


def vocab_only_config(vocab: int, **parts) -> ExpertConfig:
    """A config of kind "vocab" with only the vocabulary parts given (token delta: block 0)."""
    none = dict(output_rank=0, token_rank=0, token_layer=0, token_site="input", logit_bias=False)
    return ExpertConfig(layers=(), rank=0, kind="vocab", vocab_size=vocab, **{**none, **parts})


def growths(vocab: int) -> dict[str, tuple[ExpertConfig, ExpertConfig]]:
    """(parent, grown) pairs: every growable dimension of every kind, on a 2-layer trunk.

    Ranks are multiples of 8 and at least 16, as the defaults are: the CPU's matrix kernels
    then sum a zero-padded product in the parent's order, so outputs are bit-identical
    (smaller or odd ranks: within float rounding, docs/experts.md "Growth").
    """
    parts = dict(
        vocab_size=vocab,
        output_rank=16,
        token_rank=16,
        token_layer=1,
        token_site="input",
        logit_bias=True,
    )
    vocab_adapter = ExpertConfig(layers=(1,), rank=16, kind="vocab_adapter", **parts)
    vocab_only = ExpertConfig(layers=(), rank=0, kind="vocab", **parts)
    adapter = ExpertConfig(kind="adapter", layers=(1,), rank=16)
    return {
        "adapter_rank": (adapter, dataclasses.replace(adapter, rank=32)),
        "adapter_layers": (adapter, ExpertConfig(kind="adapter", layers=(0, 1), rank=16)),
        "adapter_rank_and_layers": (adapter, ExpertConfig(kind="adapter", layers=(0, 1), rank=48)),
        "adapter_to_vocab_adapter": (
            adapter,
            ExpertConfig(layers=(0, 1), rank=32, kind="vocab_adapter", **parts),
        ),
        "vocab_ranks": (
            vocab_only,
            dataclasses.replace(vocab_only, output_rank=32, token_rank=48),
        ),
        "vocab_output_rank_from_bias_only": (
            vocab_only_config(vocab, logit_bias=True),
            vocab_only_config(vocab, output_rank=16, logit_bias=True),
        ),
        "vocab_bias_and_tokens_added": (
            vocab_only_config(vocab, output_rank=16),
            vocab_only,
        ),
        "vocab_to_vocab_adapter": (
            vocab_only,
            ExpertConfig(layers=(0, 1), rank=16, kind="vocab_adapter", **parts),
        ),
        "vocab_adapter_everything": (
            vocab_adapter,
            dataclasses.replace(
                vocab_adapter, layers=(0, 1), rank=32, output_rank=32, token_rank=64
            ),
        ),
    }


def _batch(trunk):
    enc = trunk.tokenizer(
        ["The court held that", "def f(x): return x", "In the beginning"],
        return_tensors="pt",
        padding=True,
    )
    return enc["input_ids"], enc["attention_mask"]


@pytest.mark.parametrize("case", list(growths(8)))
def test_grown_expert_computes_exactly_the_parents_function(trunk, case: str) -> None:
    before, after = growths(_vocab(trunk))[case]
    parent = randomize(Expert(before, trunk.hidden_size), seed=3)  # a trained stand-in
    parent_hashes, trunk_hashes = tensor_hashes(parent), tensor_hashes(trunk.model)
    grown = grow(parent, after)
    assert grown.config == after
    assert grown.num_params() > parent.num_params()
    ids, mask = _batch(trunk)
    mixture = Mixture(trunk, {"parent": parent, "grown": grown})
    with torch.no_grad():
        logits_parent = mixture.forward(ids, mask, [{"parent": 1.0}] * 3)
        logits_grown = mixture.forward(ids, mask, [{"grown": 1.0}] * 3)
        losses_parent, _ = mixture.token_losses(ids, mask, [{"parent": 1.0}] * 3)
        losses_grown, _ = mixture.token_losses(ids, mask, [{"grown": 1.0}] * 3)
    assert torch.equal(logits_grown, logits_parent)  # bit for bit
    assert torch.equal(losses_grown, losses_parent)
    assert tensor_hashes(parent) == parent_hashes  # the parent is never modified
    assert tensor_hashes(trunk.model) == trunk_hashes
    assert all(p.requires_grad for p in grown.parameters())
    # the new parts are live: one gradient step on them moves the output
    with torch.no_grad():
        for name, param in grown.named_parameters():
            if name.endswith(("up.weight", "proj", "bias")):
                param.add_(0.05)
        moved = Mixture(trunk, {"grown": grown}).forward(ids, mask, [{"grown": 1.0}] * 3)
    assert not torch.allclose(moved, logits_parent)


def test_grown_expert_survives_the_store_bit_for_bit(gpt2_trunk, tmp_path) -> None:
    from experts.store import ExpertStore

    before, after = growths(_vocab(gpt2_trunk))["vocab_adapter_everything"]
    grown = grow(randomize(Expert(before, gpt2_trunk.hidden_size), seed=4), after)
    store = ExpertStore(tmp_path / "store", gpt2_trunk.fingerprint)
    store.put("G", grown, "dom-g", [1.0, 0.0])
    assert store.get("G").config == after
    assert tensor_hashes(store.get("G")) == tensor_hashes(grown)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(rank=8), "shrink an expert's adapter rank"),
        (dict(layers=(0,)), "dropping its layers"),
        (dict(activation="relu"), "activation"),
        (dict(output_rank=8), "shrink an expert's output_rank"),
        (dict(token_rank=8), "shrink an expert's token_rank"),
        (dict(logit_bias=False), "dropping its logit bias"),
        (dict(token_layer=0), "move an expert's token delta"),
        (dict(token_site="mlp"), "move an expert's token delta"),
        (dict(vocab_size=9), "another trunk"),
    ],
)
def test_what_cannot_be_grown_is_refused(change: dict, message: str) -> None:
    parent_config = growths(8)["vocab_adapter_everything"][0]
    parent = Expert(parent_config, hidden_size=8)
    hashes = tensor_hashes(parent)
    with pytest.raises(ExpertConfigError, match=message):
        grow(parent, dataclasses.replace(parent_config, **change))
    assert tensor_hashes(parent) == hashes


@pytest.mark.parametrize(
    ("parent", "target"),
    [
        (
            "vocab_adapter",
            ExpertConfig(kind="adapter", layers=(1,), rank=8),
        ),  # drops the vocabulary parts
        (
            "vocab_adapter",
            vocab_only_config(8, output_rank=4, token_rank=4, token_layer=1, logit_bias=True),
        ),  # drops the adapters
        ("adapter", vocab_only_config(8, output_rank=2)),
    ],
)
def test_a_kind_change_that_is_not_a_superset_is_refused(parent: str, target) -> None:
    configs = {
        "vocab_adapter": growths(8)["vocab_adapter_everything"][0],
        "adapter": ExpertConfig(kind="adapter", layers=(1,), rank=16),
    }
    with pytest.raises(ExpertConfigError, match="not a superset"):
        grow(Expert(configs[parent], hidden_size=8), target)


def test_union_and_scaled_configs_only_ever_grow() -> None:
    parent = growths(8)["vocab_adapter_everything"][0]
    configured = ExpertConfig(layers=(0,), rank=2, activation="relu", kind="adapter")
    union = union_config(parent, configured)
    assert union.layers == (0, 1) and union.rank == 16 and union.activation == "gelu"
    assert (union.output_rank, union.token_rank, union.logit_bias) == (16, 16, True)
    assert union_config(parent, parent) == parent
    scaled = scaled_config(parent, 4, max_rank=40)
    assert (scaled.rank, scaled.output_rank, scaled.token_rank) == (40, 40, 40)
    assert scaled_config(parent, 4, max_rank=1) == parent  # a cap never shrinks
    assert growth_record(parent, scaled) == {
        "rank": [16, 40],
        "output_rank": [16, 40],
        "token_rank": [16, 40],
    }
    with pytest.raises(ExpertConfigError, match="growth factor"):
        scaled_config(parent, 0, max_rank=10)


def test_ranks_off_the_multiple_of_8_grow_to_within_float_rounding(trunk) -> None:
    """A rank-3 parent grown to rank 7: the same function up to summation order."""
    parent = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=3), trunk.hidden_size), seed=5
    )
    grown = grow(parent, ExpertConfig(kind="adapter", layers=(0, 1), rank=7))
    ids, mask = _batch(trunk)
    mixture = Mixture(trunk, {"parent": parent, "grown": grown})
    with torch.no_grad():
        want = mixture.forward(ids, mask, [{"parent": 1.0}] * 3)
        got = mixture.forward(ids, mask, [{"grown": 1.0}] * 3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
