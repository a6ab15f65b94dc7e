"""Hostile requests against the OpenAI-compatible routes (``/v1``) on a real socket.

The same rules as the other routes (tests/hostile/test_http_serve.py), answered in
OpenAI's error shape: one server per module (tests/support/serving.py) with one worker and
no queue, so that a second request while one is scored is refused with 503. After every
test the server still answers a good request (the autouse fixture).
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.support.http_raw import Answer, exchange, request
from tests.support.serving import AUTH, TOKEN, tiny_served
from worx.web import HttpLimits

BOUND_S = 20.0  # liveness bound of one exchange (a shared, busy machine)
MAX_BODY = 1 << 20
MAX_NEW = 8
ROUTES = ("/v1/completions", "/v1/chat/completions")
GOOD = {
    "/v1/completions": {"model": "auto", "prompt": "def f(x):", "max_tokens": 2},
    "/v1/chat/completions": {
        "model": "auto",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
    },
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    limits = HttpLimits(max_body_bytes=MAX_BODY, read_timeout_s=1.5, idle_timeout_s=2.0)
    with tiny_served(
        tmp_path_factory.mktemp("hostile-openai"),
        max_new_tokens=MAX_NEW,
        limits=limits,
        workers=1,
        queue=0,
        allowed_hosts=("serve",),
    ) as s:
        yield s


def post(port: int, path: str, body: object, headers: dict | None = None) -> Answer:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**AUTH, "Content-Type": "application/json", **(headers or {})}
    return exchange(port, request("POST", path, data, headers), timeout_s=BOUND_S)


def openai_error(answer: Answer, status: int) -> dict:
    """The answer has ``status`` and OpenAI's error shape with a short reason."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.elapsed_s < BOUND_S
    error = json.loads(answer.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and 0 < len(error["message"]) < 200, error
    assert isinstance(error["type"], str) and isinstance(error["code"], str) and error["code"]
    for leak in ("Traceback", "Error:", "Exception", 'File "'):
        assert leak not in error["message"], error
    return error


@pytest.fixture(autouse=True)
def still_serving(served):
    yield
    for path, body in GOOD.items():
        answer = post(served.port, path, body)
        assert answer.status == 200, answer.body[:300]
        assert answer.json()["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    "body, reason",
    [
        (b"{not json", "not valid JSON"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"prompt": "\xff\xfe"}', "not valid JSON"),
        (b'"just a string"', "JSON object"),
        (b'{"model": "auto", "max_tokens": 1' + b"0" * 5000 + b"}", "not valid JSON"),
        (b'{"model": "auto", "prompt": "x", "temperature": NaN}', "finite"),
        (b'{"model": "auto", "prompt": "x", "top_p": Infinity}', "finite"),
    ],
)
def test_bad_json_is_a_400_in_openai_shape(served, path: str, body: bytes, reason: str) -> None:
    error = openai_error(post(served.port, path, body), 400)
    assert reason in error["message"] and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "change, param",
    [
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": "8"}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 11}, "temperature"),
        ({"temperature": 1, "top_p": 0}, "top_p"),
        ({"temperature": 1, "seed": -1}, "seed"),
        ({"n": 3}, "n"),
        ({"best_of": 2}, "best_of"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [1]}, "stop"),
        ({"stop": "x" * 201}, "stop"),
        ({"logprobs": 1000}, "logprobs"),
        ({"logprobs": True}, "logprobs"),
        ({"logprobs": 1, "stream": True}, "logprobs"),
        ({"echo": "yes"}, "echo"),
        ({"stream": 1}, "stream"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"model": 7}, "model"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"max_tokens": 0, "stream": True}, "max_tokens"),
    ],
)
def test_bad_completion_fields_are_named(served, change: dict, param: str) -> None:
    body = {**GOOD["/v1/completions"], **change}
    assert openai_error(post(served.port, "/v1/completions", body), 400)["param"] == param


@pytest.mark.parametrize(
    "messages",
    [
        None,
        [],
        "hello",
        [{"role": "tool", "content": "x"}],
        [{"role": "user", "content": 5}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}],
        ["user"],
    ],
)
def test_bad_chat_messages_are_400(served, messages) -> None:
    body = {**GOOD["/v1/chat/completions"], "messages": messages}
    error = openai_error(post(served.port, "/v1/chat/completions", body), 400)
    assert error["param"].startswith("messages")


def test_a_huge_max_tokens_is_cut_to_the_setting(served) -> None:
    for path in ROUTES:
        for huge in (10**6, 2**63, 10**30):
            answer = post(served.port, path, {**GOOD[path], "max_tokens": huge})
            assert answer.status == 200, answer.body[:300]
            assert 1 <= answer.json()["usage"]["completion_tokens"] <= MAX_NEW


