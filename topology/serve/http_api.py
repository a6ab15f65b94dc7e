"""The serving HTTP API (aiohttp), bound to 127.0.0.1 by default.

Routes (JSON in, JSON out):

* ``GET /health``                 status, followers, trunk, table version, counters, refusals
* ``GET /experts``                the registered experts (manifests without centroids)
* ``GET /experts/<id>``           one expert's manifest
* ``POST /score``    ``{"text", "experts"?, "explain"?}``   per-token loss, perplexity,
  experts used (and the domain the gate gave the text); ``"explain": true`` adds
  ``explain``: the nearest domains with cosine and threshold, the rule that decided and
  why, the likelihood step if it ran, and the perplexity with the experts and without
* ``POST /generate`` ``{"text", "max_new_tokens"?, "experts"?, "temperature"?, "top_p"?,
  "top_k"?, "seed"?}``  continuation: greedy by default (temperature 0), else sampled with
  the seed (the same seed, the same text; see :mod:`experts.sampling`)
* ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``: the same
  scoring and generation in OpenAI's wire format, ``model`` naming the routing (``auto``,
  a domain, an expert); errors there answer OpenAI's ``{"error": {"message", "type",
  "param", "code"}}`` (:mod:`topology.serve.openai_api`)

Every error answers ``{"error": reason}`` (on ``/v1``: in OpenAI's shape): 421 a Host
header that names another server (DNS rebinding; see ``allowed_hosts``), 400 a bad
request (bad JSON, NaN/Infinity, a weight that is not a finite number in [0, 1000]), 401
a missing or wrong token (when
``api_token`` is set; ``/health`` then answers only its status and followers without
one), 404 an unknown route or expert (dot segments and encoded slashes name nothing), 408
a body not received in time, 413 a body over the limit, 503 when every worker is busy and
the queue is full (``Retry-After``), and on ``/health`` when a table follower stopped; 500
a fault of the server (the log has it, the answer does not). Scoring and generation are
synchronous torch work: they run on a bounded thread pool, never on the event loop. A text
is cut to ``max_tokens x chars_per_token`` characters before it is tokenised (and the
answer says ``truncated``). Only wiring lives here: every answer comes from
:class:`experts.serving.ExpertServer`.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from experts.sampling import SamplingError, parse_sampling
from experts.serving import ExpertServer, RequestError
from topology.serve.openai_api import OpenAIRoutes
from worx.ids import UnsafeIdError, validate_id
from worx.web import (
    AUTHORIZED,
    BackgroundServer,
    HttpError,
    HttpLimits,
    bearer_token,
    follower_health,
    host_check,
    json_answer,
    json_errors,
    read_json,
    refuse_path_tricks,
)

MAX_WEIGHT = 1000.0  # a mixture weight above this is a mistake, not a mixture
MAX_NAMED_EXPERTS = 256  # experts one request may name


class ServeAPI:
    """The routes of the serving API over ``expert_server``.

    Parameters
    ----------
    api_token : non-empty: requests need ``Authorization: Bearer <api_token>``.
    workers, queue : requests scored at once, and waiting beyond those (then 503).
    chars_per_token : a generous bound of characters per token: a text is cut to
        ``expert_server.max_tokens * chars_per_token`` characters before tokenisation.
    followers : table followers the server depends on (``topic``, ``alive``, ``error``).
    allowed_hosts : Host header names accepted besides loopback and the bind address
        (any other: 421, against DNS rebinding).
    """

    def __init__(
        self,
        expert_server: ExpertServer,
        *,
        api_token: str = "",
        limits: HttpLimits | None = None,
        workers: int = 2,
        queue: int = 16,
        chars_per_token: int = 32,
        followers: Sequence[Any] = (),
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        self.server = expert_server
        self.allowed_hosts = tuple(allowed_hosts)
        self.api_token = api_token
        self.limits = limits or HttpLimits()
        self.capacity = workers + queue
        self.chars_per_token = chars_per_token
        self.followers = followers
        self.pending = 0  # requests in the pool or waiting for it (touched on the loop only)
        self.busy_refusals = 0
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="score")

    def app(self, bind_host: str = "127.0.0.1") -> web.Application:
        app = web.Application(
            client_max_size=self.limits.max_body_bytes,
            middlewares=[
                json_errors,
                refuse_path_tricks,
                host_check(bind_host, self.allowed_hosts),
                bearer_token(self.api_token, ["/health"]),
            ],
        )
        app.router.add_get("/health", self.health)
        app.router.add_get("/experts", self.experts)
        app.router.add_get("/experts/{expert_id}", self.expert)
        app.router.add_post("/score", self.score)
        app.router.add_post("/generate", self.generate)
        OpenAIRoutes(self).add_to(app)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, _app: web.Application) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ routes
    async def health(self, request: web.Request) -> web.Response:
        alive, followers = follower_health(self.followers)
        body: dict[str, Any] = {
            "status": "ok" if alive else "follower_stopped",
            "followers": followers,
        }
        if request[AUTHORIZED]:
            body = {**self.server.health(), **body, "busy_refusals": self.busy_refusals}
        return json_answer(body, 200 if alive else 503)

    async def experts(self, _request: web.Request) -> web.Response:
        return json_answer({"experts": self.server.experts()})

    async def expert(self, request: web.Request) -> web.Response:
        expert_id = request.match_info["expert_id"]
        try:
            manifest = self.server.table.manifests.get(validate_id(expert_id, kind="expert_id"))
        except UnsafeIdError:
            manifest = None
        if manifest is None:
            raise HttpError(404, "no such expert; GET /experts lists them")
        return json_answer(manifest.to_dict())

    async def score(self, request: web.Request) -> web.Response:
        body = await read_json(request, self.limits)
        text, cut = self.cut(body.get("text"), keep_tail=False)
        weights = _weights(body.get("experts"))
        explain = body.get("explain", False)
        if not isinstance(explain, bool):
            raise HttpError(400, "'explain' must be true or false")
        result = await self.run(self.server.score, text, weights, explain)
        return json_answer({**result, "truncated": result["truncated"] or cut})

    async def generate(self, request: web.Request) -> web.Response:
        body = await read_json(request, self.limits)
        text, cut = self.cut(body.get("text"), keep_tail=True)
        max_new = body.get("max_new_tokens", 32)
        if isinstance(max_new, bool) or not isinstance(max_new, int):
            raise HttpError(400, "'max_new_tokens' must be an integer")
        weights = _weights(body.get("experts"))
        try:
            sampling = parse_sampling(body)  # none of temperature/top_p/top_k/seed: greedy
        except SamplingError as exc:
            raise HttpError(400, str(exc)) from None
        result = await self.run(self.server.generate, text, max_new, weights, sampling)
        return json_answer({**result, "truncated": result["truncated"] or cut})

    # ------------------------------------------------------------------ helpers
    def cut(self, text: Any, keep_tail: bool) -> tuple[Any, bool]:
        """``text`` cut to the character budget before any tokeniser sees it."""
        budget = self.server.max_tokens * self.chars_per_token
        if not isinstance(text, str) or len(text) <= budget:
            return text, False  # the server refuses a text that is not a string
        return (text[-budget:] if keep_tail else text[:budget]), True

    async def run(
        self, fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """``fn(*args, **kwargs)`` on the worker pool; 503 at once when the pool and queue
        are full."""
        if self.pending >= self.capacity:
            self.busy_refusals += 1
            raise HttpError(
                503, "every worker is busy and the queue is full; retry", {"Retry-After": "1"}
            )
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))
        except RequestError as exc:
            raise HttpError(400, str(exc)) from None
        finally:
            self.pending -= 1


def _weights(experts: Any) -> dict[str, float] | None:
    """The request's expert weights, each a finite number in [0, MAX_WEIGHT], or None."""
    if experts is None:
        return None
    if not isinstance(experts, dict) or not all(isinstance(k, str) for k in experts):
        raise HttpError(400, "'experts' must map expert ids to numeric weights")
    if len(experts) > MAX_NAMED_EXPERTS:
        raise HttpError(400, f"'experts' names more than {MAX_NAMED_EXPERTS} experts")
    for expert_id, weight in experts.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise HttpError(400, f"weight of {expert_id[:64]!r} must be a number")
        if not (math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
            raise HttpError(
                400, f"weight of {expert_id[:64]!r} must be a finite number in [0, {MAX_WEIGHT:g}]"
            )
    return {k: float(v) for k, v in experts.items()}


def make_http_server(
    expert_server: ExpertServer,
    host: str = "127.0.0.1",
    port: int = 8080,
    **options: Any,
) -> BackgroundServer:
    """A server (call ``start()``) answering from ``expert_server``; ``options`` go to
    :class:`ServeAPI` (``api_token``, ``limits``, ``workers``, ``queue``, ...)."""
    api = ServeAPI(expert_server, **options)
    return BackgroundServer(api.app(host), host, port, api.limits, name="serve-http")


def options_from_config(serve: Any) -> dict[str, Any]:
    """:class:`ServeAPI` options from the ``[serve]`` section
    (``topology.composition.worx_config.ServeConfig``)."""
    return {
        "api_token": serve.api_token,
        "limits": serve.http_limits(),
        # with batching a request mostly waits for its shared forward: admit a full batch
        "workers": max(serve.workers, serve.batch_max_rows) if serve.batching else serve.workers,
        "queue": serve.queue,
        "chars_per_token": serve.chars_per_token,
        "allowed_hosts": serve.allowed_hosts,
    }
