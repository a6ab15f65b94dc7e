"""The Flink functions around the stage objects: route (with the domain table as broadcast
state) and discover (one logical instance, its state in keyed state).

The stage objects are the ones every runtime uses (:class:`router.route.RouteStage`,
:class:`router.discover.DiscoverStage`), fed through
:func:`topology.runtimes.stage_runner.apply_stage`, so a record a stage cannot decode or
fails on becomes a dead letter with the reason, as in the plain runner and Faust. They
know nothing of Flink.

Rows between operators:

- from a source table: ``(k, v, partition, offset, ts)`` (see :mod:`topology.flink.kafka_tables`);
  the documents' rows get a sixth column, ``vec``: the text's embedding as float32 bytes,
  made in batches by :class:`EmbedDocs` (a vectorised function: Flink hands it Arrow
  batches and flushes them at every checkpoint), None for a value that is not a document;
- out of route and discover: ``(k, v, topic, ms)``: key, value, full topic name, and when
  it was made (discover's clock for a routed document, as a topic's timestamp is for
  ``worx discover``);
- into discover's control input: ``(kind, v)`` with kind ``domain`` or ``expert``.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from typing import Any

import numpy as np
from pyflink.common import Row, Types
from pyflink.datastream.functions import (
    BroadcastProcessFunction,
    KeyedCoProcessFunction,
    RuntimeContext,
)
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from pyflink.table.udf import FunctionContext, ScalarFunction

from router.config import RouterConfig
from router.records import DomainRecord
from worx.records import RecordError
from worx.stage import Emit, Message

log = logging.getLogger(__name__)

BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())
OUT_TYPE = Types.ROW_NAMED(["k", "v", "topic", "ms"], [BYTES, BYTES, Types.STRING(), Types.LONG()])
SINK_TYPE = Types.ROW_NAMED(["k", "v", "topic"], [BYTES, BYTES, Types.STRING()])
CONTROL_TYPE = Types.ROW_NAMED(["kind", "v"], [Types.STRING(), BYTES])
# domain id -> the row's JSON: what every route instance routes by, checkpointed with it
DOMAINS = MapStateDescriptor("domains", Types.STRING(), Types.STRING())


def to_millis(ts: Any) -> int:
    """A TIMESTAMP_LTZ column (an Instant in PyFlink) as epoch milliseconds (0 if absent)."""
    if ts is None:
        return 0
    if hasattr(ts, "to_epoch_milli"):
        return int(ts.to_epoch_milli())
    if hasattr(ts, "timestamp"):
        return int(ts.timestamp() * 1000)
    return int(ts)


def out_row(emit: Emit, topic: str, now_ms: int) -> Row:
    key = emit.key.encode() if emit.key is not None else None
    return Row(key, emit.record.to_json(), topic, now_ms)


def to_sink(row: Row) -> Row:
    return Row(row[0], row[1], row[2])


class EmbedDocs(ScalarFunction):
    """``vec`` of each ``worx.docs`` value, a pandas Series at a time: the route stage's
    embedder over every text of the batch in one call (:mod:`router.embed_hashing`), so
    the route function only decides. A value that is not a document gets None, and the
    route function dead-letters it as every runtime does."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.embedder = None

    def open(self, function_context: FunctionContext) -> None:
        from router.embedders import default_embedder

        self.embedder = default_embedder(self.config)

    def eval(self, values: Any) -> Any:
        import pandas as pd

        from ingest.records import Doc

        out: list[bytes | None] = [None] * len(values)
        texts, where = [], []
        for i, raw in enumerate(values):
            try:
                doc = Doc.from_json(bytes(raw) if raw is not None else b"", strict=False)
            except Exception:  # the route function dead-letters it with the reason
                continue
            texts.append(doc.text)
            where.append(i)
        for i, vector in zip(where, self._embed(texts), strict=True):
            out[i] = None if vector is None else vector.tobytes()
        return pd.Series(out, dtype=object)

    def _embed(self, texts: list[str]) -> list[Any]:
        if not texts:
            return []
        try:
            return list(self.embedder.embed(texts))  # (N, dim) float32
        except Exception:  # one bad text: the others still get theirs
            out = []
            for text in texts:
                try:
                    out.append(self.embedder.embed([text])[0])
                except Exception:  # route embeds it again and dead-letters it
                    out.append(None)
            return out


