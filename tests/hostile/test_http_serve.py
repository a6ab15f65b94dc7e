"""Hostile requests against the real `worx serve` HTTP API on a real socket.

One server per module (tiny trunk, one expert, a bearer token, tight limits); every test
sends its hostile bytes and then checks that the server still answers a good request
(the autouse fixture). Times are liveness bounds (the server answers at all), not speed.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from experts.serving import ExpertServer
from experts.store import ExpertStore
from experts.testing import build_tiny_trunk
from experts.trunk import load_trunk
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert
from tests.support.http_raw import Answer, exchange, flood, request
from topology.serve.http_api import make_http_server
from worx.web import HttpLimits

TOKEN = "hostile-test-token-5f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOUND_S = 20.0  # liveness bound of one hostile exchange (generous: a shared, busy machine)
READ_TIMEOUT_S = 1.5
IDLE_TIMEOUT_S = 2.0
MAX_BODY = 1 << 20
CODE = domain_texts("python_code", 1, skip=30)[0]


@dataclass
class Served:
    port: int
    server: ExpertServer
    followers: list = field(default_factory=list)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("hostile-serve")
    trunk = load_trunk(build_tiny_trunk(root / "trunk", layers=2, width=32, vocab_size=320))
    store = ExpertStore(root / "store", trunk.fingerprint)
    embedder = default_embedder()
    table = domain_table(embedder, ("python_code", "legal"))
    server = ExpertServer(trunk, store, embedder, Gate(top_k=1), table)
    expert = make_domain_expert(store, trunk, embedder, "code", "python_code", seed=1)
    assert server.register(expert.registration()).status == "registered"
    followers: list = []
    limits = HttpLimits(
        max_body_bytes=MAX_BODY, read_timeout_s=READ_TIMEOUT_S, idle_timeout_s=IDLE_TIMEOUT_S
    )
    httpd = make_http_server(
        server,
        "127.0.0.1",
        0,
        api_token=TOKEN,
        limits=limits,
        workers=1,
        queue=4,
        followers=followers,
        allowed_hosts=("serve",),
    ).start()
    try:
        yield Served(httpd.server_address[1], server, followers)
    finally:
        httpd.stop()


def score(port: int, body: object, headers: dict | None = None) -> Answer:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**AUTH, "Content-Type": "application/json", **(headers or {})}
    return exchange(port, request("POST", "/score", data, headers), timeout_s=BOUND_S)


def assert_short_reason(answer: Answer, status: int) -> str:
    """The answer has ``status`` and a short JSON reason: no exception text, no traceback."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.elapsed_s < BOUND_S
    reason = strict_json(answer.body)["error"]
    assert isinstance(reason, str) and 0 < len(reason) < 200, reason
    for leak in ("Traceback", "Error:", "Exception", 'File "'):
        assert leak not in reason, reason
    return reason


def strict_json(body: bytes) -> dict:
    """``body`` as JSON with no NaN or Infinity in it (json.loads would accept them)."""

    def refuse(name: str):
        raise AssertionError(f"the answer holds {name}: {body[:200]!r}")

    return json.loads(body, parse_constant=refuse)


@pytest.fixture(autouse=True)
def still_serving(served: Served):
    yield
    answer = score(served.port, {"text": CODE})
    assert answer.status == 200, answer.body[:300]
    assert strict_json(answer.body)["experts"] == {"code": 1.0}


def test_malformed_content_length_is_refused_and_the_connection_closed(served) -> None:
    for value in ("-1", "abc", "1e3", "5, 6", "99999999999999999999999", "+5"):
        data = (
            f"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {value}\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n{{}}"
        ).encode()
        answer = exchange(served.port, data, timeout_s=BOUND_S, wait_close=True)
        assert answer.status == 400, (value, answer.body[:200])
        assert answer.closed and answer.elapsed_s < BOUND_S, value


def test_a_huge_declared_body_is_refused_before_it_is_read(served) -> None:
    for length in (MAX_BODY + 1, 10 << 20, 10**15):
        head = (
            f"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
        ).encode()
        answer = exchange(served.port, head, timeout_s=BOUND_S)  # the body is never sent
        assert "limit" in assert_short_reason(answer, 413)


def send_10_mb_chunked(port: int) -> Answer:
    """A 10 MB text in a chunked body (no Content-Length for the server to refuse early)."""
    text = json.dumps({"text": "x" * (10 << 20)}).encode()
    step = 65536
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(text[i : i + step]), text[i : i + step])
        for i in range(0, len(text), step)
    )
    head = (
        "POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
    ).encode()
    return exchange(port, head, then=chunks + b"0\r\n\r\n", timeout_s=BOUND_S)


def test_a_10_mb_text_streamed_without_a_length_is_cut_off_at_the_limit(served) -> None:
    assert_short_reason(send_10_mb_chunked(served.port), 413)


