"""A job's documents read while the broker stops answering: a broker error, which stops
the trainer until it is restarted, never ``missing_offsets``, which fails the job for good.

Found by bench/chaos.py (docs/chaos.md): the broker SIGSTOPped while the trainer read a
new domain's job; after 15 s without a message the range reader called the offsets
missing, the job ended ``failed`` and python_code never got an expert.
"""

from __future__ import annotations

import dataclasses
import signal

import pytest
from confluent_kafka import Consumer, KafkaException

from tests.support.kafka import produce_docs
from tests.support.trainer import make_job
from topology.composition.embedded_broker import EmbeddedBroker
from topology.composition.topics import Topics, ensure_topics
from topology.runtimes import range_reader

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_a_broker_that_stops_answering_mid_fetch_is_a_broker_error(monkeypatch):
    with EmbeddedBroker() as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        ensure_topics(conf, prefix="worx", partitions=2)
        docs = Topics("worx").docs
        placed = produce_docs(conf, docs, [f"text {i}" for i in range(3)], "d")
        job = make_job(docs, placed, "job-paused", heldout=1)
        # the job's range runs on past what is written yet: the reader waits for the rest
        ref = {**job.refs[0], "end": placed[-1]["offset"] + 4}
        job = dataclasses.replace(job, refs=[ref])

        class PausesTheBroker(Consumer):
            """The reader's consumer; the broker stops as the first document arrives."""

            def poll(self, *args, **kwargs):
                msg = super().poll(*args, **kwargs)
                if msg is not None and not msg.error():
                    broker.process.send_signal(signal.SIGSTOP)
                return msg

        monkeypatch.setattr(range_reader, "Consumer", PausesTheBroker)
        try:
            with pytest.raises(KafkaException):
                range_reader.fetch_job_docs(conf, job, timeout_s=2.0)
        finally:
            broker.process.send_signal(signal.SIGCONT)
        monkeypatch.undo()

        more = produce_docs(conf, docs, [f"text {i}" for i in range(3, 6)], "e")
        assert more[-1]["offset"] + 1 == ref["end"]
        fetched = range_reader.fetch_job_docs(conf, job, timeout_s=5.0)
        assert fetched.train == ["text 0", "text 1"] and fetched.heldout == ["text 2"]
