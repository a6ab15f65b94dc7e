"""Every forward on all the torch threads runs on the decode batch's thread (one OpenMP
pool in the process: a second makes libgomp stop spinning, experts/serving/decode_batch.py)."""

from __future__ import annotations

import threading

import pytest
import torch

from experts.serving.decode_batch import DecodeBatch
from experts.serving.decoding_state import Decoding
from experts.serving.score_batcher import ScoreBatcher


def test_a_call_runs_on_the_batch_thread_and_raises_in_the_caller(gpt2_trunk) -> None:
    batch = DecodeBatch(gpt2_trunk)
    seen: list[str] = []
    batch.call(lambda: seen.append(threading.current_thread().name))
    assert seen == ["decode-batch"]

    def fail() -> None:
        raise ValueError("inside the call")

    with pytest.raises(ValueError, match="inside the call"):
        batch.call(fail)


def test_a_call_runs_between_the_steps_of_a_running_generation(gpt2_trunk) -> None:
    batch = DecodeBatch(gpt2_trunk)
    started, release = threading.Event(), threading.Event()

    def on_text(_: str) -> bool:
        started.set()
        release.wait(10)  # the row stays in the batch until the call has run
        return True

    ids = gpt2_trunk.tokenizer("def add(a, b):", return_tensors="pt")["input_ids"]
    decoding = Decoding(gpt2_trunk.tokenizer, 24, None, set(), on_text=on_text)
    generation = threading.Thread(target=batch.run, args=(ids, {}, {}, decoding))
    generation.start()
    assert started.wait(30)
    running: list[int] = []
    caller = threading.Thread(target=batch.call, args=(lambda: running.append(batch.running),))
    caller.start()
    release.set()
    caller.join(30)
    generation.join(30)
    assert running and running[0] == 1  # it ran while the row was still in the batch
    assert decoding.finish is not None and len(decoding.continuation.ids) >= 1


def test_a_scoring_forward_on_every_torch_thread_is_handed_to_wide(gpt2_trunk) -> None:
    ids = torch.arange(30).unsqueeze(0)  # (1, 30)
    alone = ScoreBatcher(gpt2_trunk, threads=2, torch_threads=2)
    expected = alone.token_losses(ids, [{}], {})[0]

    handed = ScoreBatcher(gpt2_trunk, threads=2, torch_threads=2)
    names: list[str] = []

    def wide(fn) -> None:
        def run() -> None:
            names.append(threading.current_thread().name)
            fn()

        thread = threading.Thread(target=run, name="wide")
        thread.start()
        thread.join()

    handed.wide = wide
    got = handed.token_losses(ids, [{}], {})[0]
    assert names == ["wide"]  # one request in progress: a forward on both torch threads
    assert torch.allclose(got, expected, atol=1e-5)

    one_thread = ScoreBatcher(gpt2_trunk, threads=1, torch_threads=1)
    one_thread.wide = wide
    one_thread.token_losses(ids, [{}], {})
    assert names == ["wide"]  # a forward on one torch thread stays where it is
