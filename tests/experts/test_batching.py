"""Batched serving: shared scoring forwards and the running generation batch give each
request what it gets alone, with its own experts, joining and leaving between steps."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from experts.sampling import Sampling
from experts.serving import CPU_TOKENS_PER_CORE, Batching, ExpertServer
from experts.serving.score_batcher import ScoreBatcher
from experts.store import ExpertStore
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert

DOMAINS = ("python_code", "legal", "biomedical")
TEXTS = [domain_texts(d, 3, skip=30)[i][: 300 + 150 * i] for d in DOMAINS for i in range(3)]
# float32 rows in another batch shape: the same numbers up to summation order
TOLERANCE = 1e-4


def _servers(trunk, tmp_path: Path) -> tuple[ExpertServer, ExpertServer]:
    """An unbatched and a batched server on one trunk and store, one expert per domain."""
    embedder = default_embedder()
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    servers = []
    for batching in (None, Batching(window_s=0.05, max_rows=8, forward_threads=2, max_tokens=4096)):
        table = domain_table(embedder, DOMAINS)
        servers.append(
            ExpertServer(trunk, store, embedder, Gate(top_k=1), table, batching=batching)
        )
    for seed, domain in enumerate(DOMAINS):
        manifest = make_domain_expert(store, trunk, embedder, f"e-{domain}", domain, seed=seed)
        for server in servers:
            assert server.register(manifest.registration()).status == "registered"
    return servers[0], servers[1]


@pytest.fixture
def servers(gpt2_trunk, tmp_path: Path) -> tuple[ExpertServer, ExpertServer]:
    return _servers(gpt2_trunk, tmp_path)


def _concurrently(fn, items):
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(fn, items))


def test_a_shared_scoring_forward_gives_each_row_its_own_losses(servers) -> None:
    alone, batched = servers
    expected = [alone.score(t, top_logprobs=2) for t in TEXTS]
    got = _concurrently(lambda t: batched.score(t, top_logprobs=2), TEXTS)
    assert batched.score_batcher.forwards < len(TEXTS)  # rows did share forwards
    assert {tuple(r["experts"]) for r in got} == {(f"e-{d}",) for d in DOMAINS}
    for want, have in zip(expected, got, strict=True):
        assert have["experts"] == want["experts"] and have["tokens"] == want["tokens"]
        diff = torch.tensor(have["token_losses"]) - torch.tensor(want["token_losses"])
        assert float(diff.abs().max()) < TOLERANCE
        assert have["top_logprobs"][3].keys() == want["top_logprobs"][3].keys()


def test_a_bfloat16_trunk_scores_as_the_float32_one_does(gpt2_trunk, trunk_dirs, tmp_path) -> None:
    from experts.trunk import load_trunk

    alone, _ = _servers(gpt2_trunk, tmp_path / "f32")
    _, batched = _servers(load_trunk(trunk_dirs["gpt2"], dtype=torch.bfloat16), tmp_path / "bf16")
    want = [alone.score(t) for t in TEXTS]
    got = _concurrently(batched.score, TEXTS)
    for have, expected in zip(got, want, strict=True):
        assert have["experts"] == expected["experts"] and have["tokens"] == expected["tokens"]
        diff = torch.tensor(have["token_losses"]) - torch.tensor(expected["token_losses"])
        # bf16 keeps 8 bits of mantissa: ~0.4 % per rounding; losses of ~6 nats stay within
        # a few hundredths per token and far closer on average
        assert float(diff.abs().max()) < 0.1 and abs(float(diff.mean())) < 0.02
        assert float(diff.abs().max()) > 0  # it did run in bf16


def test_explain_and_likelihood_rows_go_through_the_batch(servers) -> None:
    alone, batched = servers
    want = alone.score(TEXTS[0], explain=True)
    have = batched.score(TEXTS[0], explain=True)
    for key in ("with_experts", "trunk_alone"):
        assert have["explain"]["perplexity"][key] == pytest.approx(
            want["explain"]["perplexity"][key], rel=1e-4
        )


def test_the_running_batch_generates_what_each_request_generates_alone(servers) -> None:
    alone, batched = servers
    asks = [
        (text, 6 + 5 * (i % 3), None if i % 2 else Sampling(0.8, 0.95, 0, seed=i))
        for i, text in enumerate(TEXTS)
    ]
    expected = [alone.complete(t, n, sampling=s, top_logprobs=1) for t, n, s in asks]
    got = _concurrently(lambda a: batched.complete(a[0], a[1], sampling=a[2], top_logprobs=1), asks)
    assert batched.decoder.steps < sum(r["new_tokens"] for r in got)  # rows shared steps
    for want, have in zip(expected, got, strict=True):
        assert have["text"] == want["text"]
        assert have["new_tokens"] == want["new_tokens"]
        assert have["finish_reason"] == want["finish_reason"]
        for a, b in zip(have["tokens"], want["tokens"], strict=True):
            assert a["logprob"] == pytest.approx(b["logprob"], abs=TOLERANCE)


def test_a_cancelled_row_leaves_at_the_next_step_and_the_others_finish(servers) -> None:
    alone, batched = servers
    long = [t for t in TEXTS if alone.complete(t, 40, expert_weights={})["new_tokens"] == 40]
    assert len(long) >= 2, "the test needs prompts the trunk continues for 40 tokens"
    seen = []

    def leave_after_two(text: str) -> bool:
        seen.append(text)
        return len(seen) < 2

    def long_one(_):
        return batched.complete(long[1], 40, expert_weights={})

    with ThreadPoolExecutor(3) as pool:
        others = [pool.submit(long_one, None) for _ in range(2)]
        cancelled = batched.complete(long[0], 40, expert_weights={}, on_text=leave_after_two)
        results = [f.result() for f in others]
    assert cancelled["finish_reason"] == "cancelled" and cancelled["new_tokens"] <= 3
    assert all(r["new_tokens"] == 40 and r["finish_reason"] == "length" for r in results)
    assert batched.decoder.running == 0


def test_a_registration_during_a_generation_leaves_it_on_its_table(servers, tmp_path) -> None:
    _, batched = servers
    first_token = threading.Event()
    release = threading.Event()

    def hold(text: str) -> bool:
        first_token.set()
        release.wait(30)
        return True

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(batched.complete, TEXTS[0], 8, on_text=hold)
        assert first_token.wait(30)
        before = batched.table.version
        manifest = make_domain_expert(
            batched.store, batched.trunk, batched.embedder, "e-newer", DOMAINS[0], seed=9
        )
        assert batched.register(manifest.registration()).status == "registered"
        release.set()
        result = running.result(30)
    assert result["table_version"] == before and "e-newer" not in result["experts"]
    assert batched.score(TEXTS[0])["experts"] == {"e-newer": 1.0}


def test_generate_in_the_batch_gives_what_it_gives_alone(servers) -> None:
    alone, batched = servers
    greedy = [alone.generate(t, max_new_tokens=12) for t in TEXTS[:4]]
    got = _concurrently(lambda t: batched.generate(t, max_new_tokens=12), TEXTS[:4])
    for want, have in zip(greedy, got, strict=True):
        assert (have["continuation"], have["new_tokens"]) == (
            want["continuation"],
            want["new_tokens"],
        )


def test_prompts_prefilled_together_match_each_prefilled_alone(trunk) -> None:
    """Jobs waiting together are prefilled in one left-padded forward (positions per row);
    each row's next-token logits and its cache at its real positions are its own."""
    from experts.serving.decode_batch import DecodeBatch, _Job
    from experts.serving.decoding_state import Decoding

    batch = DecodeBatch(trunk)
    prompts = [TEXTS[0][:40], TEXTS[4][:300], TEXTS[8][:120]]

    def job(text: str) -> _Job:
        ids = trunk.tokenizer(text, return_tensors="pt")["input_ids"]
        return _Job(ids, {}, {}, Decoding(trunk.tokenizer, 4, None, set()))

    together, kv, mask = batch._prefill([job(p) for p in prompts])
    assert int(mask.sum(1).min()) < mask.shape[1]  # the prompts did need padding
    for i, text in enumerate(prompts):
        alone, alone_kv, _ = batch._prefill([job(text)])
        assert torch.isfinite(together[i]).all()
        assert float((together[i] - alone[0]).abs().max()) < TOLERANCE
        n = int(mask[i].sum())
        for (k, v), (ak, av) in zip(kv, alone_kv, strict=True):
            assert float((k[i, :, -n:] - ak[0]).abs().max()) < TOLERANCE
            assert float((v[i, :, -n:] - av[0]).abs().max()) < TOLERANCE
            assert not k[i, :, :-n].any() and not v[i, :, :-n].any()  # padding: zeros


