"""The planner's activation bytes of a reversible trunk: flat in depth, as autograd holds them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from experts.reversible import ReversibleConfig, ReversibleLMHeadModel
from topology.commands import main as worx_main
from trainer.plan import RunShape, TrunkShape
from trainer.plan.bytes import dense_step
from trainer.plan.saved import SavedBytes

RUN = RunShape(micro_batch=2, seq_len=32)


def _held(trunk: TrunkShape) -> int:
    """Activation bytes alive at the peak of a dense step's forward/backward."""
    step = dense_step(trunk, RUN, act_bytes=4, on_gpu=False)
    return step.saved + step.recompute


def test_reversible_activation_bytes_are_flat_in_depth_and_standard_ones_grow() -> None:
    gpt2 = TrunkShape.named("gpt2")
    standard = {n: _held(dataclasses.replace(gpt2, layers=n)) for n in (4, 8, 16, 48)}
    reversible = {
        n: _held(dataclasses.replace(gpt2, layers=n, reversible=True)) for n in (4, 8, 16, 48)
    }
    assert len(set(reversible.values())) == 1  # flat: the same bytes at every depth
    assert standard[16] / standard[4] > 3.5 and standard[48] > 10 * reversible[48]


def test_a_worx_reversible_config_is_read_as_a_reversible_gpt2_layout() -> None:
    config = ReversibleConfig(vocab_size=256, n_embd=64, n_layer=3, n_head=4, n_positions=32)
    shape = TrunkShape.from_config(config.to_dict())
    assert (shape.family, shape.reversible, shape.layers, shape.hidden) == ("gpt2", True, 3, 64)
    model = ReversibleLMHeadModel(config)
    assert shape.params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("layers", [2, 6])
def test_the_planned_figure_is_what_autograd_holds_at_its_peak(layers) -> None:
    config = ReversibleConfig(vocab_size=256, n_embd=64, n_layer=layers, n_head=4, n_positions=32)
    torch.manual_seed(0)
    model = ReversibleLMHeadModel(config).train()
    ids = torch.randint(0, 256, (RUN.micro_batch, RUN.seq_len))
    counter = SavedBytes(model)
    with counter:
        model.transformer(input_ids=ids).last_hidden_state.sum().backward()
    assert counter.live == 0
    planned = _held(TrunkShape.from_config(config.to_dict()))
    # measured 30.2 d per token (3.1 d held + 27.1 d for one block); planned 32 d + 1
    assert planned == pytest.approx(counter.peak, rel=0.08)


def test_worx_plan_reversible_flag(capsys) -> None:
    assert worx_main(["plan", "--trunk", "gpt2-xl", "--reversible", "--json"]) == 0
    assert '"reversible": true' in capsys.readouterr().out
    assert worx_main(["plan", "--trunk", "llama-7b", "--reversible"]) == 2
    assert "GPT-2 layout" in capsys.readouterr().err
