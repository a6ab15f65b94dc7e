"""The mixture: function-preserving growth, per-sequence routing in mixed batches, gradients."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from experts import adapter_stack
from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from tests.support.experts import randomize


def _batch(trunk, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    enc = trunk.tokenizer(texts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


TEXTS = [
    "The court held that the licence applies.",
    "def f(x):\n    return x + 1",
    "In the beginning",
]


def test_untrained_expert_changes_no_trunk_output_bit_for_bit(trunk) -> None:
    ids, mask = _batch(trunk, TEXTS)
    with torch.no_grad():
        baseline = trunk.model(input_ids=ids, attention_mask=mask).logits
        zero = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=8), trunk.hidden_size)
        mixture = Mixture(trunk, {"zero": zero})
        every_row = mixture.forward(ids, mask, weights=[{"zero": 1.0}] * 3)
        some_rows = mixture.forward(ids, mask, weights=[{"zero": 0.7}, {}, {"zero": 1.0}])
    assert torch.equal(every_row, baseline)
    assert torch.equal(some_rows, baseline)


def test_rows_route_independently_in_a_mixed_batch(trunk) -> None:
    ids, mask = _batch(trunk, TEXTS)
    a = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), trunk.hidden_size), seed=1
    )
    b = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(1,), rank=4), trunk.hidden_size), seed=2
    )
    mixture = Mixture(trunk, {"a": a, "b": b})
    with torch.no_grad():
        baseline = trunk.model(input_ids=ids, attention_mask=mask).logits
        mixed = mixture.forward(ids, mask, weights=[{"a": 1.0}, {}, {"a": 0.5, "b": 0.5}])
        only_a = mixture.forward(ids[:1], mask[:1], weights=[{"a": 1.0}])
        trunk_after = trunk.model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(mixed[1], baseline[1])  # the trunk-only row is untouched, bit for bit
    assert not torch.allclose(mixed[0], baseline[0])
    assert not torch.allclose(mixed[2], baseline[2])
    n = int(mask[0].sum())
    torch.testing.assert_close(mixed[0, :n], only_a[0, :n], rtol=1e-5, atol=1e-5)
    assert torch.equal(trunk_after, baseline)  # no routing leaks outside a mixture forward


def test_one_token_forward_with_stacked_adapters_matches_per_expert_routes(trunk) -> None:
    """A one-token forward runs several experts' adapters as one stack
    (experts.adapter_stack); the first position of a two-token forward, which takes each
    expert's own route, is the same function."""
    ids, mask = _batch(trunk, TEXTS + ["Article 5. The parties agree"])
    ids = ids[:, :2]
    configs = {"a": ((0, 1), 4), "b": ((1,), 4), "c": ((0, 1), 4)}
    experts = {
        name: randomize(
            Expert(ExpertConfig(kind="adapter", layers=layers, rank=rank), trunk.hidden_size),
            seed=seed,
        )
        for seed, (name, (layers, rank)) in enumerate(configs.items(), start=1)
    }
    mixture = Mixture(trunk, experts)
    weights = [{"a": 1.0}, {}, {"a": 0.5, "b": 0.5}, {"c": 1.0}]
    assert ("mlp_stack", 1) in mixture.plan(weights, len(weights), trunk.device)
    with torch.no_grad():
        stacked = mixture.forward(ids[:, :1], weights=weights)[:, 0]  # (B, V)
        routes = mixture.forward(ids, weights=weights)[:, 0]  # (B, V)
        trunk_only = trunk.model(input_ids=ids[:, :1]).logits[:, 0]
    torch.testing.assert_close(stacked, routes, rtol=1e-5, atol=1e-5)
    assert torch.equal(stacked[1], trunk_only[1])  # a row without experts gets exactly 0
    assert not torch.allclose(stacked[0], trunk_only[0])


