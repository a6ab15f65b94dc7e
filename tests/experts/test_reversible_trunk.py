"""The reversible trunk: its backward matches autograd; it loads, serves and trains experts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from experts.reversible import MODEL_TYPE, ReversibleConfig, ReversibleLMHeadModel
from experts.sampling import Sampling
from experts.serving import ExpertServer
from experts.store import ExpertStore
from experts.testing import corpus_sample
from experts.tokenizer import train_bpe_tokenizer
from experts.trunk import Trunk, load_trunk
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert, randomize
from trainer.config import TrainerConfig
from trainer.recipes.expert import train_expert

# float32 custom backward vs plain autograd on (3, 16) tokens, width 32, 4 blocks: measured
# 3.0e-8 (float64: 6e-17); gradients themselves reach 0.18
GRAD_BOUND_FP32 = 1e-6
GRAD_BOUND_FP64 = 1e-12


def _model(layers: int = 4, width: int = 32, seed: int = 0) -> ReversibleLMHeadModel:
    torch.manual_seed(seed)
    config = ReversibleConfig(vocab_size=97, n_embd=width, n_layer=layers, n_head=4, n_positions=16)
    return ReversibleLMHeadModel(config)


def _grads(model: ReversibleLMHeadModel, invert: bool, ids, mask) -> tuple[float, dict]:
    model.zero_grad(set_to_none=True)
    model.transformer.invert_in_backward = invert
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    ("dtype", "bound"), [(torch.float64, GRAD_BOUND_FP64), (torch.float32, GRAD_BOUND_FP32)]
)
def test_the_inverting_backward_matches_autograd(dtype, bound) -> None:
    model = _model().to(dtype)
    ids = torch.randint(0, 97, (3, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 11:] = 0  # a padded row
    loss_rev, rev = _grads(model, True, ids, mask)
    loss_ref, ref = _grads(model, False, ids, mask)
    assert loss_rev == loss_ref
    assert rev.keys() == ref.keys() and len(rev) == len(list(model.parameters()))
    worst = max(float((rev[n] - ref[n]).abs().max()) for n in ref)
    assert worst < bound, f"max abs gradient difference {worst:.2e}"
    assert max(float(g.abs().max()) for g in ref.values()) > 1e3 * bound  # not all ~0


def test_an_experts_gradient_through_the_inverting_backward_is_autograds() -> None:
    model = _model()  # trainable blocks (a dense fine-tune of trunk and expert together)
    trunk = Trunk(model, None, "f" * 64, 32, 4, "gpt2", Path("."))
    expert = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(1, 3), rank=4), hidden_size=32), seed=2
    )
    mixture = Mixture(trunk, {"e": expert})
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(4))
    found = {}
    for invert in (True, False):
        model.transformer.invert_in_backward = invert
        expert.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        with mixture.routing([{"e": 1.0}, {}]):
            mixture.loss(ids, weights=[{"e": 1.0}, {}]).sum().backward()
        found[invert] = [p.grad.clone() for p in expert.parameters()]
    assert all(g.abs().max() > 0 for g in found[False])
    worst = max(float((a - b).abs().max()) for a, b in zip(found[True], found[False], strict=True))
    assert worst < GRAD_BOUND_FP32, worst


def test_a_block_inverts_its_outputs() -> None:
    block = _model(layers=1).transformer.h[0]
    x2, x1 = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    with torch.no_grad():
        y2, y1 = block(x2, x1)
    r2, r1 = block.inverse(y2, y1, None)
    assert torch.allclose(r2, x2, atol=1e-6) and torch.allclose(r1, x1, atol=1e-6)


def test_dropout_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="dropout 0"):
        ReversibleLMHeadModel(ReversibleConfig(vocab_size=10, n_embd=8, n_head=2, resid_pdrop=0.1))


@pytest.fixture(scope="module")
def reversible_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reversible-trunk")
    tokenizer = train_bpe_tokenizer(corpus_sample(), 320, out)
    eos = tokenizer.eos_token_id
    torch.manual_seed(0)
    config = ReversibleConfig(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=3,
        n_head=2,
        n_positions=128,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    ReversibleLMHeadModel(config).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def reversible(reversible_dir: Path) -> Trunk:
    return load_trunk(reversible_dir)


def test_saved_as_safetensors_with_our_model_type_and_loaded_natively(reversible_dir, reversible):
    config = json.loads((reversible_dir / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPE and "auto_map" not in config  # no remote code
    assert sorted(p.name for p in reversible_dir.glob("*.safetensors")) == ["model.safetensors"]
    assert not list(reversible_dir.glob("*.bin")) and not list(reversible_dir.glob("*.py"))
    assert isinstance(reversible.model, ReversibleLMHeadModel)
    assert (reversible.family, reversible.num_layers, reversible.hidden_size) == ("gpt2", 3, 32)
    assert not any(p.requires_grad for p in reversible.model.parameters())
    fresh = ReversibleLMHeadModel.from_pretrained(str(reversible_dir)).eval()
    ids = torch.tensor([reversible.tokenizer("In the beginning was the word")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(fresh(input_ids=ids).logits, reversible.model(input_ids=ids).logits)
    assert fresh.lm_head.weight is fresh.transformer.wte.weight  # tied, as GPT-2's


def test_experts_of_every_kind_meet_it_as_a_gpt2_trunk_and_start_function_preserving(reversible):
    vocab = reversible.model.config.vocab_size
    kinds = {
        "adapter": ExpertConfig(kind="adapter", layers=(0, 2), rank=4),
        "vocab_adapter": ExpertConfig(
            layers=(1,),
            rank=4,
            kind="vocab_adapter",
            vocab_size=vocab,
            output_rank=2,
            token_rank=2,
            token_layer=1,
            token_site="input",
            logit_bias=True,
        ),
        "vocab": ExpertConfig(
            layers=(),
            rank=0,
            kind="vocab",
            vocab_size=vocab,
            output_rank=0,
            token_rank=2,
            token_layer=0,
            token_site="mlp",
            logit_bias=False,
        ),
    }
    experts = {k: Expert(c, reversible.hidden_size) for k, c in kinds.items()}
    mixture = Mixture(reversible, experts)
    ids = torch.tensor([reversible.tokenizer("the law of the land")["input_ids"]] * 2)
    with torch.no_grad():
        base = mixture.forward(ids)
        for kind in kinds:  # an untrained expert adds exactly 0
            assert torch.equal(mixture.forward(ids, weights=[{kind: 1.0}, {}]), base), kind
        for expert in experts.values():
            randomize(expert, seed=3)
        for kind in kinds:  # a trained one changes only its own rows
            mixed = mixture.forward(ids, weights=[{kind: 1.0}, {}])
            assert not torch.equal(mixed[0], base[0]) and torch.equal(mixed[1], base[1]), kind


def test_it_serves_scores_and_generates_with_a_domain_expert(reversible, tmp_path) -> None:
    embedder = default_embedder()
    store = ExpertStore(tmp_path / "store", reversible.fingerprint)
    server = ExpertServer(
        reversible, store, embedder, Gate(top_k=1), domain_table(embedder, ("python_code",))
    )
    code = domain_texts("python_code", 1, skip=30)[0]
    trunk_only = server.score(code)
    expert = make_domain_expert(store, reversible, embedder, "code", "python_code", seed=1)
    assert server.register(expert.registration()).status == "registered"
    scored = server.score(code)
    assert scored["experts"] == {"code": 1.0}
    assert scored["mean_loss"] != pytest.approx(trunk_only["mean_loss"])
    assert len(scored["token_losses"]) > 5
    generated = server.generate(code, max_new_tokens=4)
    assert generated["experts"] == {"code": 1.0} and 1 <= generated["new_tokens"] <= 4
    drawn = [server.generate(code, max_new_tokens=4, sampling=Sampling(1.0, seed=7)) for _ in "ab"]
    assert drawn[0]["continuation"] == drawn[1]["continuation"] and drawn[0]["new_tokens"] >= 1


def test_the_ids_cache_gives_the_logits_of_the_whole_sequence(reversible) -> None:
    ids = torch.tensor([reversible.tokenizer("and the spirit moved")["input_ids"]])
    with torch.no_grad():
        whole = reversible.model(input_ids=ids).logits  # (1, T, V)
        first = reversible.model(input_ids=ids[:, :-1], use_cache=True)
        last = reversible.model(input_ids=ids[:, -1:], past_key_values=first.past_key_values)
    assert torch.allclose(last.logits[0, -1], whole[0, -1], atol=1e-5)


@pytest.mark.slow
def test_an_expert_trains_on_it_and_the_trunk_stays_bit_identical(reversible) -> None:
    before = {n: t.clone() for n, t in reversible.model.state_dict().items()}
    config = TrainerConfig(
        max_steps=12,
        seq_len=64,
        micro_batch_size=4,
        grad_accum_steps=1,
        lr=1e-2,
        warmup_steps=2,
        eval_every=6,
        patience=3,
        checkpoint_every=100,
        status_every=6,
        progress=False,
    )
    train = domain_texts("scripture", 24)
    heldout = domain_texts("scripture", 6, skip=24)
    result = train_expert(reversible, train, heldout, config)
    assert result.outcome == "finished"
    assert result.figures["heldout_ppl_after"] < result.figures["heldout_ppl_trunk"]
    curve = result.summary["loss_curve"]
    assert curve[-1][1] < curve[0][1]
    after = reversible.model.state_dict()
    assert all(torch.equal(before[n], after[n]) for n in before)
