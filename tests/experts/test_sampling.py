"""/generate sampling: temperature, top-k, top-p with a seed beside greedy, on tiny trunks."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from experts.sampling import Sampling
from experts.serving import ExpertServer
from experts.store import ExpertStore
from router.embed import default_embedder
from router.gate import Gate
from topology.serve.http_api import make_http_server

TEXT = "def add(a, b):\n    return a + b\n"
TRUNK_ONLY: dict[str, float] = {}  # no expert: the continuation is the trunk's


def _server(trunk, root: Path) -> ExpertServer:
    return ExpertServer(
        trunk, ExpertStore(root, trunk.fingerprint), default_embedder(), Gate(top_k=1)
    )


@pytest.fixture
def server(trunk, tmp_path: Path) -> ExpertServer:
    return _server(trunk, tmp_path / "store")


def _generate(server: ExpertServer, sampling: Sampling | None, tokens: int = 24) -> dict:
    return server.generate(TEXT, tokens, TRUNK_ONLY, sampling)


def test_the_same_seed_gives_the_same_text_and_other_seeds_another(server) -> None:
    torch.manual_seed(123)  # the global RNG plays no part
    first = _generate(server, Sampling(temperature=1.0, seed=1))
    torch.manual_seed(999)
    again = _generate(server, Sampling(temperature=1.0, seed=1))
    assert first["continuation"] == again["continuation"] and first["new_tokens"] > 0
    assert first["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 1}
    # a random tiny trunk at temperature 1 spreads its mass over ~320 tokens: 24 draws of
    # two seeds agreeing everywhere has a chance far below 1e-20
    others = {_generate(server, Sampling(temperature=1.0, seed=s))["continuation"] for s in (2, 3)}
    assert first["continuation"] not in others and len(others) == 2


def test_top_k_one_and_a_tiny_top_p_are_greedy(server) -> None:
    greedy = _generate(server, None)
    assert greedy["sampling"] is None
    top_k = _generate(server, Sampling(temperature=1.0, top_k=1, seed=7))
    top_p = _generate(server, Sampling(temperature=2.0, top_p=1e-9, seed=8))
    assert top_k["continuation"] == top_p["continuation"] == greedy["continuation"]
    assert top_k["new_tokens"] == greedy["new_tokens"]


def test_concurrent_requests_keep_their_own_seed(server) -> None:
    alone = {
        seed: _generate(server, Sampling(0.9, 0.95, 50, seed))["continuation"] for seed in (4, 5)
    }
    together: dict[int, str] = {}

    def run(seed: int) -> None:
        together[seed] = _generate(server, Sampling(0.9, 0.95, 50, seed))["continuation"]

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (4, 5, 4, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert together == alone


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


NEEDS_TEMPERATURE = (
    "'top_p', 'top_k' and 'seed' apply to sampling: give 'temperature' > 0 "
    "(0, the default, is greedy)"
)
BAD = [
    ({"temperature": -0.5}, "'temperature' must be in [0, 10] (0 is greedy)"),
    ({"temperature": 11}, "'temperature' must be in [0, 10] (0 is greedy)"),
    ({"temperature": "hot"}, "'temperature' must be a finite number"),
    ({"temperature": True}, "'temperature' must be a finite number"),
    ({"temperature": 1, "top_p": 0}, "'top_p' must be in (0, 1]"),
    ({"temperature": 1, "top_p": 1.5}, "'top_p' must be in (0, 1]"),
    ({"temperature": 1, "top_k": -1}, "'top_k' must be an integer in [0, 1000000]"),
    ({"temperature": 1, "top_k": 2.5}, "'top_k' must be an integer in [0, 1000000]"),
    ({"temperature": 1, "seed": -1}, "'seed' must be an integer in [0, 9223372036854775807]"),
    ({"temperature": 1, "seed": 2**63}, "'seed' must be an integer in [0, 9223372036854775807]"),
    ({"temperature": 1, "seed": "7"}, "'seed' must be an integer in [0, 9223372036854775807]"),
    ({"top_k": 40}, NEEDS_TEMPERATURE),
    ({"temperature": 0, "seed": 3}, NEEDS_TEMPERATURE),
]


def test_http_generate_samples_reproducibly_and_refuses_bad_values(gpt2_trunk, tmp_path) -> None:
    httpd = make_http_server(_server(gpt2_trunk, tmp_path / "store"), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/generate"
    base = {"text": TEXT, "max_new_tokens": 12, "experts": {}}
    try:
        status, drawn = _post(url, {**base, "temperature": 0.8, "top_p": 0.9, "top_k": 20})
        assert status == 200, drawn
        seed = drawn["sampling"]["seed"]  # none given: one was drawn, and answered
        assert isinstance(seed, int)
        body = {**base, "temperature": 0.8, "top_p": 0.9, "top_k": 20, "seed": seed}
        assert _post(url, body) == (200, drawn)
        status, greedy = _post(url, {**base, "temperature": 0})
        assert status == 200 and greedy["sampling"] is None
        assert _post(url, base) == (200, greedy)  # greedy is the default
        for extra, reason in BAD:
            assert _post(url, {**base, **extra}) == (400, {"error": reason}), extra
    finally:
        httpd.stop()