def test_only_a_one_token_forward_builds_the_stack(trunk) -> None:
    """Scoring, prefill and training take each expert's own route: they build no stack. A
    process that only scores (the monitor) built stacks it never used, held up to
    adapter_stack.KEPT_BYTES of them and fragmented its heap with their churn."""
    ids, _ = _batch(trunk, TEXTS)
    experts = {
        name: randomize(
            Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), trunk.hidden_size), seed
        )
        for seed, name in enumerate("ab", start=11)
    }
    mixture = Mixture(trunk, experts)
    weights = [{"a": 0.5, "b": 0.5}] * ids.shape[0]
    mine = {id(e.adapter(layer)) for e in experts.values() for layer in (0, 1)}

    def stacks() -> int:
        gc.collect()  # earlier tests' adapters freed, their ids free for reuse: forget them
        with adapter_stack._kept_lock:
            adapter_stack._drop_freed()
            return sum(1 for key in adapter_stack._kept if mine & set(key))  # adapter ids

    with torch.no_grad():
        mixture.forward(ids[:, :4], weights=weights)
        assert stacks() == 0
        mixture.forward(ids[:, :1], weights=weights)
    assert stacks() == 2  # one per layer both experts adapt


def test_kept_stacks_do_not_keep_their_experts_alive() -> None:
    """An expert the store's LRU evicts is freed although its adapters were stacked (the
    kept stacks held the adapters themselves: evicted experts stayed in memory outside the
    LRU's budget), and its stacks are dropped at the next lookup."""
    experts = [
        randomize(Expert(ExpertConfig(kind="adapter", layers=(0,), rank=4), 16), seed)
        for seed in (21, 22, 23)
    ]
    first, second, third = (e.adapter(0) for e in experts)
    assert adapter_stack.stack_of([first, second]) is not None
    key = (id(first), id(second))
    assert key in adapter_stack._kept
    freed = weakref.ref(experts[0])
    del experts[0], first
    gc.collect()
    assert freed() is None  # nothing kept it alive
    adapter_stack.stack_of([second, third])  # the next lookup drops the freed set
    assert key not in adapter_stack._kept


def test_chunked_losses_are_the_losses_of_the_whole_logits(trunk) -> None:
    """Scoring's losses through the output layer a few positions at a time (output parts
    included, rows with other experts, padding) are those of the full logits; the rows
    asked for keep their logits."""
    texts = TEXTS + ["Article 5. The parties agree"]
    ids, mask = _batch(trunk, texts)
    config = ExpertConfig(
        layers=(1,), rank=4, kind="vocab_adapter", output_rank=2, logit_bias=True
    ).for_trunk(trunk.num_layers, trunk.model.get_output_embeddings().weight.shape[0])
    experts = {
        "v": randomize(Expert(config, trunk.hidden_size), seed=3),
        "a": randomize(
            Expert(ExpertConfig(kind="adapter", layers=(0,), rank=4), trunk.hidden_size), seed=4
        ),
    }
    mixture = Mixture(trunk, experts)
    weights = [{"v": 1.0}, {}, {"a": 1.0}, {"v": 0.5, "a": 0.5}]
    with torch.no_grad():
        logits = mixture.forward(ids, mask, weights)  # (B, T, V)
        want, _ = mixture.token_losses(ids, mask, weights)
        got, kept = mixture.token_losses_chunked(ids, mask, weights, keep_logits=[0, 3], chunk=3)
        alone, none_kept = mixture.token_losses_chunked(ids, mask, weights)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kept, logits[[0, 3]], rtol=1e-5, atol=1e-5)
    assert none_kept is None


def test_bad_weights_are_refused(gpt2_trunk) -> None:
    ids, mask = _batch(gpt2_trunk, TEXTS[:2])
    mixture = Mixture(gpt2_trunk, {})
    with pytest.raises(KeyError, match="ghost"):
        mixture.forward(ids, mask, weights=[{"ghost": 1.0}, {}])
    with pytest.raises(ValueError, match="2 sequences"):
        mixture.forward(ids, mask, weights=[{}])
    deep = Expert(ExpertConfig(kind="adapter", layers=(5,), rank=2), gpt2_trunk.hidden_size)
    with pytest.raises(ValueError, match="beyond the trunk"):
        Mixture(gpt2_trunk, {"deep": deep}).forward(ids, mask, weights=[{"deep": 1.0}, {}])


