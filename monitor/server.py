"""The dashboard's HTTP server: the page, its JS, ``/api/state`` (JSON), ``/metrics``.

Plain ``http.server`` on 127.0.0.1 by default: nothing is fetched from the internet, the
page draws inline SVG with the JS file shipped next to it, and polls ``/api/state``.
``POST /api/evaluate`` asks for an on-demand evaluation (answered 202, done in the
background by the service).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from monitor.prom import make_registry

log = logging.getLogger(__name__)

ASSETS = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/index.html": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
}


def asset(name: str) -> bytes:
    return resources.files("monitor.static").joinpath(name).read_bytes()


class DashboardServer:
    """Serve the dashboard until :meth:`stop`.

    Parameters
    ----------
    get_state
        Returns :func:`monitor.figures.build_state` output (called per request).
    on_evaluate
        Called (in a background thread) on ``POST /api/evaluate``; None: answered 404.
    port
        0 picks a free port (see :attr:`url`).
    """

    def __init__(
        self,
        get_state: Callable[[], dict[str, Any]],
        host: str = "127.0.0.1",
        port: int = 8765,
        on_evaluate: Callable[[], Any] | None = None,
    ) -> None:
        self.get_state = get_state
        self.on_evaluate = on_evaluate
        self.registry = make_registry(get_state)
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("%s " + format, self.address_string(), *args)

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                if path in ASSETS:
                    name, ctype = ASSETS[path]
                    self._send(HTTPStatus.OK, asset(name), ctype)
                elif path == "/api/state":
                    body = json.dumps(server.get_state(), allow_nan=False).encode()
                    self._send(HTTPStatus.OK, body, "application/json")
                elif path == "/metrics":
                    self._send(HTTPStatus.OK, generate_latest(server.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(HTTPStatus.OK, b"ok\n", "text/plain")
                else:
                    self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/api/evaluate" or server.on_evaluate is None:
                    self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
                    return
                threading.Thread(target=server.on_evaluate, name="evaluate", daemon=True).start()
                self._send(HTTPStatus.ACCEPTED, b'{"accepted": true}', "application/json")

        return Handler

    def start(self) -> DashboardServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="dashboard", daemon=True
        )
        self._thread.start()
        log.info("dashboard on %s (metrics: %smetrics)", self.url, self.url)
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
