"""The plain confluent-kafka runtime: feeds any stage object, at least once.

The batch runtime. Loop (confluent's example discipline): consume a batch, run the stage
on its messages (in one ``process_batch`` call where the stage has one), send every output
through the :class:`~topology.runtimes.publisher.Publisher`, flush it (it raises if anything was not
delivered), then store and commit the batch's offsets.
A crash between produce and commit replays at most one batch; the stages' keyed,
idempotent effects make that safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from ingest.dead_letters import dead_letter
from topology.composition.kafka_clients import (
    carries_record,
    commit_offsets,
    make_consumer,
    make_producer,
    to_message,
)
from topology.composition.topics import Topics
from topology.runtimes.publisher import Publisher
from worx.records import Record, RecordError
from worx.stage import Emit, Message, Stage

log = logging.getLogger(__name__)


def apply_stage(
    stage: Stage,
    message: Message,
    stage_name: str,
    process: Callable[[Message, Record | None], list[Emit]] | None = None,
) -> list[Emit]:
    """Decode (if the stage wants a record) and process (``stage.process``, or ``process``
    in its place); any failure becomes a dead letter.

    Decoding happens inside the error handling: a record that breaks the decoder (too
    deep, not finite, wrong types...) is dead-lettered like one that breaks the stage, and
    the stream goes on. A message of the dead-letter topic itself is never dead-lettered
    again (that would loop): its failure is logged and it is dropped.
    """
    try:
        record = None
        if stage.input_record is not None:
            record = stage.input_record.from_json(message.value or b"", strict=False)
        return (process or stage.process)(message, record)
    except RecordError as exc:
        return reject(message, exc.reason, str(exc), stage_name)
    except Exception as exc:  # a bug or bad data in one message must not stop the stream
        log.exception(
            "stage %s failed on %s[%d]@%d",
            stage_name,
            message.topic,
            message.partition,
            message.offset,
        )
        return reject(message, "stage_error", f"{type(exc).__name__}: {exc}", stage_name)


def apply_stage_batch(
    stage: Stage, messages: Sequence[Message], stage_name: str
) -> list[list[Emit]]:
    """:func:`apply_stage` of each message, in order; a stage with ``process_batch`` gets
    every record that decodes in one call. If that call raises, each of those messages
    goes through :func:`apply_stage` on its own, so only a bad one is dead-lettered."""
    process_batch = getattr(stage, "process_batch", None)
    if process_batch is None or stage.input_record is None:
        return [apply_stage(stage, message, stage_name) for message in messages]
    results: list[list[Emit]] = [[] for _ in messages]
    decoded: list[int] = []
    records = []
    for i, message in enumerate(messages):
        try:
            records.append(stage.input_record.from_json(message.value or b"", strict=False))
            decoded.append(i)
        except Exception:  # apply_stage dead-letters it with the reason
            results[i] = apply_stage(stage, message, stage_name)
    if decoded:
        try:
            outputs = process_batch([messages[i] for i in decoded], records)
        except Exception:
            log.info("stage %s: batch of %d failed; one by one", stage_name, len(decoded))
            outputs = [apply_stage(stage, messages[i], stage_name) for i in decoded]
        for i, emits in zip(decoded, outputs, strict=True):
            results[i] = emits
    return results


def reject(message: Message, reason: str, detail: str, stage_name: str) -> list[Emit]:
    """The dead-letter emit for ``message`` (none for a message of a dead-letter topic)."""
    if message.topic.endswith(".dlq"):
        log.warning(
            "%s: dropped dead letter %s@%d: %s",
            stage_name,
            message.topic,
            message.offset,
            detail[:200],
        )
        return []
    return [Emit("dlq", None, dead_letter(message, reason, detail, stage_name))]


class FollowerDied(RuntimeError):
    """A table follower of this process stopped: the process must exit to be restarted."""


def check_followers(followers: Sequence[Any]) -> None:
    """Raise :class:`FollowerDied` if one of ``followers`` (``.healthy()``) stopped."""
    for follower in followers:
        if not follower.healthy():
            raise FollowerDied(f"{follower.describe()}; exiting so the supervisor restarts us")


class StageRunner:
    """Run ``stage`` over ``input_topics`` with consumer group ``group_id``."""

    def __init__(
        self,
        stage: Stage,
        conf: dict,
        topics: Topics,
        input_topics: list[str],
        group_id: str,
        stage_name: str,
        batch_size: int = 500,
        session_timeout_ms: int = 10_000,
        on_batch: Callable[[int, int], None] | None = None,
        producer_conf: dict | None = None,
        followers: Sequence[Any] = (),
    ) -> None:
        self.stage = stage
        self.topics = topics
        self.input_topics = input_topics
        self.stage_name = stage_name
        self.batch_size = batch_size
        self.on_batch = on_batch  # called with (messages in, records out) after each commit
        self.session_timeout_ms = session_timeout_ms
        self.consumer = make_consumer(conf, group_id, session_timeout_ms)
        # the outputs may go to another cluster than the input comes from (worx connect)
        self.publisher = Publisher(
            make_producer(conf if producer_conf is None else producer_conf), topics
        )
        self.consumed = 0
        self.emitted = 0
        # table followers this stage depends on: if one stops, run() raises FollowerDied
        self.followers = list(followers)

    def run(self, stop: threading.Event | None = None, idle_timeout_s: float | None = None) -> None:
        """Process until ``stop`` is set, or nothing arrived for ``idle_timeout_s`` seconds."""
        stop = stop or threading.Event()
        # the idle clock starts at the (latest) partition assignment: a group join takes
        # about half the session timeout and is not "no input"; before any assignment,
        # the join itself gets two session timeouts on top
        last_data = time.monotonic() + 2 * self.session_timeout_ms / 1000

        def on_assign(consumer: object, partitions: list) -> None:
            nonlocal last_data
            last_data = time.monotonic()

        self.consumer.subscribe(self.input_topics, on_assign=on_assign)
        try:
            while not stop.is_set():
                check_followers(self.followers)
                batch = self.consumer.consume(self.batch_size, timeout=0.5)
                if not batch:
                    if idle_timeout_s is not None and time.monotonic() - last_data > idle_timeout_s:
                        break
                    continue
                last_data = time.monotonic()
                self._handle_batch(batch)
        finally:
            self.publisher.close()
            self.consumer.close()

    def _handle_batch(self, batch: list) -> None:
        good = [msg for msg in batch if carries_record(msg)]
        out = 0
        messages = [to_message(msg) for msg in good]
        for emits in apply_stage_batch(self.stage, messages, self.stage_name):
            for emit in emits:
                self.publisher.send(emit.topic, emit.key, emit.record)
                out += 1
        self.publisher.flush()  # raises if undelivered: then nothing is committed
        if good:
            latest: dict[tuple[str, int], int] = {}
            for msg in good:
                latest[(msg.topic(), msg.partition())] = msg.offset() + 1
            offsets = [TopicPartition(t, p, o) for (t, p), o in latest.items()]
            commit_offsets(self.consumer, offsets, "the batch")
        self.consumed += len(good)
        self.emitted += out
        if self.on_batch:
            self.on_batch(len(good), out)
