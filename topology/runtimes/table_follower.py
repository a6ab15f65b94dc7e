"""Follow a compacted table topic (``worx.domains``, ``worx.experts``) from a thread.

Every reader of a table reads the *whole* table, not a share of it, so a follower does
not join a consumer group: it assigns every partition of the topic from the beginning and
never commits; the topic (plus, for experts, the store) *is* the table, so a restarted
process rebuilds it the same way. It never asks for end offsets (the embedded broker
answers them wrongly): a caller waits for a version instead (``DomainTable.wait_for``).

One policy for every table:

* a record is decoded as ``record_type`` and handed to ``apply``;
* a tombstone (null value) goes to ``on_tombstone(key)``; one that returns False (a key
  the table does not know), and every tombstone of a table without ``on_tombstone``
  (domain rows are retired by status, never deleted), is dead-lettered ``unknown_key``;
* an undecodable record, one ``apply`` refuses (it raises; the table is unchanged), or
  one whose handling fails in any other way goes to ``on_bad(key, value, error)`` (if
  given) and to the dead-letter topic (``<prefix>.dlq``, with the reason and the source
  topic/partition/offset), and is skipped: no event can stop the follower;
* a transient consumer error is logged and the follower goes on (librdkafka retries);
* a *fatal* consumer error stops the follower: the client cannot go on, so logging it
  forever would only hide it. It is logged, kept in :attr:`TableFollower.error`,
  :meth:`TableFollower.healthy` turns False and ``on_death`` is called: a process that
  depends on the table exits non-zero (see
  :func:`topology.runtimes.stage_runner.check_followers`), so its supervisor restarts it
  rather than letting it serve from a table that no longer follows the topic.

Every follower reads the whole table from the start, so each one dead-letters a bad row
it meets (a row refused by several followers is on the dead-letter topic several times,
with the same source coordinates).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from ingest.dead_letters import dead_letter
from router.records import DomainRecord
from router.table import DomainTable
from topology.composition.kafka_clients import produce
from worx.errors import UserError
from worx.records import Record, RecordError
from worx.stage import Message

log = logging.getLogger(__name__)


class TopicMissing(UserError, RuntimeError):
    """The followed topic does not exist on the cluster."""


class TableFollower:
    """Apply every record of the compacted ``topic`` to ``apply`` on a background thread.

    Parameters
    ----------
    conf : librdkafka settings (``bootstrap.servers`` and any security settings).
    topic : the table topic.
    apply : called with each decoded record (e.g. ``DomainTable.apply``); raises to refuse.
    record_type : the records of the topic (default: :class:`DomainRecord`).
    on_tombstone : called with the key of each tombstone; returns False for an unknown key.
    on_bad : called with ``(key, value, error)`` for a record that cannot be applied.
    dlq_topic : where refused events go (default: ``<prefix>.dlq`` of ``topic``'s prefix).
    dead_letters : False: refused events are only logged (read-only tools).
    on_death : called (from the follower's thread) when the follower stopped by itself.
    name : the stage named in dead letters.
    lookup : the row the table holds for a record's key (default: for a ``DomainTable``).
    """

    def __init__(
        self,
        conf: dict,
        topic: str,
        apply: Callable[[Any], object],
        record_type: type[Record] = DomainRecord,
        on_tombstone: Callable[[bytes | None], object] | None = None,
        on_bad: Callable[[bytes | None, bytes, Exception], object] | None = None,
        dlq_topic: str | None = None,
        dead_letters: bool = True,
        on_death: Callable[[], object] | None = None,
        name: str | None = None,
        lookup: Callable[[Any], Any] | None = None,
    ) -> None:
        self.topic = topic
        self.apply = apply
        self.record_type = record_type
        self.on_tombstone = on_tombstone
        self.on_bad = on_bad
        self.on_death = on_death
        # the row the table holds for a record's key, to tell a conflicting duplicate (a
        # refused row of the same version) from a replay; known for a DomainTable's apply
        self.lookup = lookup
        table = getattr(apply, "__self__", None)
        if lookup is None and isinstance(table, DomainTable):
            self.lookup = lambda row: table.get(row.domain_id)
        self.name = name or f"follow-{topic}"
        self.dlq_topic = dlq_topic or f"{topic.rsplit('.', 1)[0]}.dlq"
        self.applied = 0  # records applied
        self.seen = 0  # events read (records, tombstones, bad ones)
        self.dead_lettered = 0  # events sent to the dead-letter topic
        self.error: BaseException | KafkaError | None = None  # what stopped the follower
        # the event being handled: ``apply`` may read it (it runs on the follower's thread)
        self.current = Message(None, topic=topic)
        self._stop = threading.Event()
        settings = {
            **conf,
            "group.id": f"worx-table-follower-{uuid.uuid4().hex[:12]}",  # never commits
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        self._consumer = Consumer(settings)
        self.dead_letters = dead_letters
        self._producer_conf = {**conf, "linger.ms": 5, "enable.idempotence": False}
        self._producer: Producer | None = None  # made at the first dead letter
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def healthy(self) -> bool:
        """True while the follower runs, or after it was stopped on purpose."""
        return self.error is None and (self.alive or self._stop.is_set())

    def describe(self) -> str:
        """One line for /health and logs: running, or what stopped the follower."""
        if self.error is not None:
            return f"{self.name} stopped: {self.error}"
        return f"{self.name} {'running' if self.alive else 'not running'}"

    def start(self) -> TableFollower:
        """Assign every partition of the topic from the beginning and start the thread.

        Raises:
            TopicMissing: the topic does not exist (create the topics first).
        """
        metadata = self._consumer.list_topics(self.topic, timeout=15)
        info = metadata.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            raise TopicMissing(
                f"topic {self.topic} does not exist",
                "create the topics first (any stage does, or `worx broker`), or set "
                "kafka.topic_prefix (WORX_KAFKA__TOPIC_PREFIX) to the deployment's prefix",
            )
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(info.partitions)]
        )
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        elif self._thread.ident is None:  # never started: its thread would have closed these
            self._consumer.close()
            if self._producer is not None:
                self._producer.flush(10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self._consumer.poll(0.2)
                if msg is None:
                    if self._producer is not None:
                        self._producer.poll(0)
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if error.fatal():
                        raise KafkaException(error)
                    log.warning("%s follower: %s", self.topic, error)
                    continue
                self.seen += 1
                self.current = Message(
                    msg.value(), msg.key(), msg.topic(), msg.partition(), msg.offset()
                )
                self.handle(msg.key(), msg.value())
        except BaseException as exc:  # noqa: BLE001 - reported, never silent (see healthy)
            log.exception("%s follower stopped", self.topic)
            self.error = exc
            if self.on_death is not None:
                self.on_death()
        finally:
            self._consumer.close()
            if self._producer is not None:
                left = self._producer.flush(10)
                if left:
                    log.error("%s follower: %d dead letters not delivered", self.topic, left)

    def handle(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one event of the topic by the policy of the module docstring."""
        try:
            if value is None:
                known = self.on_tombstone(key) if self.on_tombstone is not None else False
                if known is False:
                    who = key.decode("utf-8", "replace")[:200] if key else "(no key)"
                    raise RecordError(
                        f"tombstone for {who!r}, a key this table does not hold",
                        reason="unknown_key",
                    )
                return
            row = self.record_type.from_json(value, strict=False)
            held = self.lookup(row) if self.lookup is not None else None
            if self.apply(row) is False and is_conflict(held, row):
                raise RecordError(
                    f"a second, different row for {key!r} at version {row.version}: the "
                    "table keeps the first (a writer must raise the version)",
                    reason="conflicting_duplicate",
                )
        except Exception as exc:  # noqa: BLE001 - one event never stops the table
            self._refused(key, value, exc)
            return
        self.applied += 1

    def _refused(self, key: bytes | None, value: bytes | None, exc: Exception) -> None:
        if self.on_bad is not None and value is not None:
            try:
                self.on_bad(key, value, exc)
            except Exception:  # noqa: BLE001 - the dead letter below still goes out
                log.exception("%s follower: on_bad failed", self.topic)
        reason = exc.reason if isinstance(exc, RecordError) else "table_refused"
        if not isinstance(exc, ValueError):
            reason = "stage_error"
        detail = f"{type(exc).__name__}: {exc}"
        message = self.current
        log.warning(
            "%s follower: refused [%d]@%d (%s): %s",
            self.topic,
            message.partition,
            message.offset,
            reason,
            detail[:300],
        )
        if not self.dead_letters:
            return
        if self._producer is None:
            self._producer = Producer(self._producer_conf)
        letter = dead_letter(message, reason, detail, self.name)
        produce(self._producer, self.dlq_topic, letter.to_json(), None, self._delivered)
        self.dead_lettered += 1

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            log.error("%s follower: a dead letter was not delivered: %s", self.topic, err)


def is_conflict(held: Any, row: Any) -> bool:
    """True if ``row`` differs from the ``held`` row of its key at the same version."""
    return held is not None and held.version == row.version and held != row
