"""The contract between stage objects (algorithms) and runtimes (Faust, plain Kafka, tests).

A stage knows nothing of Kafka: it takes a :class:`Message` (or, when it declares
``input_record``, a decoded record) and returns the records to emit. Its state is a
JSON-able snapshot that can be saved and restored.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, Protocol

from worx.records import Record


# Message and Emit are built once per record on the hot path: named tuples (immutable,
# three times cheaper to build than frozen dataclasses).
class Message(NamedTuple):
    """One input message as the runtime saw it (bytes untouched)."""

    value: bytes | None
    key: bytes | None = None
    topic: str = ""
    partition: int = -1
    offset: int = -1
    timestamp_ms: int = 0


class Emit(NamedTuple):
    """A record to produce: ``topic`` is a topic suffix ("docs", "dlq", ...)."""

    topic: str
    key: str | None
    record: Record


class Stage(Protocol):
    # Record type the runtime decodes input into; None: the stage gets the raw Message.
    input_record: ClassVar[type[Record] | None]

    def process(self, message: Message, record: Record | None = None) -> list[Emit]: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...
