"""The serving HTTP API (stdlib ``ThreadingHTTPServer``), bound to 127.0.0.1 by default.

Routes (JSON in, JSON out):

* ``GET /health``                 status, trunk, table version, counters, recent refusals
* ``GET /experts``                the registered experts (manifests without centroids)
* ``GET /experts/<id>``           one expert's manifest
* ``POST /score``    ``{"text", "experts"?}``   per-token loss, perplexity, experts used
  (and the domain the gate gave the text)
* ``POST /generate`` ``{"text", "max_new_tokens"?, "experts"?}``  greedy continuation

A bad request answers 400 with ``{"error": ...}``; an unknown route 404; a failure 500.
Only wiring lives here: every answer comes from :class:`experts.serving.ExpertServer`.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from experts.serving import ExpertServer, RequestError

log = logging.getLogger(__name__)

MAX_BODY = 4 << 20  # bytes of a request body


class _Handler(BaseHTTPRequestHandler):
    server_version = "worx-serve/1"
    expert_server: ExpertServer  # set on the subclass made by make_http_server

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise RequestError(f"request body of {length} bytes is over the {MAX_BODY} limit")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise RequestError("body must be a JSON object")
        experts = body.get("experts")
        if experts is not None and not (
            isinstance(experts, dict)
            and all(isinstance(k, str) and isinstance(v, int | float) for k, v in experts.items())
        ):
            raise RequestError("'experts' must map expert ids to numeric weights")
        return body

    def _dispatch(self, method: str) -> None:
        server = self.expert_server
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            if method == "GET" and path == "/health":
                return self._send(200, server.health())
            if method == "GET" and path == "/experts":
                return self._send(200, {"experts": server.experts()})
            if method == "GET" and path.startswith("/experts/"):
                manifest = server.table.manifests.get(path[len("/experts/") :])
                if manifest is None:
                    return self._send(404, {"error": "no such expert; GET /experts lists them"})
                return self._send(200, manifest.to_dict())
            if method == "POST" and path == "/score":
                body = self._body()
                return self._send(200, server.score(body.get("text"), body.get("experts")))
            if method == "POST" and path == "/generate":
                body = self._body()
                result = server.generate(
                    body.get("text"), body.get("max_new_tokens", 32), body.get("experts")
                )
                return self._send(200, result)
            return self._send(404, {"error": f"no route {method} {path}"})
        except RequestError as exc:
            return self._send(400, {"error": str(exc)})
        except Exception as exc:  # answer 500 rather than dropping the connection
            log.exception("request %s %s failed", method, path)
            return self._send(500, {"error": f"{type(exc).__name__}: {exc}"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")


def make_http_server(
    expert_server: ExpertServer, host: str = "127.0.0.1", port: int = 8080
) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) answering from ``expert_server``."""
    handler = type("Handler", (_Handler,), {"expert_server": expert_server})
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    return httpd


def serve_in_thread(httpd: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    thread.start()
    return thread