class RouteFunction(BroadcastProcessFunction):
    """``worx.docs`` -> routed decisions (and dead letters); ``worx.domains`` broadcast."""

    def __init__(self, config: RouterConfig, topic_prefix: str) -> None:
        self.config = config
        self.prefix = topic_prefix
        self.stage = None
        self.loaded = False  # the table rebuilt from the (restored) broadcast state

    def open(self, runtime_context: RuntimeContext) -> None:
        from router.route import RouteStage

        self.stage = RouteStage(self.config)

    def _load(self, state: Any) -> None:
        for _domain_id, body in state.items():
            self.stage.table.apply(DomainRecord.from_json(body.encode(), strict=False))
        self.loaded = True

    def process_element(self, value: Row, ctx: BroadcastProcessFunction.ReadOnlyContext):
        from topology.runtimes.stage_runner import apply_stage

        if not self.loaded:
            self._load(ctx.get_broadcast_state(DOMAINS))
        raw = bytes(value[1]) if value[1] is not None else b""
        key = bytes(value[0]) if value[0] is not None else None
        message = Message(raw, key, f"{self.prefix}.docs", value[2], value[3], to_millis(value[4]))
        vec = value[5] if len(value) > 5 else None
        if vec is None:
            emits = apply_stage(self.stage, message, "route")
        else:
            vector = np.frombuffer(bytes(vec), dtype=np.float32)  # (dim,)
            embedded = functools.partial(self.stage.process_embedded, vector=vector)
            emits = apply_stage(self.stage, message, "route", process=embedded)
        now = int(time.time() * 1000)
        for emit in emits:
            yield out_row(emit, f"{self.prefix}.{emit.topic}", now)

    def process_broadcast_element(self, value: Row, ctx: BroadcastProcessFunction.Context):
        if not self.loaded:
            self._load(ctx.get_broadcast_state(DOMAINS))
        if value[1] is None:
            return  # a tombstone: the table keeps its rows (as the route followers do)
        try:
            row = DomainRecord.from_json(bytes(value[1]), strict=False)
            self.stage.table.apply(row)
        except (RecordError, ValueError) as exc:  # discover dead-letters the rows it refuses
            log.warning("route: domain row skipped: %s", exc)
            return
        held = self.stage.table.get(row.domain_id)
        if held is not None:
            ctx.get_broadcast_state(DOMAINS).put(row.domain_id, held.to_json().decode())


class DiscoverFunction(KeyedCoProcessFunction):
    """Routed decisions (input 1) and table rows / registrations (input 2) -> discover's
    outputs; state: snapshot + journal (:class:`topology.flink.journal.DiscoverJournal`)
    and the decisions held to be merged by partition
    (:class:`topology.flink.ordering.LaneMerge`)."""

    def __init__(
        self,
        config: RouterConfig,
        topic_prefix: str,
        compact_every: int,
        lanes: list[str],
        order_idle_ms: int,
    ) -> None:
        self.config = config
        self.prefix = topic_prefix
        self.compact_every = compact_every
        self.lanes = lanes
        self.order_idle_ms = order_idle_ms
        self.journal = None
        self.merge = None
        self.timer_at = None  # the processing-time timer armed for the merge, if any
        self.loaded = False

    def open(self, runtime_context: RuntimeContext) -> None:
        from router.discover import DiscoverStage
        from topology.flink.journal import DiscoverJournal

        self.journal = DiscoverJournal(
            DiscoverStage(self.config), self.prefix, compact_every=self.compact_every
        )
        self.snapshot_state = runtime_context.get_state(
            ValueStateDescriptor("discover-snapshot", Types.STRING())
        )
        self.journal_state = runtime_context.get_list_state(
            ListStateDescriptor("discover-journal", Types.STRING())
        )
        # "<lane>@<offset>" -> Held JSON; lane -> offset of its last released decision
        self.held_state = runtime_context.get_map_state(
            MapStateDescriptor("discover-held", Types.STRING(), Types.STRING())
        )
        self.released_state = runtime_context.get_map_state(
            MapStateDescriptor("discover-released", Types.STRING(), Types.LONG())
        )

    def _load(self, now_ms: int) -> None:
        from topology.flink.ordering import Held, LaneMerge

        if self.loaded:
            return
        self.journal.restore(self.snapshot_state.value(), list(self.journal_state.get() or []))
        self.merge = LaneMerge(self.lanes, self.order_idle_ms, now_ms)
        held = [Held.from_json(text) for text in self.held_state.values()]
        released = {lane: int(offset) for lane, offset in self.released_state.items()}
        self.merge.restore(held, released, now_ms)
        self.loaded = True

    def _apply(self, entry: dict[str, Any]):
        emits = self.journal.apply(entry)
        if self.journal.due:
            self.snapshot_state.update(self.journal.snapshot())
            self.journal_state.clear()
        else:
            self.journal_state.add(json.dumps(entry, separators=(",", ":")))
        now = int(time.time() * 1000)
        for emit in emits:
            yield out_row(emit, f"{self.prefix}.{emit.topic}", now)

    def _release(self, ctx: Any, now_ms: int):
        for held in self.merge.ready(now_ms):
            self.held_state.remove(f"{held.lane}@{held.offset}")
            self.released_state.put(held.lane, held.offset)
            yield from self._apply(held.entry)
        if self.merge.held and (self.timer_at is None or self.timer_at <= now_ms):
            self.timer_at = now_ms + max(self.order_idle_ms, 1)
            ctx.timer_service().register_processing_time_timer(self.timer_at)

    def process_element1(self, value: Row, ctx: KeyedCoProcessFunction.Context):
        from topology.flink.journal import DiscoverJournal
        from topology.flink.ordering import Held

        now = ctx.timer_service().current_processing_time()
        self._load(now)
        entry = DiscoverJournal.entry("routed", bytes(value[1]), value[3])
        held = Held.of(entry)
        if held is None:  # says nowhere where it came from: the stage dead-letters it
            yield from self._apply(entry)
            return
        if self.merge.add(held, now):
            self.held_state.put(f"{held.lane}@{held.offset}", held.to_json())
        yield from self._release(ctx, now)

    def process_element2(self, value: Row, ctx: KeyedCoProcessFunction.Context):
        from topology.flink.journal import DiscoverJournal

        self._load(ctx.timer_service().current_processing_time())
        raw = bytes(value[1]) if value[1] is not None else None
        yield from self._apply(DiscoverJournal.entry(value[0], raw))

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext):
        now = ctx.timer_service().current_processing_time()
        self._load(now)
        self.timer_at = None
        yield from self._release(ctx, now)
