"""The frozen-MLP kernel computes what the MLP computes, with the gradient autograd gives."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from experts.expert import ExpertConfig
from experts.testing import build_tiny_trunk
from experts.trunk import load_trunk
from tests.support.trainer import corpus_texts, tensor_hashes
from trainer.config import TrainerConfig
from trainer.frozen_mlp import frozen_mlp_kernels
from trainer.recipes.expert import train_expert


def _mlps(trunk) -> list[torch.nn.Module]:
    return [trunk.mlp(layer) for layer in range(trunk.num_layers)]


def test_same_outputs_and_input_gradients_as_autograd_hooks_still_run(trunk) -> None:
    mlp = trunk.mlp(1)
    assert type(mlp.act).__name__ == "GELUTanh"  # gelu_new as one kernel (experts.trunk)
    x = torch.randn(3, 7, trunk.hidden_size, requires_grad=True)
    upstream = torch.randn(3, 7, trunk.hidden_size)
    expected = mlp(x)
    (expected_grad,) = torch.autograd.grad(expected, x, upstream)
    added = []
    handle = mlp.register_forward_hook(lambda m, i, o: added.append(o) or o + 1.0)
    try:
        expected_hooked = mlp(x)
        with frozen_mlp_kernels(_mlps(trunk)) as replaced:
            assert replaced == trunk.num_layers
            got = mlp(x)
            (got_grad,) = torch.autograd.grad(got, x, upstream)
    finally:
        handle.remove()
    assert len(added) == 2  # the forward hook (the mixture's adapter site) ran both times
    torch.testing.assert_close(got, expected_hooked, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, expected_grad, rtol=1e-5, atol=1e-6)
    assert not any("forward" in m.__dict__ for m in _mlps(trunk))  # restored on exit


def test_only_frozen_eval_mode_gpt2_mlps_are_replaced(trunk, tmp_path) -> None:
    llama = load_trunk(build_tiny_trunk(tmp_path / "llama", family="llama", layers=2, width=32))
    with frozen_mlp_kernels(_mlps(llama)) as replaced:
        assert replaced == 0  # a gated SiLU MLP: left as it is
    mlps = _mlps(trunk)
    mlps[0].c_fc.weight.requires_grad_(True)
    mlps[1].train()
    try:
        with frozen_mlp_kernels(mlps) as replaced:
            assert replaced == trunk.num_layers - 2
            assert "forward" not in mlps[0].__dict__ and "forward" not in mlps[1].__dict__
        with frozen_mlp_kernels(mlps, enabled=False) as replaced:
            assert replaced == 0
    finally:
        mlps[0].c_fc.weight.requires_grad_(False)
        mlps[1].eval()


def test_recipe_trains_the_same_expert_with_and_without_the_kernel(trunk) -> None:
    cfg = TrainerConfig(
        max_steps=4,
        seq_len=32,
        micro_batch_size=2,
        grad_accum_steps=1,
        warmup_steps=1,
        eval_every=4,
        device="cpu",
        progress=False,
        expert=ExpertConfig(rank=8, output_rank=4, token_rank=4, layers=(0, 1, 2)),
    )
    train, held = corpus_texts("scripture", 12), corpus_texts("scripture", 3, skip=12)
    before = tensor_hashes(trunk.model)
    runs = [
        train_expert(trunk, train, held, dataclasses.replace(cfg, fused_frozen_mlp=fused))
        for fused in (True, False)
    ]
    assert tensor_hashes(trunk.model) == before  # the trunk is never modified
    fused, plain = (r.summary for r in runs)
    assert [s for s, _ in fused["loss_curve"]] == [s for s, _ in plain["loss_curve"]]
    for (_, a), (_, b) in zip(fused["loss_curve"], plain["loss_curve"], strict=True):
        assert a == pytest.approx(b, rel=1e-4)
    assert fused["eval_curve"][-1][1] == pytest.approx(plain["eval_curve"][-1][1], rel=1e-4)
