"""The route stage: embed each document, assign it to a known domain or mark it novel.

Stateless apart from the domain table it follows (``worx.domains``), so it runs as many
parallel workers as ``worx.docs`` has partitions. A document goes to the nearest active
domain when its cosine similarity reaches that domain's threshold; otherwise it is novel,
and its text travels on to the discover stage. So does the text of an *uncertain*
document: assigned, but below the domain's core threshold, where the first documents of
a new domain that resembles a known one land. Every decision is stamped with the table
version it used.

Example
-------
>>> from ingest.records import Doc
>>> from worx.stage import Message
>>> stage = RouteStage()
>>> [emit] = stage.process(Message(b"", topic="worx.docs", partition=0, offset=7),
...                        Doc(doc_id="d1", text="hello world"))
>>> emit.topic, emit.record.domain_id, emit.record.docs_offset
('routed', None, 7)
>>> [[again]] = stage.process_batch([Message(b"", topic="worx.docs", partition=0, offset=7)],
...                                 [Doc(doc_id="d1", text="hello world")])
>>> again.record == emit.record
True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ingest.records import Doc
from router.config import RouterConfig
from router.embed import Embedder, default_embedder
from router.records import RoutedDoc
from router.table import DomainTable
from worx.ids import content_hash
from worx.records import Record
from worx.stage import Emit, Message

log = logging.getLogger(__name__)


class RouteStage:
    input_record: ClassVar[type[Record] | None] = Doc

    def __init__(
        self,
        config: RouterConfig | None = None,
        table: DomainTable | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.config = config or RouterConfig()
        self.embedder = embedder or default_embedder(self.config)
        # a row of another embedder's dimension is refused, even as the first row
        self.table = table if table is not None else DomainTable(dim=self.embedder.dim)
        self.routed = 0
        self.novel = 0

    def process(self, message: Message, record: Record | None = None) -> list[Emit]:
        if not isinstance(record, Doc):
            raise TypeError(f"route expects a Doc, got {type(record).__name__}")
        vector = self.embedder.embed([record.text])[0]  # (dim,)
        emits, novel = self._decide(message, record, vector)
        self.routed += 1
        self.novel += novel
        return emits

    def process_batch(
        self, messages: Sequence[Message], records: Sequence[Record | None]
    ) -> list[list[Emit]]:
        """:meth:`process` of each ``(message, record)`` pair, the texts embedded in one
        call (the same vectors as one by one; a runtime that consumes batches calls this).

        All or nothing: if it raises (a record is not a Doc, a text cannot be embedded),
        nothing was counted, and the caller can run :meth:`process` on each pair to find
        the bad one.
        """
        if len(messages) != len(records):
            raise ValueError(f"{len(messages)} messages but {len(records)} records")
        for record in records:
            if not isinstance(record, Doc):
                raise TypeError(f"route expects a Doc, got {type(record).__name__}")
        docs: list[Doc] = list(records)  # type: ignore[arg-type]
        vectors = self.embedder.embed([doc.text for doc in docs])  # (N, dim)
        decided = [self._decide(m, d, v) for m, d, v in zip(messages, docs, vectors, strict=True)]
        self.routed += len(decided)
        self.novel += sum(novel for _, novel in decided)
        return [emits for emits, _ in decided]

    def process_embedded(
        self, message: Message, record: Record | None, vector: np.ndarray
    ) -> list[Emit]:
        """:meth:`process` with the text already embedded by this stage's embedder (a
        runtime that embeds in batches elsewhere, as Flink's vectorised function)."""
        if not isinstance(record, Doc):
            raise TypeError(f"route expects a Doc, got {type(record).__name__}")
        if vector.shape != (self.embedder.dim,):
            raise ValueError(f"vector of shape {vector.shape}, not ({self.embedder.dim},)")
        emits, novel = self._decide(message, record, vector)
        self.routed += 1
        self.novel += novel
        return emits

    def _decide(self, message: Message, record: Doc, vector: np.ndarray) -> tuple[list[Emit], bool]:
        """The routing decision for one embedded document, and whether it is novel."""
        domain_id, similarity, uncertain, version = self.table.decide(vector)
        novel = domain_id is None
        routed = RoutedDoc(
            doc_id=record.doc_id,
            domain_id=domain_id,
            similarity=round(similarity, 6),
            docs_topic=message.topic,
            docs_partition=message.partition,
            docs_offset=message.offset,
            text=record.text if uncertain else "",
            label=record.label,
            domain_version=version,
            uncertain=uncertain and not novel,
            doc_created_ms=record.created_ms or message.timestamp_ms,
            content_id=content_hash(record.text, length=16),
        )
        return [Emit("routed", record.doc_id, routed)], novel

    def snapshot(self) -> dict[str, Any]:
        return {}  # the table is rebuilt from worx.domains; nothing else is kept

    def restore(self, state: dict[str, Any]) -> None:
        pass
