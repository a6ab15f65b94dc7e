"""The recipe grows a start from an existing expert: to the configured shape, and further when
the job's data has outgrown the parent (trainer.growth_*); step 0 is the parent's function."""

from __future__ import annotations

import dataclasses

import pytest

from experts.expert import ExpertConfig
from experts.growth import union_config
from tests.support.trainer import corpus_texts, tensor_hashes
from trainer.config import TrainerConfig
from trainer.recipes.expert import train_expert

SMALL = dict(rank=16, output_rank=16, token_rank=16, layers=(2,))  # [trainer.expert]
CFG = TrainerConfig(
    max_steps=2,
    seq_len=64,
    micro_batch_size=4,
    grad_accum_steps=1,
    warmup_steps=1,
    eval_every=2,
    candidate_eval_rows=0,
    progress=False,
    device="cpu",
    expert=ExpertConfig(**SMALL),
)
TRAIN, HELD = corpus_texts("legal", 12), corpus_texts("legal", 4, skip=12)


@pytest.fixture(scope="module")
def parent(trunk):
    """A trained expert of the small shape (legal documents)."""
    config = dataclasses.replace(CFG, max_steps=8, eval_every=8)
    return train_expert(trunk, TRAIN, HELD, config).expert


def _run(trunk, parent, own: float, **changes):
    config = dataclasses.replace(CFG, **changes)
    return train_expert(
        trunk, TRAIN, HELD, config, parent=parent, parent_id="P", own_ppl={"P": own}
    )


def _step0(result) -> float:
    return result.summary["eval_curve"][0][1]


def test_a_branch_grows_to_the_configured_shape_and_starts_as_its_parent(trunk, parent) -> None:
    hashes = tensor_hashes(parent)
    larger = {"expert": ExpertConfig(**{**SMALL, "rank": 32, "output_rank": 32, "layers": (1, 2)})}
    kept = _run(trunk, parent, own=1.0, growth_fit_ratio=0.0, grow_to_configured=False, **larger)
    grown = _run(trunk, parent, own=1.0, growth_fit_ratio=0.0, **larger)
    assert kept.expert.config == parent.config and kept.summary["growth"] is None
    want = dataclasses.replace(parent.config, layers=(1, 2), rank=32, output_rank=32)
    assert grown.expert.config == want == union_config(parent.config, want)
    growth = grown.summary["growth"]
    assert growth["reasons"] == ["configured_shape"]
    assert growth["changed"] == {"layers": [[2], [1, 2]], "rank": [16, 32], "output_rank": [16, 32]}
    assert growth["params_before"] == parent.num_params() < grown.summary["trainable_params"]
    assert _step0(grown) == _step0(kept)  # bit for bit: the grown start is the parent's function
    assert tensor_hashes(parent) == hashes


def test_the_growth_rule_fires_when_the_data_outgrew_the_parent(trunk, parent) -> None:
    # the parent's own held-out ppl far below what it gets on the job's documents: outgrown
    outgrown = _run(trunk, parent, own=1.0, growth_fit_ratio=2.0, growth_rank_factor=2)
    growth = outgrown.summary["growth"]
    assert growth["reasons"] == ["outgrown"] and growth["parent_fit_ratio"] > 2.0
    config = outgrown.expert.config
    assert (config.rank, config.output_rank, config.token_rank) == (32, 32, 32)
    assert config.layers == (0, 1, 2)  # growth_all_layers: an adapter in every block
    same = _run(trunk, parent, own=1.0, growth_fit_ratio=0.0)
    assert _step0(outgrown) == _step0(same)
    ranks_only = _run(trunk, parent, own=1.0, growth_all_layers=False)
    assert ranks_only.expert.config.layers == parent.config.layers
    assert ranks_only.expert.config.rank == 32


def test_the_growth_rule_does_not_fire_on_data_the_parent_still_fits(trunk, parent) -> None:
    fits = _run(trunk, parent, own=1e9, growth_fit_ratio=2.0)  # ratio far below 2
    assert fits.summary["growth"] is None and fits.expert.config == parent.config
    unknown = train_expert(trunk, TRAIN, HELD, CFG, parent=parent)  # no reference figure
    assert unknown.summary["growth"] is None and unknown.expert.config == parent.config


def test_a_demix_start_grows_by_the_rule_too(trunk, parent) -> None:
    result = train_expert(
        trunk,
        corpus_texts("scripture", 12),
        corpus_texts("scripture", 4, skip=12),
        CFG,
        candidates={"C": parent},
        own_ppl={"C": 1.0},
    )
    assert result.summary["started_from_expert_id"] == "C"
    assert result.summary["growth"]["reasons"] == ["outgrown"]
    assert result.expert.config.rank == 32


def test_a_start_does_not_grow_past_its_share_of_the_trunk(trunk, parent) -> None:
    trunk_params = trunk.num_params()
    grown = _run(trunk, parent, own=1.0, growth_max_trunk_share=0.0)  # 0: no bound
    assert grown.summary["growth"]["reasons"] == ["outgrown"]
    between = (parent.num_params() + grown.summary["trainable_params"]) / 2 / trunk_params
    bounded = _run(trunk, parent, own=1.0, growth_max_trunk_share=between)
    assert bounded.summary["growth"] is None and bounded.expert.config == parent.config
    assert _step0(bounded) == _step0(grown)  # both start as the parent's function
    wider = _run(trunk, parent, own=1.0, growth_max_trunk_share=2 * between)
    assert wider.expert.config == grown.expert.config


def test_growth_settings_are_validated() -> None:
    for bad in (
        dict(growth_fit_ratio=-1.0),
        dict(growth_rank_factor=0),
        dict(growth_max_trunk_share=-0.5),
    ):
        with pytest.raises(ValueError, match="growth"):
            dataclasses.replace(CFG, **bad).validate()
