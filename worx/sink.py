"""What a stage or a job runner writes its records to, without knowing Kafka.

A runtime in ``topology/`` injects an object with these two verbs (the Kafka one is
:class:`topology.runtimes.publisher.Publisher`); a test can inject a list.
"""

from __future__ import annotations

from typing import Protocol

from worx.records import Record


class Sink(Protocol):
    """``send`` queues a record for a topic suffix ("docs", "dlq", "experts", ...);
    ``flush`` returns once everything sent so far is delivered, or raises."""

    def send(self, topic: str, key: str | None, record: Record) -> None: ...

    def flush(self) -> None: ...
