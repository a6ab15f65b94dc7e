"""A real `worx serve` HTTP API on 127.0.0.1 for the serving tests: a tiny trunk, two
domains (``python_code``; ``dom-legal``, named ``legal``) and one expert (``code``, of
``python_code``), behind a bearer token."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experts.serving import Batching, ExpertServer
from experts.store import ExpertStore
from experts.testing import build_tiny_trunk
from experts.trunk import load_trunk
from router.embed import default_embedder
from router.gate import Gate
from router.table import DomainTable
from tests.support.experts import domain_record, make_domain_expert
from topology.serve.http_api import make_http_server

TOKEN = "serve-test-token-8d21"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Served:
    port: int
    server: ExpertServer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``(status, JSON answer)`` of a POST with the token."""
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={**AUTH, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@contextlib.contextmanager
def tiny_served(
    root: Path, max_new_tokens: int = 16, batching: Batching | None = None, **options: Any
) -> Iterator[Served]:
    """The server (``batching``: its shared forwards; ``options`` go to
    :class:`topology.serve.http_api.ServeAPI`)."""
    trunk = load_trunk(build_tiny_trunk(root / "trunk", layers=2, width=32, vocab_size=320))
    store = ExpertStore(root / "store", trunk.fingerprint)
    embedder = default_embedder()
    table = DomainTable()
    table.apply(domain_record(embedder, "python_code"))
    table.apply(domain_record(embedder, "legal", domain_id="dom-legal"))
    server = ExpertServer(
        trunk,
        store,
        embedder,
        Gate(top_k=1),
        table,
        max_new_tokens=max_new_tokens,
        batching=batching,
    )
    expert = make_domain_expert(store, trunk, embedder, "code", "python_code", seed=1)
    assert server.register(expert.registration()).status == "registered"
    httpd = make_http_server(server, "127.0.0.1", 0, api_token=TOKEN, **options).start()
    try:
        yield Served(httpd.server_address[1], server)
    finally:
        httpd.stop()
