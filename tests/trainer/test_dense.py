"""The dense fine-tune baseline: every trunk weight trains; the trunk files stay as they are."""

from __future__ import annotations

import pytest
import torch

from experts.trunk import trunk_fingerprint
from tests.support.trainer import corpus_texts
from trainer.recipes.dense import DenseConfig, load_trainable, perplexity, sequential_dense_finetune

CFG = DenseConfig(
    steps=8,
    seq_len=64,
    micro_batch_size=4,
    grad_accum_steps=1,
    lr=3e-3,
    warmup_steps=1,
    progress=False,
)


@pytest.mark.slow
def test_sequential_dense_finetune_trains_every_weight_domain_after_domain(trunk_dir):
    fingerprint = trunk_fingerprint(trunk_dir)
    model, tokenizer = load_trainable(trunk_dir)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert all(p.requires_grad for p in model.parameters())
    legal_heldout = corpus_texts("legal", 4, skip=20)
    ppl_before = perplexity(model, tokenizer, legal_heldout, seq_len=64)
    seen: list[tuple[str, float]] = []

    def after(domain, m, tok):
        seen.append((domain, perplexity(m, tok, legal_heldout, seq_len=64)))

    results = sequential_dense_finetune(
        model,
        tokenizer,
        [("legal", corpus_texts("legal", 20)), ("news", corpus_texts("news", 20))],
        CFG,
        after_domain=after,
    )
    assert [d for d, _ in seen] == ["legal", "news"]
    assert seen[0][1] < ppl_before  # it learned the first domain
    assert [r.steps for r in results] == [8, 8]
    assert results[0].tokens == 8 * 4 * 64
    assert results[0].optimizer_state_bytes / results[0].trainable_params >= 8.0
    changed = [name for name, p in model.named_parameters() if not torch.equal(p, before[name])]
    assert len(changed) == len(before)  # all trunk weights trained
    assert trunk_fingerprint(trunk_dir) == fingerprint  # the trunk on disk is untouched


def test_fused_gelu_computes_the_same_function(trunk_dir):
    from experts.trunk import use_fused_gelu

    model, _ = load_trainable(trunk_dir)
    model.eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        assert use_fused_gelu(model) == model.config.n_layer
        after = model(input_ids=ids).logits
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
    assert use_fused_gelu(model) == 0  # nothing left to swap
