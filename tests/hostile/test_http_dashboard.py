"""Hostile requests against the real dashboard server (monitor/server.py) on a real socket.

DNS rebinding (a Host header naming another site), cross-site simple POSTs, a flood of
on-demand evaluations, a missing token, path tricks, a slow body, a stopped follower.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from monitor.figures import build_state
from monitor.history import MatrixHistory
from monitor.server import DashboardServer
from tests.support.browser import CHROMIUM, FLAGS
from tests.support.http_raw import Answer, exchange, flood, request
from worx.web import HttpLimits

TOKEN = "dash-token-91c2"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOUND_S = 20.0  # liveness bound of one hostile exchange (a shared, busy machine)
JSON = {"Content-Type": "application/json"}


class Evaluations:
    """A stand-in for ``MonitorStage.evaluate_now`` that holds each run until released and
    records how many ran at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()  # runs end at once unless a test holds them
        self.started = threading.Semaphore(0)
        self.running = 0
        self.most_at_once = 0
        self.runs = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.running += 1
            self.runs += 1
            self.most_at_once = max(self.most_at_once, self.running)
        self.started.release()
        self.release.wait(60)
        with self._lock:
            self.running -= 1


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory):
    history = MatrixHistory(tmp_path_factory.mktemp("hostile-dashboard"))
    evaluations = Evaluations()
    followers: list = []
    server = DashboardServer(
        lambda: build_state(history, None, {"experts": 3, "bytes": 1, "quarantined": 0}),
        "127.0.0.1",
        0,
        on_evaluate=evaluations,
        api_token=TOKEN,
        allowed_hosts=("monitor",),
        followers=followers,
        limits=HttpLimits(max_body_bytes=64 << 10, read_timeout_s=1.5, idle_timeout_s=2.0),
    )
    with server:
        server.evaluations = evaluations  # type: ignore[attr-defined]
        server.follower_list = followers  # type: ignore[attr-defined]
        yield server


def port(server: DashboardServer) -> int:
    return server.http.server_address[1]


def get(server: DashboardServer, path: str, host: str | None = None, **headers: str) -> Answer:
    host = host or f"127.0.0.1:{port(server)}"
    return exchange(
        port(server), request("GET", path, headers=headers, host=host), timeout_s=BOUND_S
    )


def post_evaluate(server: DashboardServer, headers: dict[str, str], body: bytes = b"{}") -> Answer:
    data = request("POST", "/api/evaluate", body, headers, host=f"localhost:{port(server)}")
    return exchange(port(server), data, timeout_s=BOUND_S)


def test_a_host_header_naming_another_site_is_refused(dashboard) -> None:
    p = port(dashboard)
    for host in ("evil.example", f"evil.example:{p}", "127.0.0.1.evil.example", "", "[::2]"):
        answer = get(dashboard, "/api/state", host=host or " ", **AUTH)
        assert answer.status == 421, (host, answer.body[:200])
        assert b"runs" not in answer.body and "Host" in answer.json()["error"]
        assert get(dashboard, "/", host=host or " ").status == 421  # the page too
    for host in (f"127.0.0.1:{p}", f"localhost:{p}", f"[::1]:{p}", "LOCALHOST", f"monitor:{p}"):
        assert get(dashboard, "/api/state", host=host, **AUTH).status == 200, host
    no_host = b"GET /api/state HTTP/1.0\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n\r\n"
    assert exchange(p, no_host, timeout_s=BOUND_S).status == 421


def test_the_token_guards_the_data_but_not_the_page(dashboard) -> None:
    for path in ("/api/state", "/metrics"):
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}):
            answer = get(dashboard, path, **headers)
            assert answer.status == 401, (path, headers)
            assert TOKEN.encode() not in answer.body
        assert get(dashboard, path, **AUTH).status == 200
    assert post_evaluate(dashboard, JSON).status == 401
    page = get(dashboard, "/")
    assert page.status == 200 and b"dashboard.js" in page.body
    assert get(dashboard, "/dashboard.js").status == 200
    assert get(dashboard, "/healthz").body == b"ok\n"


def test_cross_site_simple_posts_cannot_start_an_evaluation(dashboard) -> None:
    runs = dashboard.evaluations.runs
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        answer = post_evaluate(dashboard, {**AUTH, "Content-Type": ctype})
        assert answer.status == 415, ctype
    assert post_evaluate(dashboard, AUTH).status == 415  # no content type at all
    assert dashboard.evaluations.runs == runs


