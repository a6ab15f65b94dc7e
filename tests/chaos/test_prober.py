"""The /score prober against a server that answers, fails, then answers again."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from topology.chaos.availability import outages
from topology.chaos.prober import ScoreProber

pytestmark = pytest.mark.slow  # a server thread and ~20 requests (about a second)

# the status of each request in turn: loading (not counted), answering, failing, answering
STATUSES = [503, 503, 200, 200, 200, 500, 500, 200]


def test_the_prober_counts_from_the_first_answer_and_sees_the_outage():
    received: list[bytes] = []
    enough = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            status = STATUSES[min(len(received), len(STATUSES)) - 1]
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            if len(received) >= 12:
                enough.set()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prober = ScoreProber(f"http://127.0.0.1:{server.server_port}/", "hello", interval_s=0.02)
        prober.start()
        assert enough.wait(timeout=30)
        prober.stop()
    finally:
        server.shutdown()
    asked = len(received)
    assert received[0] == b'{"text": "hello"}'
    assert prober.failed == 2 and prober.failures == {"status 500": 2}
    assert prober.answered == asked - 4  # the two 503s came before the first answer
    assert prober.availability() == pytest.approx((asked - 4) / (asked - 2))
    [outage] = outages(prober.outcomes)
    assert outage.failed == 2
