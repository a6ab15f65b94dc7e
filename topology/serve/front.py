"""One address in front of several ``worx serve`` replicas (``[serve] replicas``).

The loop's supervisor restarts a serve process that died, but the restart loads the trunk
and every expert again (10-30 s on 2 loaded cores), and with one process nothing answers
meanwhile. With ``replicas`` > 1 the loop starts that many ``worx serve`` processes, each
on a port of its own, and this front on the loop's serve address, in the loop's own
process (the supervisor's: what stops it stops the loop). It forwards each request as it
came to a replica that passes its health check, taking them in turn:

- every replica is asked ``GET /health`` every ``check_every_s`` (within
  ``check_timeout_s``; healthy when it answers 200). One that fails is left out until it
  answers again, and the requests waiting on it go to another one: a paused process keeps
  its socket open, so they would wait for it;
- a request whose replica refuses or drops the connection before its answer began goes to
  the next healthy one. Every route reads the model only (scoring, generation, listings),
  so sending one again has no effect twice. Once an answer has begun (a stream), it ends
  with its replica;
- no replica healthy: 503 with Retry-After.

Every check of a request (token, Host, body shape, limits) is the replicas'; the front
reads the body under the same size and time limits, so that it can send it again.
Each replica follows ``<prefix>.experts`` on its own, so for a moment after a registration
one replica may serve an expert that another does not serve yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from yarl import URL

from topology.serve import openai_format as fmt
from worx.web import (
    ERROR_SHAPES,
    BackgroundServer,
    HttpError,
    HttpLimits,
    json_errors,
    read_body,
)

log = logging.getLogger(__name__)

# headers of one connection, not of the request or answer (RFC 9110 7.6.1), and the
# lengths aiohttp sets from the body it sends
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


@dataclass
class Replica:
    url: str  # http://host:port, no trailing slash
    healthy: bool = False
    waiting: set[asyncio.Future] = field(default_factory=set)  # requests sent, no answer yet
    forwarded: int = 0


class ServeFront:
    """Forwards requests to the healthy ones of ``replicas`` (their base URLs)."""

    def __init__(
        self,
        replicas: Sequence[str],
        limits: HttpLimits | None = None,
        check_every_s: float = 0.5,
        check_timeout_s: float = 2.0,
    ) -> None:
        if not replicas:
            raise ValueError("a front needs at least one replica")
        self.replicas = [Replica(url.rstrip("/")) for url in replicas]
        self.limits = limits or HttpLimits()
        self.check_every_s = check_every_s
        self.check_timeout_s = check_timeout_s
        self.resent = 0  # requests sent again after their replica failed them
        self._turn = 0
        self._session: aiohttp.ClientSession | None = None
        self._checker: asyncio.Task | None = None
        self.server: BackgroundServer | None = None

    def start(self, host: str, port: int) -> str:
        """Listen on ``host:port`` (0: a free port) from a thread; returns the URL."""
        self.server = BackgroundServer(self.app(), host, port, self.limits, name="serve-front")
        return self.server.start().url.rstrip("/")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body_bytes, middlewares=[json_errors])
        app[ERROR_SHAPES] = {"/v1/": fmt.error_body}
        app.router.add_route("*", "/{tail:.*}", self.forward)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    # ------------------------------------------------------------------ health
    async def _start(self, _app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.check_timeout_s)
        connector = aiohttp.TCPConnector(limit=0)  # the replicas bound their own queues
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )
        await self.check_all()
        self._checker = asyncio.create_task(self._check_forever())

    async def _stop(self, _app: web.Application) -> None:
        if self._checker is not None:
            self._checker.cancel()
        if self._session is not None:
            await self._session.close()

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.check_every_s)
            await self.check_all()

    async def check_all(self) -> None:
        await asyncio.gather(*(self._check(replica) for replica in self.replicas))

    async def _check(self, replica: Replica) -> None:
        try:
            timeout = aiohttp.ClientTimeout(total=self.check_timeout_s)
            async with self._session.get(f"{replica.url}/health", timeout=timeout) as answer:
                healthy = answer.status == 200
        except (aiohttp.ClientError, TimeoutError):
            healthy = False
        if healthy and not replica.healthy:
            log.info("serve replica %s answers", replica.url)
        elif replica.healthy and not healthy:
            self._leave_out(replica, "failed its health check")
        replica.healthy = healthy

    def _leave_out(self, replica: Replica, why: str) -> None:
        log.warning("serve replica %s %s: left out until it answers again", replica.url, why)
        replica.healthy = False
        for sent in list(replica.waiting):
            sent.cancel()  # its request goes to another replica (forward)

    def _pick(self, tried: set[str]) -> Replica | None:
        """The next healthy replica not yet tried for this request."""
        n = len(self.replicas)
        for k in range(n):
            replica = self.replicas[(self._turn + k) % n]
            if replica.healthy and replica.url not in tried:
                self._turn = (self._turn + k + 1) % n
                return replica
        return None

    # ------------------------------------------------------------------ requests
    async def forward(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request, self.limits)
        tried: set[str] = set()
        while True:
            replica = self._pick(tried)
            if replica is None:
                raise HttpError(
                    503, "no serve replica is answering; try again shortly", {"Retry-After": "1"}
                )
            tried.add(replica.url)
            sent = asyncio.ensure_future(self._send(replica, request, body))
            replica.waiting.add(sent)
            try:
                answer = await sent
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():
                    raise  # the client went away: so does its request
                self.resent += 1  # its replica was left out while it waited
                continue
            except aiohttp.ClientConnectionError as exc:
                self._leave_out(replica, f"failed a request ({type(exc).__name__})")
                self.resent += 1
                continue
            finally:
                replica.waiting.discard(sent)
            replica.forwarded += 1
            try:
                return await _relay(request, answer)
            finally:
                answer.release()

    async def _send(
        self, replica: Replica, request: web.Request, body: bytes
    ) -> aiohttp.ClientResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        return await self._session.request(
            request.method,
            URL(replica.url + request.raw_path, encoded=True),
            headers=headers,
            data=body or None,
            allow_redirects=False,
        )


async def _relay(request: web.Request, answer: aiohttp.ClientResponse) -> web.StreamResponse:
    """Send ``answer`` on to the client as it arrives (a stream stays a stream)."""
    response = web.StreamResponse(status=answer.status, reason=answer.reason)
    for name, value in answer.headers.items():
        if name.lower() not in HOP_BY_HOP:
            response.headers.add(name, value)
    if answer.content_length is not None:
        response.content_length = answer.content_length
    await response.prepare(request)
    try:
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
    except aiohttp.ClientError as exc:  # the replica died mid-answer: the client sees it end
        log.warning("serve replica answer cut off: %s", type(exc).__name__)
        raise ConnectionResetError("replica closed the connection mid-answer") from exc
    await response.write_eof()
    return response