class CountingTokenizer:
    """The trunk's real tokenizer, remembering how many characters each call was given."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.calls: list[int] = []

    def __call__(self, text, *args, **kwargs):
        self.calls.append(len(text))
        return self._tokenizer(text, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)


def test_a_long_text_under_the_limit_is_cut_before_tokenisation(served, monkeypatch) -> None:
    text = (CODE + " ") * (900_000 // (len(CODE) + 1))  # ~900 KB, under the 1 MiB limit
    counting = CountingTokenizer(served.server.trunk.tokenizer)
    monkeypatch.setattr(served.server.trunk, "tokenizer", counting)
    answer = score(served.port, {"text": text})
    monkeypatch.undo()
    assert answer.status == 200 and answer.elapsed_s < BOUND_S
    body = answer.json()
    assert body["truncated"] is True
    assert len(body["token_losses"]) == served.server.max_tokens - 1
    budget = served.server.max_tokens * 32  # the default chars_per_token
    assert counting.calls and max(counting.calls) <= budget < len(text)


@pytest.mark.slow
def test_a_slow_body_gets_408_and_a_closed_connection(served) -> None:
    head = (
        "POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
        '{"text": "abc'  # 13 of the 100 bytes, then nothing
    ).encode()
    answer = exchange(served.port, head, timeout_s=BOUND_S, wait_close=True)
    assert "not received" in assert_short_reason(answer, 408)
    assert answer.closed and answer.elapsed_s >= READ_TIMEOUT_S * 0.9


@pytest.mark.slow
def test_slow_headers_and_silent_connections_are_closed(served) -> None:
    partial = b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # never finished
    for data in (b"", partial):
        answer = exchange(served.port, data, timeout_s=BOUND_S, wait_close=True)
        assert answer.closed and answer.status is None, answer
        assert IDLE_TIMEOUT_S * 0.9 <= answer.elapsed_s < BOUND_S


def test_oversized_and_too_many_headers_are_refused(served) -> None:
    long_line = request("GET", "/health", headers={"X-Big": "a" * 20_000})
    many = request("GET", "/health", headers={f"X-H{i}": "1" for i in range(200)})
    for data in (long_line, many, b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n"):
        answer = exchange(served.port, data, timeout_s=BOUND_S, wait_close=True)
        assert answer.status in (400, 431), answer.body[:200]
        assert answer.closed


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"{not json", "not valid JSON"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"text": "\xff\xfe"}', "not valid JSON"),
        (b'"just a string"', "JSON object"),
        (b'{"text": 1' + b"0" * 5000 + b"}", "not valid JSON"),  # past int's digit limit
        (b'{"text": NaN}', "finite"),
        (b'{"text": 42}', "non-empty string"),
        (b'{"text": "x", "experts": [1]}', "map expert ids"),
        (b'{"text": "def f(x): return x", "max_new_tokens": true}', None),
    ],
)
def test_bad_json_gets_400_with_a_short_reason(served, body: bytes, reason: str | None) -> None:
    path = "/generate" if b"max_new_tokens" in body else "/score"
    headers = {**AUTH, "Content-Type": "application/json"}
    answer = exchange(served.port, request("POST", path, body, headers), timeout_s=BOUND_S)
    got = assert_short_reason(answer, 400)
    assert reason is None or reason in got, got


@pytest.mark.parametrize(
    "weight", ["NaN", "Infinity", "-Infinity", "1e999", "true", "-1", '"1"', "null", "1e4"]
)
def test_expert_weights_must_be_finite_numbers_in_range(served, weight: str) -> None:
    body = f'{{"text": {json.dumps(CODE)}, "experts": {{"code": {weight}}}}}'.encode()
    answer = score(served.port, body)
    assert "weight" in assert_short_reason(answer, 400) or weight == "NaN" or "Inf" in weight


def test_unknown_experts_are_404_or_400_and_never_served(served) -> None:
    get = exchange(served.port, request("GET", "/experts/ghost", headers=AUTH), timeout_s=BOUND_S)
    assert "no such expert" in assert_short_reason(get, 404)
    answer = score(served.port, {"text": CODE, "experts": {"ghost": 1.0}})
    assert "ghost" in assert_short_reason(answer, 400)
    many = score(served.port, {"text": CODE, "experts": {f"e{i}": 1.0 for i in range(300)}})
    assert "more than" in assert_short_reason(many, 400)


@pytest.mark.parametrize(
    "path",
    [
        "/experts/../health",
        "/experts/%2e%2e/health",
        "/experts/..%2Fhealth",
        "/experts/code%2F..%2F..%2Fetc",
        "/experts/a%5Cb",
        "//health",
        "/health/..",
        "/experts/./code",
        "/experts/code%00",
        "/experts/code%0a",
    ],
)
def test_path_tricks_name_nothing(served, path: str) -> None:
    answer = exchange(served.port, request("GET", path, headers=AUTH), timeout_s=BOUND_S)
    assert_short_reason(answer, 404)


def test_a_host_header_naming_another_site_is_421(served) -> None:
    body = json.dumps({"text": CODE}).encode()
    for host in ("evil.example", f"evil.example:{served.port}", "127.0.0.1.evil.example"):
        data = request(
            "POST", "/score", body, {**AUTH, **{"Content-Type": "application/json"}}, host
        )
        assert "Host" in assert_short_reason(exchange(served.port, data, timeout_s=BOUND_S), 421)
    for host in (f"localhost:{served.port}", f"[::1]:{served.port}", f"serve:{served.port}"):
        answer = exchange(
            served.port, request("GET", "/experts", b"", AUTH, host), timeout_s=BOUND_S
        )
        assert answer.status == 200, host


def test_wrong_methods_are_405(served) -> None:
    for method, path in (("DELETE", "/score"), ("GET", "/score"), ("PUT", "/experts/code")):
        answer = exchange(served.port, request(method, path, headers=AUTH), timeout_s=BOUND_S)
        assert_short_reason(answer, 405)


def test_a_missing_or_wrong_token_is_401_and_never_echoed(served) -> None:
    tries = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": "Bearer t\u00f6k\u00ff"},  # not ASCII
        {"Authorization": f"bearer  {TOKEN}x "},
    ]
    for headers in tries:
        for method, path, body in (
            ("GET", "/experts", b""),
            ("GET", "/experts/code", b""),
            ("POST", "/score", json.dumps({"text": CODE}).encode()),
            ("POST", "/generate", b"{not even json"),  # the token is checked first
        ):
            data = request(method, path, body, {**headers, "Content-Type": "application/json"})
            answer = exchange(served.port, data, timeout_s=BOUND_S)
            assert_short_reason(answer, 401)
            assert answer.headers.get("www-authenticate", "").startswith("Bearer")
            assert TOKEN.encode() not in answer.body and TOKEN[:8].encode() not in answer.body
    # /health answers without the token, but only its status: no trunk, experts, refusals
    open_health = exchange(served.port, request("GET", "/health"), timeout_s=BOUND_S)
    assert open_health.status == 200
    assert set(open_health.json()) == {"status", "followers"}
    full = exchange(served.port, request("GET", "/health", headers=AUTH), timeout_s=BOUND_S)
    assert full.json()["experts"] == 1 and full.json()["status"] == "ok"


def test_a_stopped_follower_makes_health_503_with_which_and_why(served, kafka_conf, topics) -> None:
    from topology.runtimes.table_follower import TableFollower

    follower = TableFollower(kafka_conf, topics.domains, served.server.domains.apply).start()
    served.followers.append(follower)
    try:
        healthy = exchange(served.port, request("GET", "/health"), timeout_s=BOUND_S)
        assert healthy.status == 200
        assert healthy.json()["followers"] == {topics.domains: {"alive": True}}
        follower.stop()
        answer = exchange(served.port, request("GET", "/health"), timeout_s=BOUND_S)
        assert answer.status == 503
        body = answer.json()
        assert body["status"] == "follower_stopped"
        assert body["followers"][topics.domains]["alive"] is False
        assert body["followers"][topics.domains]["error"]
    finally:
        served.followers.remove(follower)
        follower.stop()


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


@pytest.mark.slow
def test_200_concurrent_connections_are_answered_and_memory_stays_bounded(served) -> None:
    """A flood of scoring requests, then of silent connections: every one is answered (200
    or 503 with Retry-After) or closed in bounded time, /health answers meanwhile, and the
    process's resident memory stays bounded."""
    good = request("POST", "/score", json.dumps({"text": CODE}).encode(), AUTH)
    rss_before = _rss_mb()
    probes: list[Answer] = []
    done = threading.Event()

    def probe() -> None:  # a good request while the flood is in flight
        while not done.is_set():
            probes.append(exchange(served.port, request("GET", "/health"), timeout_s=BOUND_S))

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        answers = flood(served.port, [good] * 200, timeout_s=60)
        silent = flood(served.port, [b""] * 200, timeout_s=IDLE_TIMEOUT_S + BOUND_S)
    finally:
        done.set()
        prober.join()
    statuses = [a.status for a in answers]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= 1 and statuses.count(503) >= 1  # bounded admission
    assert all(a.headers.get("retry-after") == "1" for a in answers if a.status == 503)
    assert max(a.elapsed_s for a in answers) < 60
    for a in answers:
        if a.status == 200:
            assert math.isfinite(strict_json(a.body)["mean_loss"])
    assert all(a.closed and a.status is None for a in silent)
    assert max(a.elapsed_s for a in silent) < IDLE_TIMEOUT_S + BOUND_S
    assert probes and all(p.status == 200 and p.elapsed_s < BOUND_S for p in probes)
    for _ in range(3):  # the big-body class, repeated: nothing of it stays in memory
        assert send_10_mb_chunked(served.port).status == 413
    assert _rss_mb() - rss_before < 300, (rss_before, _rss_mb())