def test_a_prompt_without_tokens_is_refused_before_it_joins(gpt2_trunk) -> None:
    from experts.serving.decode_batch import DecodeBatch
    from experts.serving.decoding_state import Decoding

    batch = DecodeBatch(gpt2_trunk)
    decoding = Decoding(gpt2_trunk.tokenizer, 4, None, set())
    with pytest.raises(ValueError, match="prompt"):
        batch.run(torch.zeros((1, 0), dtype=torch.long), {}, {}, decoding)
    assert batch.running == 0


def _forwards_for_four_requests(trunk, max_tokens: int) -> int:
    """Forwards one batcher thread ran for four concurrent one-row requests of 20 tokens."""
    batcher = ScoreBatcher(trunk, window_s=5.0, max_rows=8, max_tokens=max_tokens)
    ids = torch.arange(20).unsqueeze(0)  # (1, 20)
    all_in = threading.Barrier(4, timeout=10)

    def request(_) -> torch.Tensor:
        with batcher.caller():  # the thread waits for company while callers are on their way
            all_in.wait()
            return batcher.token_losses(ids, [{}], {})[0]

    losses = _concurrently(request, range(4))
    assert all(torch.equal(x, losses[0]) for x in losses)
    return batcher.forwards


def test_a_scoring_forward_holds_at_most_its_token_budget(gpt2_trunk) -> None:
    assert _forwards_for_four_requests(gpt2_trunk, max_tokens=0) == 1  # no budget: one forward
    assert _forwards_for_four_requests(gpt2_trunk, max_tokens=40) == 2  # two rows of 20 each


def test_the_token_budget_defaults_to_a_few_hundred_per_core_on_a_cpu(gpt2_trunk) -> None:
    cores = torch.get_num_threads()
    assert Batching(forward_threads=1).tokens(gpt2_trunk) == CPU_TOKENS_PER_CORE * cores
    assert Batching(forward_threads=cores).tokens(gpt2_trunk) == CPU_TOKENS_PER_CORE
    assert Batching(max_tokens=100).tokens(gpt2_trunk) == 100


def test_a_batched_cpu_server_runs_its_wide_scoring_forwards_on_the_decode_thread(
    servers,
) -> None:
    unbatched, batched = servers
    assert unbatched.score_batcher is None
    assert batched.score_batcher.wide == batched.decoder.call
