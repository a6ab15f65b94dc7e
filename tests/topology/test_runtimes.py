"""The publisher and the table follower: the one publish step and the one table policy."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException

from router.records import DomainRecord
from topology.composition.kafka_clients import make_producer
from topology.composition.topics import Topics
from topology.runtimes.publisher import Publisher
from topology.runtimes.table_follower import TableFollower

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 1000}


def _row(domain_id: str) -> DomainRecord:
    return DomainRecord(domain_id, [1.0, 0.0], threshold=0.5, size=10, cohesion=0.8)


def test_a_flush_that_cannot_deliver_raises_instead_of_returning():
    producer = make_producer(NOWHERE)
    sink = Publisher(producer, Topics("t"), flush_timeout_s=0.5)
    try:
        sink.send("docs", "k", _row("a"))
        with pytest.raises(KafkaException, match="not delivered|deliveries failed"):
            sink.flush()
    finally:  # left open, it retries 127.0.0.1:9 and logs for the rest of the session
        producer.purge()
        producer.close()


def test_one_policy_for_rows_tombstones_and_undecodable_records():
    applied, tombstones, bad = [], [], []
    follower = TableFollower(
        NOWHERE,
        "t.domains",
        applied.append,
        on_tombstone=tombstones.append,
        on_bad=lambda key, value, exc: bad.append((key, type(exc).__name__)),
    )
    quiet = TableFollower(NOWHERE, "t.domains", applied.append)  # defaults: skip and log
    try:
        follower.handle(b"a", _row("a").to_json())
        follower.handle(b"a", None)
        follower.handle(b"junk", b"{not json")
        assert [r.domain_id for r in applied] == ["a"] and follower.applied == 1
        assert tombstones == [b"a"]
        assert bad and bad[0][0] == b"junk"
        quiet.handle(b"a", None)
        quiet.handle(b"junk", b"{not json")
        assert quiet.applied == 0 and len(applied) == 1
    finally:  # their clients would retry 127.0.0.1:9, logging, for the rest of the session
        follower.stop()
        quiet.stop()
