"""The dashboard's HTTP server (aiohttp): the page, its JS, ``/api/state``, ``/metrics``.

On 127.0.0.1 by default: nothing is fetched from the internet, the page draws inline SVG
with the JS file shipped next to it, and polls ``/api/state``. ``POST /api/evaluate`` asks
for an on-demand evaluation: answered 202 and run in the background, one at a time (409
while one runs); it needs ``Content-Type: application/json``, which a cross-site form or
simple ``fetch`` cannot send without a preflight this server never grants.

Every request's Host header must name this server (loopback, the bind address, or one of
``allowed_hosts``), else 421: a page on another site cannot read the dashboard through
DNS rebinding. With ``api_token`` set, ``/api/*`` and ``/metrics`` need
``Authorization: Bearer <token>`` (401 otherwise); the page and its JS hold no data and
stay open, and the page sends the token it is given in its URL (``/#token=...``).
``/health`` (JSON) and ``/healthz`` (text) answer without a token: 503 when a table
follower stopped, with which one and why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from monitor.prom import make_registry
from worx.web import (
    BackgroundServer,
    HttpError,
    HttpLimits,
    bearer_token,
    dumps,
    follower_health,
    host_check,
    json_errors,
    read_json,
    refuse_path_tricks,
)

log = logging.getLogger(__name__)

ASSETS = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/index.html": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
}
OPEN_PATHS = (*ASSETS, "/health", "/healthz")
READERS = 2  # threads building /api/state and /metrics (off the event loop)
MAX_WAITING_READS = 32  # beyond these, 503


def asset(name: str) -> bytes:
    return resources.files("monitor.static").joinpath(name).read_bytes()


class DashboardServer:
    """Serve the dashboard until :meth:`stop`.

    Parameters
    ----------
    get_state
        Returns :func:`monitor.figures.build_state` output (called per request).
    on_evaluate
        Called (on the server's one evaluation thread) on ``POST /api/evaluate``; None:
        answered 404.
    port
        0 picks a free port (see :attr:`url`).
    api_token, allowed_hosts
        See the module docstring.
    followers
        Table followers the monitor depends on (``topic``, ``alive``, ``error``).
    """

    def __init__(
        self,
        get_state: Callable[[], dict[str, Any]],
        host: str = "127.0.0.1",
        port: int = 8765,
        on_evaluate: Callable[[], Any] | None = None,
        *,
        api_token: str = "",
        allowed_hosts: Sequence[str] = (),
        followers: Sequence[Any] = (),
        limits: HttpLimits | None = None,
    ) -> None:
        self.get_state = get_state
        self.on_evaluate = on_evaluate
        self.followers = followers
        self.registry = make_registry(get_state)
        self.limits = limits or HttpLimits(max_body_bytes=64 << 10)
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="dashboard")
        self._evaluator = ThreadPoolExecutor(1, thread_name_prefix="evaluate")
        self._evaluation: Future | None = None
        self._reads = 0  # reads in the pool or waiting for it (touched on the loop only)
        app = web.Application(
            client_max_size=self.limits.max_body_bytes,
            middlewares=[
                json_errors,
                refuse_path_tricks,
                host_check(host, allowed_hosts),
                bearer_token(api_token, OPEN_PATHS),
            ],
        )
        for path in ASSETS:
            app.router.add_get(path, self._asset)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_post("/api/evaluate", self._evaluate)
        app.on_response_prepare.append(_no_store)
        app.on_cleanup.append(self._cleanup)
        self.http = BackgroundServer(app, host, port, self.limits, name="dashboard")

    @property
    def url(self) -> str:
        return self.http.url

    @property
    def evaluating(self) -> bool:
        return self._evaluation is not None and not self._evaluation.done()

    # ------------------------------------------------------------------ routes
    async def _asset(self, request: web.Request) -> web.Response:
        name, ctype = ASSETS[request.path]
        return web.Response(body=asset(name), headers={"Content-Type": ctype})

    async def _state(self, _request: web.Request) -> web.Response:
        state = await self._read(self.get_state)
        return web.Response(body=dumps(state).encode(), content_type="application/json")

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = await self._read(lambda: generate_latest(self.registry))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health(self, _request: web.Request) -> web.Response:
        alive, followers = follower_health(self.followers)
        body = {"status": "ok" if alive else "follower_stopped", "followers": followers}
        return web.Response(
            body=dumps(body).encode(), status=200 if alive else 503, content_type="application/json"
        )

    async def _healthz(self, _request: web.Request) -> web.Response:
        alive, followers = follower_health(self.followers)
        if alive:
            return web.Response(text="ok\n")
        dead = "; ".join(f"{t}: {e['error']}" for t, e in followers.items() if not e["alive"])
        return web.Response(text=f"follower stopped: {dead}\n", status=503)

    async def _evaluate(self, request: web.Request) -> web.Response:
        if self.on_evaluate is None:
            raise HttpError(404, "this monitor has no model to evaluate with (--no-stream)")
        if request.content_type != "application/json":
            raise HttpError(415, "POST /api/evaluate needs 'Content-Type: application/json'")
        await read_json(request, self.limits)  # an empty object; read within the limits
        if self.evaluating:
            raise HttpError(409, "an evaluation is already running; poll /api/state")
        self._evaluation = self._evaluator.submit(self._run_evaluation)
        return web.json_response({"accepted": True}, status=202)

    # ------------------------------------------------------------------ helpers
    def _run_evaluation(self) -> None:
        try:
            self.on_evaluate()
        except Exception:
            log.exception("on-demand evaluation failed")

    async def _read(self, fn: Callable[[], Any]) -> Any:
        if self._reads >= READERS + MAX_WAITING_READS:
            raise HttpError(503, "the dashboard is busy; retry", {"Retry-After": "1"})
        self._reads += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._readers, fn)
        finally:
            self._reads -= 1

    async def _cleanup(self, _app: web.Application) -> None:
        self._readers.shutdown(wait=False, cancel_futures=True)
        self._evaluator.shutdown(wait=False, cancel_futures=True)

    def start(self) -> DashboardServer:
        self.http.start()
        log.info("dashboard on %s (metrics: %smetrics)", self.url, self.url)
        return self

    def stop(self) -> None:
        self.http.stop()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _no_store(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Cache-Control"] = "no-store"
