"""The recipe trains every expert kind: same loss and gradients chunked or not, it learns."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from tests.support.trainer import corpus_texts, tensor_hashes
from trainer.act_ckpt import checkpointed_blocks
from trainer.config import TrainerConfig
from trainer.fused_loss import chunked_sequence_loss, output_layer
from trainer.recipes.expert import train_expert

CFG = TrainerConfig(
    max_steps=20,
    seq_len=64,
    micro_batch_size=4,
    grad_accum_steps=1,
    warmup_steps=2,
    eval_every=20,
    patience=3,
    progress=False,
)
SETTINGS = {  # TrainerConfig fields of each kind measured here
    "adapter": {"expert": ExpertConfig(kind="adapter", rank=8)},
    "vocab": {"expert": ExpertConfig(kind="vocab", output_rank=4, token_rank=4)},
    "vocab_adapter_tokens_at_input": {"expert": ExpertConfig(rank=8, output_rank=4)},
    "vocab_adapter_tokens_beside_mlp": {
        "expert": ExpertConfig(rank=8, output_rank=4, token_layer=2, token_site="mlp"),
    },
}


def _vocab_config(trunk, **kwargs) -> ExpertConfig:
    vocab = int(output_layer(trunk.model).weight.shape[0])
    parts = dict(token_rank=0, token_layer=0, token_site="input")  # unless kwargs say
    return ExpertConfig(
        kind="vocab_adapter",
        vocab_size=vocab,
        output_rank=3,
        logit_bias=True,
        **{**parts, **kwargs},
    )


def _random(expert: Expert) -> Expert:
    with torch.no_grad():
        for p in expert.parameters():
            p.normal_(0, 0.1)
    return expert


@pytest.mark.parametrize(
    "parts",
    [
        {"layers": (2,), "rank": 4, "token_rank": 2, "token_layer": 0},
        {"layers": (2,), "rank": 4, "token_rank": 2, "token_layer": 2, "token_site": "mlp"},
        {"layers": (1, 2), "rank": 4},
    ],
)
def test_the_chunked_loss_trains_the_output_part_as_the_full_logits_would(trunk, parts) -> None:
    torch.manual_seed(0)
    expert = _random(Expert(_vocab_config(trunk, **parts), trunk.hidden_size))
    mixture = Mixture(trunk, {"e": expert})
    ids = torch.randint(0, 300, (3, 20))
    mask = torch.ones_like(ids)
    mask[2, 15:] = 0
    weights = [{"e": 1.0}] * 3
    reference = mixture.loss(ids, mask, weights).mean()  # through the output hook
    reference.backward()
    expected = {n: p.grad.clone() for n, p in expert.named_parameters()}
    expert.zero_grad()
    hidden = mixture.hidden(ids, mask, weights)
    chunked = chunked_sequence_loss(
        hidden, output_layer(trunk.model), ids, mask, chunk=7, output=expert.output
    )
    chunked.backward()
    assert torch.allclose(chunked, reference, atol=1e-5)
    for name, p in expert.named_parameters():
        assert torch.allclose(p.grad, expected[name], atol=1e-5), name
    assert trunk.model.get_output_embeddings().weight.grad is None


@pytest.mark.parametrize("site", ["input", "mlp"])
def test_activation_checkpointing_recomputes_token_deltas_with_their_ids(trunk, site) -> None:
    """Backward recomputes the blocks after the forward's own routing block has closed."""
    expert = _random(
        Expert(
            _vocab_config(
                trunk, layers=(1, 2), rank=4, token_rank=2, token_layer=1, token_site=site
            ),
            trunk.hidden_size,
        )
    )
    mixture = Mixture(trunk, {"e": expert})
    ids = torch.randint(0, 300, (2, 16))
    mask = torch.ones_like(ids)
    weights = [{"e": 1.0}] * 2
    head = output_layer(trunk.model)
    grads = []
    for enabled in (False, True):
        expert.zero_grad()
        with checkpointed_blocks(trunk.blocks(), 1, enabled), mixture.routing(weights):
            hidden = mixture.hidden(ids, mask, weights)  # a nested routing block
            chunked_sequence_loss(hidden, head, ids, mask, output=expert.output).backward()
        grads.append({n: p.grad.clone() for n, p in expert.named_parameters()})
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


@pytest.mark.parametrize("kind", list(SETTINGS))
def test_every_kind_learns_and_leaves_the_trunk_untouched(trunk, kind) -> None:
    train, heldout = corpus_texts("scripture", 40), corpus_texts("scripture", 8, skip=40)
    before = tensor_hashes(trunk.model)
    config = dataclasses.replace(CFG, **SETTINGS[kind])
    result = train_expert(trunk, train, heldout, config)
    summary = result.summary
    assert summary["expert_config"].get("kind", "adapter") == config.expert.kind
    assert summary["heldout_ppl_after"] < (1 - CFG.gate_margin) * summary["heldout_ppl_trunk"]
    assert tensor_hashes(trunk.model) == before


@pytest.mark.slow
def test_a_new_domain_starts_from_the_existing_expert_that_fits_it_best(trunk) -> None:
    """DEMix: the best-fitting candidate is copied (never modified); a bad one is not taken."""
    train, heldout = corpus_texts("scripture", 40), corpus_texts("scripture", 8, skip=40)
    config = dataclasses.replace(CFG, **SETTINGS["vocab_adapter_tokens_beside_mlp"])
    fitted = train_expert(trunk, train, heldout, config).expert
    noise = _random(Expert(fitted.config, trunk.hidden_size))  # worse than the trunk alone
    before = {"fitted": tensor_hashes(fitted), "noise": tensor_hashes(noise)}
    candidates = {"fitted": fitted, "noise": noise}
    every_row = dataclasses.replace(config, candidate_eval_rows=0)  # compared on every row
    result = train_expert(trunk, train[:20], heldout, every_row, candidates=candidates)
    summary = result.summary
    assert summary["started_from_expert_id"] == "fitted"
    assert summary["start_candidates_ppl"]["fitted"] < summary["heldout_ppl_trunk"]
    assert summary["start_candidates_ppl"]["noise"] > summary["heldout_ppl_trunk"]
    # the quality gate compares against the start, not the trunk
    assert summary["heldout_ppl_current"] == pytest.approx(
        summary["start_candidates_ppl"]["fitted"], rel=1e-4
    )
    assert tensor_hashes(fitted) == before["fitted"]
    assert tensor_hashes(noise) == before["noise"]
    alone = train_expert(trunk, train[:20], heldout, config, candidates={"noise": noise})
    assert alone.summary["started_from_expert_id"] is None
    # compared on the first row alone, the same choice; the gate's reference is still the
    # copy's figure on every held-out row
    one_row = dataclasses.replace(every_row, candidate_eval_rows=1)
    assert result.summary["heldout_rows"] > 1
    quick = train_expert(trunk, train[:20], heldout, one_row, candidates=candidates).summary
    assert quick["started_from_expert_id"] == "fitted"
    assert quick["start_candidates_ppl"] != summary["start_candidates_ppl"]
    assert quick["heldout_ppl_current"] == pytest.approx(summary["heldout_ppl_current"], rel=1e-4)
    assert quick["heldout_ppl_trunk"] == pytest.approx(summary["heldout_ppl_trunk"], rel=1e-4)