def test_an_unknown_model_is_404_and_an_unknown_route_too(served) -> None:
    for path in ROUTES:
        for model in ("ghost", "../code", "AUTO", "code\x00", "x" * 5000):
            error = openai_error(post(served.port, path, {**GOOD[path], "model": model}), 404)
            assert error["code"] == "model_not_found" and error["param"] == "model"
            assert len(error["message"]) < 200
    get = exchange(served.port, request("GET", "/v1/engines", headers=AUTH), timeout_s=BOUND_S)
    assert openai_error(get, 404)["code"] == "not_found"
    wrong = exchange(
        served.port, request("GET", "/v1/completions", headers=AUTH), timeout_s=BOUND_S
    )
    openai_error(wrong, 405)


def test_a_missing_or_wrong_token_is_401_and_never_echoed(served) -> None:
    tries = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer t\u00f6k\u00ff"},
    ]
    for headers in tries:
        for method, path, body in (
            ("GET", "/v1/models", b""),
            ("POST", "/v1/completions", json.dumps(GOOD["/v1/completions"]).encode()),
            ("POST", "/v1/chat/completions", b"{not even json"),  # the token is checked first
        ):
            data = request(method, path, body, {**headers, "Content-Type": "application/json"})
            answer = exchange(served.port, data, timeout_s=BOUND_S)
            assert openai_error(answer, 401)["code"] == "invalid_api_key"
            assert answer.headers.get("www-authenticate", "").startswith("Bearer")
            assert TOKEN.encode() not in answer.body and TOKEN[:8].encode() not in answer.body


def test_a_host_header_naming_another_site_is_421(served) -> None:
    body = json.dumps(GOOD["/v1/completions"]).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    for host in ("evil.example", f"evil.example:{served.port}"):
        data = request("POST", "/v1/completions", body, headers, host)
        assert (
            "Host" in openai_error(exchange(served.port, data, timeout_s=BOUND_S), 421)["message"]
        )
    models = request("GET", "/v1/models", b"", AUTH, f"serve:{served.port}")
    assert exchange(served.port, models, timeout_s=BOUND_S).status == 200


def test_a_huge_body_is_413_before_it_is_read(served) -> None:
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {10 << 20}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
    ).encode()
    assert "limit" in openai_error(exchange(served.port, head, timeout_s=BOUND_S), 413)["message"]


def test_a_10_mb_body_streamed_without_a_length_is_cut_off_at_the_limit(served) -> None:
    text = json.dumps({"model": "auto", "prompt": "x" * (10 << 20)}).encode()
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(text[i : i + 65536]), text[i : i + 65536])
        for i in range(0, len(text), 65536)
    )
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
    ).encode()
    answer = exchange(served.port, head, then=chunks + b"0\r\n\r\n", timeout_s=BOUND_S)
    openai_error(answer, 413)


def test_a_long_prompt_under_the_limit_is_cut_before_tokenisation(served) -> None:
    prompt = "def f(x):\n    return x\n" * 36_000  # ~860 KB, under the 1 MiB limit
    body = {"model": "auto", "prompt": prompt, "max_tokens": 0, "echo": True}
    answer = post(served.port, "/v1/completions", body)
    assert answer.status == 200, answer.body[:300]
    assert answer.json()["worx"]["truncated"] is True
    assert answer.json()["usage"]["prompt_tokens"] == served.server.max_tokens
    long_chat = {**GOOD["/v1/chat/completions"], "messages": [{"role": "user", "content": prompt}]}
    answer = post(served.port, "/v1/chat/completions", long_chat)
    assert answer.status == 200 and answer.json()["worx"]["truncated"] is True


def test_path_tricks_name_nothing(served) -> None:
    for path in ("/v1/../v1/models", "/v1/%2e%2e/health", "//v1/models", "/v1/models%00"):
        answer = exchange(served.port, request("GET", path, headers=AUTH), timeout_s=BOUND_S)
        assert answer.status == 404, path


class GatedTokenizer:
    """The trunk's real tokenizer; a call waits for ``release`` after saying ``entered``
    (so that a request is known to hold the one worker)."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, text, *args, **kwargs):
        self.entered.set()
        assert self.release.wait(BOUND_S)
        return self._tokenizer(text, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_while_the_worker_is_busy_is_503_with_retry_after(
    served, monkeypatch, stream: bool
) -> None:
    gated = GatedTokenizer(served.server.trunk.tokenizer)
    monkeypatch.setattr(served.server.trunk, "tokenizer", gated)
    first: list[Answer] = []
    holder = threading.Thread(
        target=lambda: first.append(post(served.port, "/v1/completions", GOOD["/v1/completions"]))
    )
    holder.start()
    try:
        assert gated.entered.wait(BOUND_S)  # the first request holds the only worker
        for path in ROUTES:
            answer = post(served.port, path, {**GOOD[path], "stream": stream})
            assert openai_error(answer, 503)["type"] == "server_error"
            assert answer.headers.get("retry-after") == "1"
    finally:
        gated.release.set()
        holder.join(BOUND_S)
        monkeypatch.undo()
    assert first and first[0].status == 200, first