def test_evaluations_run_one_at_a_time_and_a_flood_gets_409(dashboard) -> None:
    evaluations = dashboard.evaluations
    evaluations.release.clear()
    threads_before = threading.active_count()
    try:
        first = post_evaluate(dashboard, {**AUTH, **JSON})
        assert first.status == 202 and first.json() == {"accepted": True}
        assert evaluations.started.acquire(timeout=BOUND_S)  # the first one is running
        data = request("POST", "/api/evaluate", b"{}", {**AUTH, **JSON}, host="localhost")
        answers = flood(port(dashboard), [data] * 100, timeout_s=60)
        assert {a.status for a in answers} == {409}
        assert all("already running" in a.json()["error"] for a in answers)
        assert threading.active_count() <= threads_before + 2  # no thread per request
    finally:
        evaluations.release.set()
    deadline = time.monotonic() + BOUND_S
    while dashboard.evaluating and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the server's own flag: the run ends on its thread
    assert post_evaluate(dashboard, {**AUTH, **JSON}).status == 202  # the next one may run
    assert evaluations.started.acquire(timeout=BOUND_S)
    assert evaluations.most_at_once == 1 and evaluations.runs >= 2


@pytest.mark.parametrize(
    "path", ["/api/../api/state", "/api/%2e%2e/metrics", "/api%2Fstate", "//api/state", "/x"]
)
def test_path_tricks_name_nothing(dashboard, path: str) -> None:
    answer = get(dashboard, path, **AUTH)
    assert answer.status == 404 and b"runs" not in answer.body


@pytest.mark.slow
def test_slow_bodies_and_headers_time_out_and_big_bodies_are_refused(dashboard) -> None:
    runs = dashboard.evaluations.runs
    head = request("POST", "/api/evaluate", b"", {**AUTH, **JSON}, host="localhost")
    slow = head.replace(b"Content-Length: 0", b"Content-Length: 50") + b"{"
    answer = exchange(port(dashboard), slow, timeout_s=BOUND_S, wait_close=True)
    assert answer.status == 408 and answer.closed
    big = head.replace(b"Content-Length: 0", b"Content-Length: 10485760")
    answer = exchange(port(dashboard), big, timeout_s=BOUND_S, wait_close=True)
    assert answer.status == 413 and answer.closed
    bad = request("POST", "/api/evaluate", b"[" * 50_000, {**AUTH, **JSON}, host="localhost")
    assert exchange(port(dashboard), bad, timeout_s=BOUND_S).status == 400
    assert dashboard.evaluations.runs == runs  # none of them started an evaluation
    partial = b"GET /api/state HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
    answer = exchange(port(dashboard), partial, timeout_s=BOUND_S, wait_close=True)
    assert answer.closed and answer.status is None and answer.elapsed_s < BOUND_S


def test_a_stopped_follower_makes_health_503(dashboard, kafka_conf, topics) -> None:
    from topology.runtimes.table_follower import TableFollower

    assert get(dashboard, "/health").json() == {"status": "ok", "followers": {}}
    follower = TableFollower(kafka_conf, topics.domains, lambda row: None).start()
    dashboard.follower_list.append(follower)
    try:
        assert get(dashboard, "/health").json()["followers"] == {topics.domains: {"alive": True}}
        follower.stop()
        health = get(dashboard, "/health")
        assert health.status == 503 and health.json()["status"] == "follower_stopped"
        assert health.json()["followers"][topics.domains]["alive"] is False
        healthz = get(dashboard, "/healthz")
        assert healthz.status == 503 and topics.domains.encode() in healthz.body
    finally:
        dashboard.follower_list.clear()
        follower.stop()


def test_malformed_requests_get_400_and_the_dashboard_keeps_answering(dashboard) -> None:
    p = port(dashboard)
    for data in (
        b"POST /api/evaluate HTTP/1.1\r\nHost: localhost\r\nContent-Length: -1\r\n\r\n",
        b"GET /api/state HTTP/1.1\r\nHost: localhost\r\nX: " + b"a" * 20_000 + b"\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS hello
    ):
        answer = exchange(p, data, timeout_s=BOUND_S, wait_close=True)
        assert answer.status in (400, 431) and answer.closed
    state = get(dashboard, "/api/state", **AUTH)
    assert state.status == 200 and set(json.loads(state.body)["runs"]) == {"ours", "dense_baseline"}


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_page_sends_the_token_from_its_url_fragment(dashboard) -> None:
    """In a real browser: /#token=... renders the dashboard (its polls carry the token),
    and the token leaves the address bar; without it the page says what it needs."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    base = f"http://127.0.0.1:{port(dashboard)}/"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.goto(base + "#token=" + TOKEN)
            page.wait_for_selector("body[data-rendered]", timeout=15_000)
            assert TOKEN not in page.url
            bare = browser.new_page()  # a fresh tab: no token kept
            bare.goto(base)
            bare.wait_for_function(
                "document.getElementById('updated').textContent.includes('token')",
                timeout=15_000,
            )
        finally:
            browser.close()
