"""The loop's serve front (topology/serve/front.py) before two real ``worx serve --run``
processes on one finished run (a tiny trunk, the domain ``python_code`` and its expert
``code``, a bearer token): it answers what a replica answers, streams pass through, and a
paused or killed replica costs no request; with none left it answers 503."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from experts.store import ExpertStore
from experts.trunk import load_trunk
from router.embed import default_embedder
from router.table_file import SavedTable
from tests.support.experts import (
    domain_record,
    domain_texts,
    make_domain_expert,
    trunk_dirs,  # noqa: F401 - the shared fixture
)
from tests.support.processes import read_line, start_worx
from topology.composition.run_dir import write_run_file
from topology.serve.front import ServeFront
from worx.web import HttpLimits

TOKEN = "front-test-token-51c7"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
CODE = domain_texts("python_code", 1, skip=30)[0]


def _post(url: str, body: bytes, headers: dict[str, str] = AUTH) -> tuple[int, dict, dict]:
    """``(status, JSON answer, headers)`` of ``POST url``."""
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def _score(url: str) -> tuple[int, dict, dict]:
    return _post(f"{url}/score", json.dumps({"text": CODE}).encode())


def _finished_run(root: Path, trunk_dir: Path) -> Path:
    trunk = load_trunk(trunk_dir)
    store = ExpertStore(root / "store", trunk.fingerprint)
    embedder = default_embedder()
    make_domain_expert(store, trunk, embedder, "code", "python_code", seed=1)
    run = root / "run"
    write_run_file(run, trunk_dir, store.root, run / "monitor")
    SavedTable(run / "domains.json").apply(domain_record(embedder, "python_code"))
    return run


@pytest.fixture
def replicas(trunk_dirs, tmp_path):  # noqa: F811 - the fixture imported above
    run = _finished_run(tmp_path, trunk_dirs["gpt2"])
    env = {"WORX_SERVE__API_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    logs = [tmp_path / f"serve-{k}.log" for k in (1, 2)]
    processes = [start_worx(["serve", "--run", str(run), "--port", "0"], env, log) for log in logs]
    try:
        urls = [
            read_line(p, "serving on", 120, log).split()[-1]
            for p, log in zip(processes, logs, strict=True)
        ]
        yield processes, [url.rstrip("/") for url in urls]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait(30)


@pytest.fixture
def front(replicas):
    _, urls = replicas
    front = ServeFront(urls, HttpLimits(max_body_bytes=64 << 10), check_every_s=0.2)
    url = front.start("127.0.0.1", 0)
    try:
        yield front, url
    finally:
        front.stop()


def test_the_front_answers_as_a_replica_does_and_streams_pass_through(replicas, front) -> None:
    _, urls = replicas
    front, url = front
    direct = _score(urls[0])
    assert direct[0] == 200 and direct[1]["experts"] == {"code": 1.0}
    answers = [_score(url) for _ in range(4)]  # in turn: each replica twice
    assert [a[0] for a in answers] == [200] * 4
    assert {a[1]["mean_loss"] for a in answers} == {direct[1]["mean_loss"]}
    assert [r.forwarded for r in front.replicas] == [2, 2]

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=60)
    whole = client.completions.create(model="auto", prompt="def add(a, b):", max_tokens=8, seed=3)
    chunks = list(
        client.completions.create(
            model="auto", prompt="def add(a, b):", max_tokens=8, seed=3, stream=True
        )
    )
    assert len(chunks) > 1  # a stream, not one answer
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text

    # the replicas' checks hold through the front, in their shapes
    no_token = _post(f"{url}/score", b'{"text": "x"}', {"Content-Type": "application/json"})
    assert no_token[0] == 401 and "error" in no_token[1]
    too_big = _post(f"{url}/v1/completions", b"x" * (65 << 10))
    assert too_big[0] == 413 and too_big[1]["error"]["message"].startswith("request body over")
    assert _post(f"{url}/score", b"{not json")[0] == 400


def test_a_paused_or_killed_replica_costs_no_request_and_with_none_left_it_is_503(
    replicas, front
) -> None:
    processes, _ = replicas
    front, url = front
    processes[0].send_signal(signal.SIGSTOP)  # its socket stays open: requests would wait
    # in turn, one of these lands on the paused replica before its check fails: sent again
    assert [_score(url)[0] for _ in range(4)] == [200] * 4
    assert front.resent >= 1 and not front.replicas[0].healthy

    processes[1].send_signal(signal.SIGKILL)
    processes[1].wait(30)
    status, body, headers = _score(url)
    assert status == 503 and headers["Retry-After"] == "1" and "no serve replica" in body["error"]

    processes[0].send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 30
    while not front.replicas[0].healthy:  # the front's next check finds it again
        assert time.monotonic() < deadline, "the resumed replica was not taken back"
        time.sleep(0.1)
    assert [_score(url)[0] for _ in range(3)] == [200] * 3