def test_training_gradients_reach_only_the_expert(trunk) -> None:
    ids, mask = _batch(trunk, TEXTS)
    expert = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), trunk.hidden_size)
    mixture = Mixture(trunk, {"new": expert})
    loss = mixture.loss(ids, mask, weights=[{"new": 1.0}] * 3)
    assert loss.shape == (3,)
    loss.mean().backward()
    assert expert.adapter(0).up.weight.grad is not None
    assert expert.adapter(0).up.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in trunk.model.parameters())
    trunk_only = mixture.loss(ids, mask)
    torch.testing.assert_close(trunk_only, loss.detach())  # zero-init: same loss as the trunk


def _two_experts(trunk) -> dict[str, Expert]:
    vocab = trunk.model.config.vocab_size
    config = ExpertConfig(  # token and output deltas too: the token sites read the forward's ids
        kind="vocab_adapter",
        layers=(0, 1),
        rank=4,
        vocab_size=vocab,
        output_rank=4,
        token_rank=4,
        token_layer=1,
        token_site="input",
    )
    return {
        name: randomize(Expert(config, trunk.hidden_size), seed=seed)
        for seed, name in enumerate(("a", "b"), start=1)
    }


def test_inference_forwards_on_one_trunk_run_at_once_each_on_its_own_plan(trunk) -> None:
    ids, mask = _batch(trunk, TEXTS)
    mixture = Mixture(trunk, _two_experts(trunk))
    plans = {"a": [{"a": 1.0}] * 3, "b": [{"b": 0.6}, {}, {"a": 0.5, "b": 0.5}]}
    with torch.no_grad():
        alone = {name: mixture.forward(ids, mask, weights=w) for name, w in plans.items()}
    both_inside = threading.Barrier(2, timeout=10)  # a lock shared by the forwards never passes

    def forward_in_thread(name: str) -> torch.Tensor:
        outs = []
        with torch.no_grad(), mixture.routing(plans[name]):
            both_inside.wait()
            for _ in range(5):  # interleaved with the other thread's forwards
                outs.append(trunk.model(input_ids=ids, attention_mask=mask).logits)
        return torch.stack(outs)

    with ThreadPoolExecutor(2) as pool:
        got = dict(zip(plans, pool.map(forward_in_thread, plans), strict=True))
    for name, logits in got.items():
        for out in logits:
            torch.testing.assert_close(out, alone[name], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(alone["a"], alone["b"])
    with torch.no_grad():
        assert torch.equal(trunk.model(input_ids=ids, attention_mask=mask).logits, _trunk(trunk))


def _trunk(trunk) -> torch.Tensor:
    ids, mask = _batch(trunk, TEXTS)
    with torch.no_grad():
        return Mixture(trunk, {}).forward(ids, mask)


def test_a_training_plan_is_the_trunks_so_a_recomputation_elsewhere_sees_it(trunk) -> None:
    # a GPU's backward recomputes checkpointed activations on the autograd engine's thread
    ids, mask = _batch(trunk, TEXTS)
    mixture = Mixture(trunk, _two_experts(trunk))
    weights = [{"a": 1.0}, {"b": 1.0}, {}]
    with torch.no_grad():
        want = mixture.forward(ids, mask, weights=weights)
    with mixture.routing(weights), ThreadPoolExecutor(1) as pool:

        def elsewhere() -> torch.Tensor:
            with torch.no_grad():
                return trunk.model(input_ids=ids, attention_mask=mask).logits

        seen = pool.submit(elsewhere).result()
    torch.testing.assert_close(seen, want, rtol=1e-5, atol=1e-5)


def test_a_training_block_inside_an_inference_block_runs_on_its_own_plan(trunk) -> None:
    ids, mask = _batch(trunk, TEXTS)
    mixture = Mixture(trunk, _two_experts(trunk))
    outer, inner = [{"a": 1.0}] * 3, [{"b": 1.0}] * 3
    with torch.no_grad():
        want_outer = mixture.forward(ids, mask, weights=outer)
        want_inner = mixture.forward(ids, mask, weights=inner)
    with torch.no_grad(), mixture.routing(outer):
        with torch.enable_grad(), mixture.routing(inner):
            got_inner = trunk.model(input_ids=ids, attention_mask=mask).logits.detach()
        got_outer = trunk.model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got_inner, want_inner, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_outer, want_outer, rtol=1e-5, atol=1e-5)
