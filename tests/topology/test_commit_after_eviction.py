"""A runner whose commit fails after its outputs were flushed (the group evicted it while
the broker did not answer, or a rebalance took the partition) goes on: the work is
replayed, at least once, and its keyed effects make that safe.

Found by bench/chaos.py (docs/chaos.md): the broker SIGSTOPped for 59 s; the trainer's
commit of a finished job then raised UNKNOWN_MEMBER_ID and the trainer died with "this is
a bug" (route's StageRunner had logged the same error and gone on).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from topology.composition.kafka_clients import commit_offsets
from topology.composition.topics import Topics
from topology.runtimes import train_worker
from topology.runtimes.train_worker import TrainWorker

EVICTED = KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "Commit failed: Unknown member"))


class Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self):
        return None

    def value(self) -> bytes:
        return b"{}"

    def key(self) -> bytes:
        return b"job"

    def topic(self) -> str:
        return "worx.train"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


class EvictedConsumer:
    """Hands out two jobs, then nothing; every commit fails as after an eviction."""

    def __init__(self) -> None:
        self.queue = [Msg(0), Msg(1)]
        self.commits = 0
        self.closed = False

    def subscribe(self, topics, on_assign=None, on_revoke=None) -> None:
        pass

    def poll(self, timeout: float):
        return self.queue.pop(0) if self.queue else None

    def store_offsets(self, offsets) -> None:
        pass

    def commit(self, offsets, asynchronous: bool) -> None:
        self.commits += 1
        raise EVICTED

    def close(self) -> None:
        self.closed = True


def test_commit_offsets_reports_a_failed_commit_instead_of_raising(caplog):
    consumer = EvictedConsumer()
    assert not commit_offsets(consumer, [TopicPartition("worx.train", 0, 1)], "the job")
    assert "UNKNOWN_MEMBER_ID" in caplog.text and "the job may be replayed" in caplog.text


def test_the_trainer_goes_on_to_the_next_job_when_a_commit_fails(monkeypatch):
    consumer = EvictedConsumer()
    monkeypatch.setattr(train_worker, "make_consumer", lambda *args, **kwargs: consumer)
    worker = TrainWorker.__new__(TrainWorker)  # only the consuming loop: no trunk, no store
    worker.conf, worker.topics, worker.session_timeout_ms = {}, Topics("worx"), 10_000
    worker.config = SimpleNamespace(group_id="worx-trainer", max_poll_interval_ms=600_000)
    worker.publisher = SimpleNamespace(close=lambda: None)
    handled: list[int] = []
    worker.handle_message = lambda message, stop: handled.append(message.offset) or "finished"

    worker.run(threading.Event(), max_jobs=2)

    assert handled == [0, 1] and consumer.commits == 2 and consumer.closed
