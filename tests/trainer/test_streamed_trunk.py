"""The streamed trunk (trainer.stream_trunk) computes what the in-memory trunk computes.

A tiny Llama written by experts.random_trunk (bf16, sharded, with an index) is trained on
twice: opened by load_mapped_trunk and streamed, and loaded by load_trunk into process
memory as float32 (exactly the bf16 values: the function the streamed recipe computes).
Losses, expert gradients and trained weights agree to 1e-6 relative (both runs do the same
float32 arithmetic; the bound allows for a different summation order only), the trunk's
files are byte-identical afterwards, and the trunk is left unparametrized.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
import torch
from torch.nn.utils import parametrize

from experts.expert import Expert
from experts.random_trunk import LlamaShape, is_complete, write_random_llama
from experts.trunk import TrunkError, load_trunk
from tests.support.trainer import corpus_texts
from trainer.config import TrainerConfig
from trainer.expert_setup import expert_config_for
from trainer.mapped_trunk import load_mapped_trunk, map_stored_weights
from trainer.recipes.expert import TRAINING_ID, ExpertRecipe, train_expert
from trainer.stream_trunk import streamed_weights

SHAPE = LlamaShape(layers=4, hidden=64, heads=4, intermediate=128, vocab=8192)
TOLERANCE = 1e-6  # relative, on losses, gradients and weights
CFG = TrainerConfig(
    max_steps=3,
    seq_len=32,
    micro_batch_size=2,
    grad_accum_steps=1,
    warmup_steps=1,
    eval_every=3,
    max_eval_rows=2,
    start_candidates=0,
    device="cpu",
    progress=False,
)
STREAMED = dataclasses.replace(CFG, stream_trunk=True, stream_read_ahead=1)
IN_MEMORY = dataclasses.replace(CFG, mmap_trunk=False)


@pytest.fixture(scope="module")
def trunk_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("streamed") / "llama"
    return write_random_llama(out, SHAPE, seed=3, max_shard_bytes=1 << 20, progress=False)


def _file_hashes(path: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    scale = max(float(a.abs().max()), 1e-12)
    return float((a - b).abs().max()) <= TOLERANCE * scale


def _loss_and_grads(trunk, config, expert: Expert, texts):
    """The recipe's own loss and expert gradients for one batch, ``expert`` copied in."""
    recipe = ExpertRecipe(trunk, config)
    try:
        recipe.setup(texts[:-2], texts[-2:])
        recipe.expert.load_state_dict(expert.state_dict())
        ids, mask = recipe.stream.next()  # (B, T)
        weights = [{TRAINING_ID: 1.0}] * len(ids)
        with recipe.mixture.routing(weights):
            loss = recipe._loss(ids, mask, weights)
            loss.backward()
        grads = {name: p.grad.clone() for name, p in recipe.expert.named_parameters()}
        return loss.detach(), grads
    finally:
        recipe.cleanup()


def test_writer_shards_and_reuses(trunk_path: Path) -> None:
    shards = sorted(trunk_path.glob("*.safetensors"))
    assert len(shards) > 1 and (trunk_path / "model.safetensors.index.json").is_file()
    assert is_complete(trunk_path, SHAPE, seed=3) and not is_complete(trunk_path, SHAPE, seed=4)
    before = [f.stat().st_mtime_ns for f in shards]
    assert write_random_llama(trunk_path, SHAPE, seed=3, progress=False) == trunk_path
    assert [f.stat().st_mtime_ns for f in shards] == before  # reused, not rewritten
    with pytest.raises(FileExistsError, match="remove it or choose another"):
        write_random_llama(trunk_path, SHAPE, seed=4, progress=False)
    trunk = load_mapped_trunk(trunk_path)
    assert trunk.dtype == torch.bfloat16
    assert trunk.num_params() == SHAPE.num_params()


def test_streamed_recipe_matches_in_memory(trunk_path: Path) -> None:
    files = _file_hashes(trunk_path)
    texts = corpus_texts("biomedical", 12)
    streamed = load_mapped_trunk(trunk_path)
    in_memory = load_trunk(trunk_path)  # float32 copies of the bf16 weights
    # an expert whose every part is non-zero, so every gradient is
    torch.manual_seed(1)
    expert = Expert(expert_config_for(in_memory, CFG), in_memory.hidden_size)
    with torch.no_grad():
        for p in expert.parameters():
            p.add_(0.02 * torch.randn_like(p))
    loss_a, grads_a = _loss_and_grads(streamed, STREAMED, expert, texts)
    loss_b, grads_b = _loss_and_grads(in_memory, IN_MEMORY, expert, texts)
    assert torch.isfinite(loss_a) and _close(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        assert float(grads_a[name].abs().max()) > 0, name
        assert _close(grads_a[name], grads_b[name]), name

    result_a = train_expert(streamed, texts[:-2], texts[-2:], STREAMED)
    result_b = train_expert(in_memory, texts[:-2], texts[-2:], IN_MEMORY)
    losses_a = torch.tensor([loss for _, loss in result_a.summary["loss_curve"]])
    losses_b = torch.tensor([loss for _, loss in result_b.summary["loss_curve"]])
    assert len(losses_a) == 3 and _close(losses_a, losses_b)
    weights_b = result_b.expert.state_dict()
    for name, value in result_a.expert.state_dict().items():
        assert _close(value, weights_b[name]), name
    assert result_a.summary["savers"]["stream_trunk"]
    assert streamed.dtype == torch.bfloat16  # no float32 copy kept
    assert not any(parametrize.is_parametrized(m) for m in streamed.model.modules())
    assert _file_hashes(trunk_path) == files


def test_streaming_refuses_a_trunk_it_did_not_map(trunk_path: Path) -> None:
    trunk = load_trunk(trunk_path)
    with pytest.raises(ValueError, match="mapped by trainer.mapped_trunk"):
        with streamed_weights(trunk):
            pass
    other = write_random_llama(
        trunk_path.parent / "wider", dataclasses.replace(SHAPE, hidden=128), progress=False
    )
    with pytest.raises(TrunkError, match="does not match the weights"):
        map_stored_weights(trunk.model, other)
