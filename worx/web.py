"""What both HTTP servers (``worx serve``, the monitor's dashboard) share, on aiohttp.

* :class:`BackgroundServer` runs an aiohttp application on its own event loop in a
  daemon thread, with the limits of :class:`HttpLimits` (idle/slow-header timeout, header
  sizes, body size), so a synchronous command can start, query and stop it.
* Middlewares: :func:`json_errors` (every error answers ``{"error": ...}``, never an
  exception text or a traceback; an application may give the paths under a prefix
  another shape, :data:`ERROR_SHAPES`), :func:`refuse_path_tricks` (dot segments, encoded
  slashes: 404), :func:`bearer_token` (``Authorization: Bearer <token>``; 401 otherwise),
  :func:`host_check` (the Host header must name this server: no DNS rebinding).
* :func:`read_body` reads a body under a size limit and a read timeout; :func:`read_json`
  reads a JSON object so, and refuses NaN/Infinity and deep nesting with a 400 and a short
  reason.
* :func:`follower_health`: the state of the table followers a process depends on.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from worx.errors import UserError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
# a raw path with a dot segment, an encoded slash/backslash/dot or a NUL names no route
PARSE_ON_LOOP_BYTES = 64 << 10  # larger JSON bodies are parsed on a worker thread
# set by bearer_token on every request: whether it carried the token (True when none is set)
AUTHORIZED = web.RequestKey("authorized", bool)
# path prefix -> shape(status, reason, exception) -> the JSON error body of paths under it
ErrorShape = Callable[[int, str, BaseException], dict[str, Any]]
ERROR_SHAPES = web.AppKey("error_shapes", dict[str, ErrorShape])
_PATH_TRICK = re.compile(r"(^|/)\.\.?(/|$)|%2f|%5c|%2e|%00|\\", re.IGNORECASE)


@dataclass(frozen=True)
class HttpLimits:
    max_body_bytes: int = 4 << 20  # a larger declared or sent body: 413, not read
    read_timeout_s: float = 10.0  # a body not received by then: 408, connection closed
    idle_timeout_s: float = 15.0  # a connection with no complete request by then is closed
    max_line_bytes: int = 8190  # request line and each header line
    max_headers: int = 64


class HttpError(Exception):
    """An answer other than 200, raised from a handler: ``status`` and the reason."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


def error_response(status: int, reason: str, headers: dict[str, str] | None = None):
    return web.json_response({"error": reason}, status=status, headers=headers)


def dumps(body: Any) -> str:
    """JSON of an answer; a non-finite number is a server fault, never sent as NaN."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False)


def json_answer(body: Any, status: int = 200) -> web.Response:
    """``body`` as a JSON response; a NaN or infinity in it is a 500, never sent."""
    try:
        text = dumps(body)
    except ValueError:  # a NaN or infinity from the model: never sent as a number
        raise HttpError(500, "the model produced a non-finite number for this request") from None
    return web.Response(text=text, status=status, content_type="application/json")


def _error(
    request: web.Request,
    status: int,
    reason: str,
    headers: dict[str, str] | None,
    exc: BaseException,
) -> web.Response:
    """The error answer in the shape of the request's path (:data:`ERROR_SHAPES`)."""
    for prefix, shape in request.app.get(ERROR_SHAPES, {}).items():
        if request.path.startswith(prefix):
            return web.json_response(shape(status, reason, exc), status=status, headers=headers)
    return error_response(status, reason, headers)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as exc:
        response = _error(request, exc.status, exc.reason, exc.headers, exc)
        if exc.status == 408:
            response.force_close()
        return response
    except web.HTTPException as exc:  # aiohttp's own: 404, 405, 413 ...
        if exc.status < 400:
            raise
        routing = exc.status in (404, 405)
        reason = f"no route {request.method} {request.path[:100]}" if routing else exc.reason
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return _error(request, exc.status, reason, headers, exc)
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return _error(request, 500, "internal error; the server log has the details", None, exc)


@web.middleware
async def refuse_path_tricks(request: web.Request, handler: Handler) -> web.StreamResponse:
    path = request.raw_path.split("?", 1)[0]
    if _PATH_TRICK.search(path) or "//" in path:
        raise HttpError(404, "no such path")
    return await handler(request)


def bearer_token(token: str, open_paths: Iterable[str] = ()) -> Any:
    """Require ``Authorization: Bearer <token>`` on every path but ``open_paths``.

    An empty ``token`` turns the check off. The token is compared in constant time and
    never appears in an answer or a log line.
    """
    expected = token.encode()
    open_set = frozenset(open_paths)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[AUTHORIZED] = authorized(request)
        if request[AUTHORIZED] or request.path in open_set:
            return await handler(request)
        raise HttpError(
            401,
            "this server needs 'Authorization: Bearer <token>' (its api_token setting)",
            {"WWW-Authenticate": 'Bearer realm="worx"'},
        )

    def authorized(request: web.Request) -> bool:
        if not expected:
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        try:
            given_bytes = given.strip().encode("utf-8", "surrogateescape")
        except UnicodeError:
            return False
        return scheme.lower() == "bearer" and hmac.compare_digest(given_bytes, expected)

    return check


