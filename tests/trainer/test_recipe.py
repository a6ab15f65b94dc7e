"""The recipe on a tiny trunk: it learns, it never touches the trunk or other experts."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from experts.store import ExpertStore
from tests.support.trainer import corpus_texts, tensor_hashes
from trainer.act_ckpt import checkpointed_blocks
from trainer.config import TrainerConfig
from trainer.recipes.expert import TrainingFailed, TrainingInterrupted, train_expert

CFG = TrainerConfig(
    max_steps=30,
    seq_len=64,
    micro_batch_size=4,
    grad_accum_steps=2,
    lr=1e-2,
    warmup_steps=3,
    eval_every=10,
    patience=3,
    checkpoint_every=10,
    status_every=5,
    progress=False,
)


@pytest.fixture(scope="module")
def scripture() -> tuple[list[str], list[str]]:
    return corpus_texts("scripture", 40), corpus_texts("scripture", 8, skip=40)


@pytest.mark.slow
def test_a_job_lowers_heldout_perplexity_and_touches_nothing_else(trunk, scripture, tmp_path):
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    existing = Expert(ExpertConfig(kind="adapter", layers=(1, 2), rank=4), trunk.hidden_size)
    with torch.no_grad():
        for p in existing.parameters():
            p.normal_(0, 0.1)
    store.put("legal-1", existing, "legal", [1.0, 0.0])
    stored_sha = store.manifest("legal-1").sha256
    parent = store.get("legal-1")
    parent_hashes = tensor_hashes(parent)
    trunk_before = tensor_hashes(trunk.model)
    events: list[tuple[str, dict]] = []

    train, heldout = scripture
    result = train_expert(
        trunk,
        train,
        heldout,
        CFG,
        job_dir=tmp_path / "job",
        on_event=lambda s, f: events.append((s, f)),
    )
    branched = train_expert(trunk, train, heldout, CFG, parent=parent)

    figures = result.figures
    assert result.outcome == "finished"
    # (a random tiny trunk bounds how far its logits can move: a few percent is real learning)
    assert figures["heldout_ppl_after"] < 0.95 * figures["heldout_ppl_trunk"]
    # recomputed from scratch: the returned expert really has that perplexity
    mixture = Mixture(trunk, {"new": result.expert})
    assert tensor_hashes(trunk.model) == trunk_before  # the trunk is bit-identical
    assert tensor_hashes(parent) == parent_hashes  # the branched-from expert is untouched
    assert store.manifest("legal-1").sha256 == stored_sha
    assert store.verify().ok == ["legal-1"]
    assert branched.summary["branched"] and branched.outcome in ("finished", "not_worth_it")
    ids = torch.tensor([trunk.tokenizer(heldout[0])["input_ids"][:64]])
    with torch.no_grad():
        assert not torch.equal(mixture.forward(ids, weights=[{"new": 1.0}]), mixture.forward(ids))
    summary = result.summary
    assert summary["tokens_seen"] == 30 * 2 * 4 * 64
    assert summary["steps"] == 30 and len(summary["loss_curve"]) == 30
    assert summary["loss_curve"][-1][1] < summary["loss_curve"][0][1]
    assert summary["savers"]["mmap_trunk"] and summary["savers"]["activation_checkpointing"]
    assert [s for s, _ in events].count("started") == 1
    assert [f["step"] for s, f in events if s == "step"] == [5, 10, 15, 20, 25, 30]


def test_the_trunk_is_memory_mapped_from_its_safetensors(trunk, scripture):
    train, heldout = scripture
    train_expert(trunk, train[:4], heldout[:2], dataclasses.replace(CFG, max_steps=1))
    wte = trunk.model.transformer.wte.weight
    # a view of a file mapping: the storage is larger than the tensor (the whole file)
    assert wte.untyped_storage().nbytes() > wte.numel() * wte.element_size()
    assert getattr(trunk.model, "_worx_mmapped", False)


def test_the_quality_gate_refuses_an_expert_that_does_not_beat_the_mixture(trunk, scripture):
    train, heldout = scripture
    strict = dataclasses.replace(CFG, max_steps=3, gate_margin=0.99)
    result = train_expert(trunk, train, heldout, strict)
    assert result.outcome == "not_worth_it"
    assert result.figures["heldout_ppl_after"] >= result.figures["gate_threshold_ppl"]


@pytest.mark.slow
def test_resume_after_interruption_gives_the_same_expert_as_a_straight_run(
    trunk, scripture, tmp_path
):
    train, heldout = scripture
    cfg = dataclasses.replace(CFG, max_steps=20, eval_every=5, checkpoint_every=100)
    straight = train_expert(trunk, train, heldout, cfg, job_dir=tmp_path / "a")

    stop = threading.Event()

    def stop_at_10(state: str, fields: dict) -> None:
        if state == "step" and fields["step"] == 10:
            stop.set()

    with pytest.raises(TrainingInterrupted):
        train_expert(
            trunk, train, heldout, cfg, job_dir=tmp_path / "b", on_event=stop_at_10, stop=stop
        )
    resumed = train_expert(trunk, train, heldout, cfg, job_dir=tmp_path / "b")
    assert resumed.summary["resumed_from_step"] == 10
    assert resumed.summary["loss_curve"] == straight.summary["loss_curve"]
    for name, tensor in straight.expert.state_dict().items():
        assert torch.equal(tensor, resumed.expert.state_dict()[name]), name


def test_activation_checkpointing_gives_the_same_gradients(trunk):
    expert = Expert(ExpertConfig(kind="adapter", layers=(1, 2), rank=4), trunk.hidden_size)
    with torch.no_grad():
        for p in expert.parameters():
            p.normal_(0, 0.1)
    mixture = Mixture(trunk, {"e": expert})
    ids = torch.randint(0, 300, (2, 16))
    weights = [{"e": 1.0}] * 2
    grads = []
    for enabled in (False, True):
        expert.zero_grad()
        with checkpointed_blocks(trunk.blocks(), 1, enabled) as wrapped, mixture.routing(weights):
            mixture.loss(ids, None, weights).mean().backward()
        assert wrapped == (2 if enabled else 0)
        grads.append([p.grad.clone() for p in expert.parameters()])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert "forward" not in vars(trunk.blocks()[1])  # unwrapped on exit


def test_empty_documents_fail_with_a_clear_reason(trunk):
    with pytest.raises(TrainingFailed) as failed:
        train_expert(trunk, ["   "], [], CFG)
    assert failed.value.reason == "no_heldout_docs"


def test_the_chunked_loss_equals_the_mixture_loss_with_the_same_gradients(trunk):
    from trainer.fused_loss import (
        chunked_sequence_loss,
        chunked_token_nll,
        output_layer,
    )

    expert = Expert(ExpertConfig(kind="adapter", layers=(2,), rank=4), trunk.hidden_size)
    with torch.no_grad():
        for p in expert.parameters():
            p.normal_(0, 0.1)
    mixture = Mixture(trunk, {"e": expert})
    ids = torch.randint(0, 300, (3, 20))
    mask = torch.ones_like(ids)
    mask[2, 15:] = 0  # a padded row
    weights = [{"e": 1.0}] * 3
    reference = mixture.loss(ids, mask, weights).mean()
    reference.backward()
    expected = [p.grad.clone() for p in expert.parameters()]
    expert.zero_grad()
    hidden = mixture.hidden(ids, mask, weights)
    chunked = chunked_sequence_loss(hidden, output_layer(trunk.model), ids, mask, chunk=7)
    chunked.backward()
    assert torch.allclose(chunked, reference, atol=1e-5)
    for a, b in zip(expected, [p.grad for p in expert.parameters()], strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert trunk.model.get_output_embeddings().weight.grad is None
    with torch.no_grad():
        losses, valid = mixture.token_losses(ids, mask, weights)
        hidden = mixture.hidden(ids, mask, weights)
        nll, count = chunked_token_nll(hidden, output_layer(trunk.model), ids, mask, chunk=5)
    assert count == float(valid.sum()) == 3 * 19 - 5
    assert nll == pytest.approx(float(losses.sum()), rel=1e-5)


def test_a_float16_trunk_is_mapped_through_a_float32_cache(trunk_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from experts.trunk import load_trunk
    from trainer.expert_setup import prepare_trunk

    half = tmp_path / "half"
    shutil.copytree(trunk_dir, half)
    weights = load_file(str(half / "model.safetensors"))
    save_file({k: v.half() for k, v in weights.items()}, str(half / "model.safetensors"))
    loaded = load_trunk(half)  # float32 in memory, float16 on disk
    expected = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    prepare_trunk(loaded, CFG, cache_dir=tmp_path / "cache")
    caches = list((tmp_path / "cache").glob("*.safetensors"))
    assert len(caches) == 1 and "float32" in caches[0].name
    wte = loaded.model.transformer.wte.weight
    assert wte.dtype == torch.float32
    assert wte.untyped_storage().nbytes() > wte.numel() * 4  # a view of the mapped cache file
    for name, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
