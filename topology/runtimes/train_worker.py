"""The trainer's runtime: ``worx.train`` one job at a time, committed after its outcome.

The job itself (fetch, train, store, records in order) is :class:`trainer.worker.JobRunner`,
handed a :class:`~topology.runtimes.publisher.Publisher` and the range reader of
:mod:`topology.runtimes.range_reader`. This loop consumes one message, lets the runner
take the job to its end, and only then stores and commits the message's offset: a worker
killed mid-job gets the job again (the runner resumes it from its checkpoint). A job
interrupted by ``stop`` is not committed either. Broker errors stop the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from experts.store import ExpertStore
from experts.trunk import Trunk
from ingest.dead_letters import dead_letter
from router.records import TrainJob
from topology.composition.kafka_clients import (
    carries_record,
    commit_offsets,
    make_consumer,
    make_producer,
    to_message,
)
from topology.composition.topics import Topics
from topology.runtimes.publisher import Publisher
from topology.runtimes.range_reader import fetch_job_docs
from trainer.config import TrainerConfig
from trainer.worker import JobRunner
from worx.records import RecordError
from worx.stage import Message

log = logging.getLogger(__name__)


class TrainWorker:
    """Run training jobs from ``topics.train``; experts go to ``store``, events to Kafka.

    Parameters
    ----------
    conf : librdkafka settings (bootstrap servers and any client settings).
    topics : the resolved topic names.
    trunk : the frozen trunk every expert is trained on.
    store : the expert store (opened with ``trunk.fingerprint``).
    config : the ``[trainer]`` section.
    jobs_dir : job checkpoints and outcomes (``<jobs_dir>/<job_id>/``).
    session_timeout_ms : consumer group session timeout.
    embed_dim : the router's embedding dimension, if known: a job's centroid must have it.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        topics: Topics,
        trunk: Trunk,
        store: ExpertStore,
        config: TrainerConfig,
        jobs_dir: Path,
        session_timeout_ms: int = 10_000,
        embed_dim: int | None = None,
    ) -> None:
        self.conf = conf
        self.embed_dim = embed_dim
        self.topics = topics
        self.config = config
        self.session_timeout_ms = session_timeout_ms
        self.publisher = Publisher(make_producer(conf), topics)
        self.jobs = JobRunner(
            trunk,
            store,
            config,
            jobs_dir,
            self.publisher,
            lambda job: fetch_job_docs(conf, job, timeout_s=config.fetch_timeout_s),
            broker_errors=(KafkaException,),
        )

    @property
    def outcomes(self) -> list[tuple[str, str]]:
        """(job_id, state) of every job this process handled."""
        return self.jobs.outcomes

    def handle(self, job: TrainJob, stop: threading.Event | None = None) -> str:
        """Run one job to its end (no offsets involved); returns the state reached."""
        return self.jobs.handle(job, stop)

    def handle_message(self, message: Message, stop: threading.Event) -> str:
        """Decode and check one ``worx.train`` message, then run its job; a message that is
        not a valid job of this deployment is dead-lettered (``"dead_letter"``) and the
        worker goes on to the next."""
        try:
            job = TrainJob.from_json(message.value or b"", strict=False)
            job.check_docs_topic(self.topics.docs)  # a job reads only this deployment's docs
            if self.embed_dim is not None:
                job.check_dim(self.embed_dim)
        except RecordError as exc:
            self.publisher.send("dlq", None, dead_letter(message, exc.reason, str(exc), "trainer"))
            self.publisher.flush()
            return "dead_letter"
        return self.jobs.handle(job, stop)

    def run(
        self,
        stop: threading.Event | None = None,
        idle_timeout_s: float | None = None,
        max_jobs: int | None = None,
    ) -> None:
        """Handle jobs until ``stop`` is set, idle for ``idle_timeout_s``, or ``max_jobs``."""
        stop = stop or threading.Event()
        consumer = make_consumer(
            self.conf,
            self.config.group_id,
            self.session_timeout_ms,
            **{
                "max.poll.interval.ms": self.config.max_poll_interval_ms,
                "enable.auto.commit": False,
            },
        )
        consumer.subscribe(
            [self.topics.train],
            on_assign=_log_partitions("assigned"),
            on_revoke=_log_partitions("revoked"),
        )
        last = time.monotonic()
        handled = 0
        try:
            while not stop.is_set() and (max_jobs is None or handled < max_jobs):
                msg = consumer.poll(0.5)
                if msg is None:
                    if idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                        break
                    continue
                if not carries_record(msg):
                    continue
                state = self.handle_message(to_message(msg), stop)
                if state == "interrupted":
                    log.info("stopped during a job; it resumes from its checkpoint on restart")
                    break
                offsets = [TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)]
                commit_offsets(consumer, offsets, "the job (skipped then: it ended)")
                handled += 1
                last = time.monotonic()
        finally:
            self.publisher.close()
            consumer.close()


def _log_partitions(what: str):
    """A rebalance callback that says which ``worx.train`` partitions this worker now owns
    (several trainers in one group split the partitions; see docs/deployment.md)."""

    def log_them(consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("%s partitions %s", what, sorted(p.partition for p in partitions))

    return log_them
