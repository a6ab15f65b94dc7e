"""Serve's availability as a client sees it: ``POST /score`` twice a second from a thread.

Counting starts at the first answer (the server loads its trunk first); from then on every
request either is answered 200 or counts as failed (refused, timed out, any other status).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

MAX_OUTCOMES = 100_000  # about 14 hours of probes


class ScoreProber:
    def __init__(self, url: str, text: str, interval_s: float = 0.5, timeout_s: float = 5.0):
        self.url = url.rstrip("/") + "/score"
        self.body = json.dumps({"text": text}).encode()
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.answered = 0
        self.failed = 0
        self.in_flight = False
        self.failures: Counter[str] = Counter()  # what went wrong, how often
        self.outcomes: list[tuple[float, bool]] = []  # (monotonic time, answered), counted ones
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="score-prober", daemon=True)

    def start(self) -> ScoreProber:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s + 2)

    def availability(self) -> float | None:
        asked = self.answered + self.failed
        return self.answered / asked if asked else None

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.in_flight = True
            outcome = self._ask()
            self.in_flight = False
            if outcome is None:
                self.answered += 1
            elif self.answered:  # before the first answer the server is still loading
                self.failed += 1
                self.failures[outcome] += 1
            if self.answered and len(self.outcomes) < MAX_OUTCOMES:
                self.outcomes.append((time.monotonic(), outcome is None))
            next_at = max(next_at + self.interval_s, time.monotonic())
            self._stop.wait(next_at - time.monotonic())  # pacing, not synchronisation

    def _ask(self) -> str | None:
        """None if answered 200, else what went wrong."""
        request = urllib.request.Request(
            self.url, data=self.body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
                return None if response.status == 200 else f"status {response.status}"
        except urllib.error.HTTPError as exc:
            return f"status {exc.code}"
        except (OSError, ValueError) as exc:  # refused, reset, timed out
            return type(exc).__name__
