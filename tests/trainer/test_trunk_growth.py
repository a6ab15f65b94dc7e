"""Trunk growth: deeper and wider trunks compute what they computed; the recipe grows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from experts.reversible import ReversibleConfig, ReversibleLMHeadModel
from experts.trunk import load_trunk
from tests.support.trainer import tiny_pretrain_config
from topology.commands import main as worx_main
from trainer.recipes.pretrain_trunk import pretrain
from trainer.trunk_growth import Growth, GrowthError, grow, grow_depth, grow_width, plan_growth

# widening splits each weight reading copied units into parts: float32 sums in another
# order, measured 1.8e-7 on these logits (depth growth is bit-exact)
WIDTH_LOGIT_TOLERANCE = 2e-6
ARCHITECTURES = {
    "gpt2": (GPT2LMHeadModel, GPT2Config),
    "reversible": (ReversibleLMHeadModel, ReversibleConfig),
}


def _model(kind: str, layers: int = 2, width: int = 32) -> torch.nn.Module:
    torch.manual_seed(0)
    cls, config = ARCHITECTURES[kind]
    return cls(
        config(vocab_size=300, n_embd=width, n_layer=layers, n_head=2, n_positions=32)
    ).eval()


IDS = torch.randint(0, 300, (4, 32), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_inserted_zero_output_blocks_keep_the_logits_bit_identical(kind) -> None:
    model = _model(kind)
    old_blocks = list(model.transformer.h)
    with torch.no_grad():
        before = model(input_ids=IDS).logits
        inserted = grow_depth(model, 5)
        after = model(input_ids=IDS).logits
    assert len(model.transformer.h) == model.config.n_layer == 5 and len(inserted) == 3
    assert torch.equal(before, after)
    kept = [b for i, b in enumerate(model.transformer.h) if i not in inserted]
    assert all(a is b for a, b in zip(kept, old_blocks, strict=True))  # same tensors
    for index in inserted:
        block = model.transformer.h[index]
        assert not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_widening_keeps_the_function_within_float_rounding_and_the_copies_drift_apart(kind):
    model = _model(kind)
    with torch.no_grad():
        before = model(input_ids=IDS, labels=IDS)
        wide = grow_width(model, 96)  # k = 3
        after = wide(input_ids=IDS, labels=IDS)
    assert (wide.config.n_embd, wide.config.n_head) == (96, 6)  # heads keep their size
    worst = float((after.logits - before.logits).abs().max())
    assert worst < WIDTH_LOGIT_TOLERANCE, worst
    assert abs(float(after.loss) - float(before.loss)) < 1e-5
    assert wide.lm_head.weight is wide.transformer.wte.weight
    wide.train()
    optimizer = torch.optim.AdamW(wide.parameters(), lr=1e-3)
    for _ in range(3):
        optimizer.zero_grad()
        wide(input_ids=IDS, labels=IDS).loss.backward()
        optimizer.step()
    fc = wide.transformer.h[0].mlp.c_fc.weight  # (3d, 3f): output units in 3 copies
    first, second = fc[:, :128], fc[:, 128:256]
    assert not torch.allclose(first, second)  # the random split broke the symmetry


def _stepped(model: torch.nn.Module) -> torch.optim.Optimizer:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        optimizer.zero_grad()
        model(input_ids=IDS, labels=IDS).loss.backward()
        optimizer.step()
    return optimizer


def test_depth_growth_carries_the_optimizer_state_and_widening_starts_it_fresh() -> None:
    model = _model("gpt2")
    optimizer = _stepped(model)
    state = {id(p): optimizer.state[p]["exp_avg"].clone() for p in model.parameters()}
    make = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)  # noqa: E731
    deeper, carried, event = grow(model, optimizer, Growth(2, 4, 32), make)
    assert deeper is model and event["inserted_blocks"] == [1, 3]
    for param in deeper.parameters():
        if id(param) in state:
            assert torch.equal(carried.state[param]["exp_avg"], state[id(param)])
        else:
            assert param not in carried.state  # fresh: AdamW starts it at zero
    new_tensors = 12 * 2  # two inserted GPT-2 blocks of 12 tensors
    assert event["optimizer_tensors_fresh"] == new_tensors
    assert event["optimizer_tensors_carried"] == len(state)
    _, wide_opt, wide_event = grow(deeper, carried, Growth(4, 4, 64), make)
    assert wide_event["optimizer_tensors_carried"] == 0 and not wide_opt.state


def test_a_growth_plan_is_checked_with_the_fix() -> None:
    assert plan_growth(["10:4x32", "20:4x64"], 2, 32, 30) == [Growth(10, 4, 32), Growth(20, 4, 64)]
    bad = {
        ("10x4",): "STEP:LAYERSxWIDTH",
        ("20:4x32", "10:6x32"): "in order",
        ("10:1x32",): "only grow",
        ("10:2x48",): "multiple of 32",
        ("10:2x32",): "keeps the shape",
        ("30:4x32",): "before the last step",
    }
    for specs, message in bad.items():
        with pytest.raises(GrowthError, match=message):
            plan_growth(list(specs), 2, 32, 30)


def test_the_cli_flag_parses_and_refuses_bad_values(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        worx_main(["trunk", "pretrain", "--grow-at", "100:wide", "--out", str(tmp_path / "t")])
    assert exit_info.value.code == 2
    assert "not STEP:LAYERSxWIDTH" in capsys.readouterr().err
    code = worx_main(
        [
            "trunk",
            "pretrain",
            "--out",
            str(tmp_path / "t"),
            "--steps",
            "40",
            "--layers",
            "2",
            "--width",
            "32",
            "--grow-at",
            "20:4x48",
        ]
    )
    assert code == 2 and "not a multiple of 32" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_the_recipe_grows_deeper_then_wider_without_a_loss_jump(tmp_path: Path) -> None:
    out = tmp_path / "grown"
    report = pretrain(tiny_pretrain_config(out, steps=30, grow_at=("10:3x32", "20:3x64")))
    assert [g["to"] for g in report["growth"]] == [
        {"layers": 3, "width": 32},
        {"layers": 3, "width": 64},
    ]
    for event in report["growth"]:
        assert abs(event["loss_after"] - event["loss_before"]) <= 1e-4, event
    assert report["growth"][0]["optimizer_tensors_carried"] > 0
    assert (report["layers"], report["width"], report["heads"]) == (3, 64, 4)
    assert "--grow-at 10:3x32 --grow-at 20:3x64" in report["reproduce"]
    trunk = load_trunk(out)
    assert (trunk.num_layers, trunk.hidden_size) == (3, 64)


def test_the_recipe_trains_a_reversible_trunk_that_loads_as_one(tmp_path: Path) -> None:
    out = tmp_path / "reversible"
    report = pretrain(tiny_pretrain_config(out, steps=20, reversible=True, grow_at=("10:4x32",)))
    assert report["architecture"] == "ReversibleLMHeadModel"
    assert report["final_loss"] < report["initial_loss"]
    assert abs(report["growth"][0]["loss_after"] - report["growth"][0]["loss_before"]) <= 1e-4
    assert isinstance(load_trunk(out).model, ReversibleLMHeadModel)
    with pytest.raises(ValueError, match="dropout 0"):
        tiny_pretrain_config(out, reversible=True, dropout=0.1).validate()