def host_name(header: str) -> str:
    """The host part of a Host header (``[::1]:8765`` -> ``::1``), lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_check(bind_host: str, allowed: Iterable[str] = ()) -> Any:
    """Answer 421 to a request whose Host header names another server (DNS rebinding).

    Allowed: the loopback names, the bind address (unless a wildcard) and ``allowed``.
    """
    names = set(LOOPBACK_HOSTS) | {host_name(h) for h in allowed if h.strip()}
    if bind_host not in WILDCARD_HOSTS:
        names.add(host_name(bind_host) if ":" not in bind_host else bind_host.lower())

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if host_name(request.headers.get("Host", "")) not in names:
            raise HttpError(
                421,
                "the Host header does not name this server; add the name you reach it by "
                "to the allowed_hosts setting",
            )
        return await handler(request)

    return check


async def read_body(request: web.Request, limits: HttpLimits) -> bytes:
    """The request's body, read within ``limits``.

    Raises:
        HttpError: 413 (declared or sent over the limit), 408 (not received in time).
    """
    if request.content_length is not None and request.content_length > limits.max_body_bytes:
        raise HttpError(413, f"request body over the {limits.max_body_bytes}-byte limit")
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            return await request.read()
    except TimeoutError:
        raise HttpError(
            408, f"request body not received within {limits.read_timeout_s:g} s"
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise HttpError(413, f"request body over the {limits.max_body_bytes}-byte limit") from None


async def read_json(request: web.Request, limits: HttpLimits) -> dict[str, Any]:
    """The request's JSON object, read within ``limits``.

    Raises:
        HttpError: 413 (too large), 408 (not received in time), 400 (not a JSON object,
            NaN/Infinity, nested too deep).
    """
    raw = await read_body(request, limits)
    try:
        if len(raw) > PARSE_ON_LOOP_BYTES:  # a big body is parsed off the event loop
            body = await asyncio.to_thread(_parse, raw)
        else:
            body = _parse(raw)
    except _NonFinite:
        raise HttpError(400, "body has NaN or Infinity: JSON numbers must be finite") from None
    except RecursionError:
        raise HttpError(400, "body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError, huge integers
        raise HttpError(400, "body is not valid JSON (UTF-8)") from None
    if not isinstance(body, dict):
        raise HttpError(400, "body must be a JSON object")
    return body


class _NonFinite(ValueError):
    pass


def _parse(raw: bytes) -> Any:
    return json.loads(raw or b"{}", parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def follower_health(followers: Iterable[Any]) -> tuple[bool, dict[str, dict[str, Any]]]:
    """``(all alive, {topic: {"alive", "error"?}})`` of table followers.

    A follower is anything with ``topic``, ``alive`` and ``error`` (e.g.
    :class:`topology.runtimes.table_follower.TableFollower`).
    """
    report: dict[str, dict[str, Any]] = {}
    for follower in followers:
        alive = bool(follower.alive)
        entry: dict[str, Any] = {"alive": alive}
        if not alive:
            error = getattr(follower, "error", None)
            entry["error"] = str(error)[:300] if error is not None else "stopped"
        report[str(follower.topic)] = entry
    return all(e["alive"] for e in report.values()), report


class _ProtocolLog(logging.Filter):
    """aiohttp logs a traceback for every malformed request; one line is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.msg}: %s"
            record.args = (*(record.args or ()), " ".join(str(record.exc_info[1]).split())[:200])
            record.exc_info = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_protocol_log = logging.getLogger("worx.web.protocol")
_protocol_log.addFilter(_ProtocolLog())


class BackgroundServer:
    """Serve ``app`` on ``host:port`` from a daemon thread until :meth:`stop`.

    ``port`` 0 picks a free port (see :attr:`server_address`, :attr:`url`).
    """

    def __init__(
        self, app: web.Application, host: str, port: int, limits: HttpLimits, name: str = "http"
    ) -> None:
        self.app = app
        self.host, self.port = host, port
        self.limits = limits
        self.name = name
        self.server_address: tuple[str, int] = (host, port)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def start(self) -> BackgroundServer:
        """Bind and start serving; a bind error (port taken, bad address) is a UserError."""
        self._thread.start()
        self._ready.wait()
        # port taken or out of range, address not local: the user's to fix
        if isinstance(self._failure, OSError | OverflowError):
            reason = getattr(self._failure, "strerror", None) or self._failure
            raise UserError(
                f"{self.name} cannot listen on {self.host}:{self.port} ({reason})",
                "choose another --port (0 picks a free one) or --host",
            ) from self._failure
        if self._failure is not None:
            raise self._failure
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._setup())
        except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _setup(self) -> None:
        limits = self.limits
        self._runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            logger=_protocol_log,
            keepalive_timeout=limits.idle_timeout_s,
            max_line_size=limits.max_line_bytes,
            max_field_size=limits.max_line_bytes,
            max_headers=limits.max_headers,
            lingering_time=2.0,
            shutdown_timeout=2.0,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=512)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # noqa: SLF001
        self.server_address = tuple(sockets[0].getsockname()[:2])  # type: ignore[assignment]

    def call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the server's event loop (thread-safe)."""
        self._loop.call_soon_threadsafe(fn)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
