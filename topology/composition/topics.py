"""Every topic of the loop, declared once, and their explicit, idempotent creation.

The embedded broker creates a topic on a metadata lookup of an unknown name, so topics
are created up front, with their partitions and cleanup policy, before any client runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

if TYPE_CHECKING:
    from topology.composition.worx_config import KafkaConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    suffix: str  # full name is "<prefix>.<suffix>"
    partitioned: bool  # True: kafka.partitions partitions; False: one (global order)
    compacted: bool  # cleanup.policy=compact (latest value per key is the state)
    purpose: str


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("docs", True, False, "normalised Doc records from ingest"),
    TopicSpec("dlq", False, False, "DeadLetter records: rejected input with the reason"),
    TopicSpec("routed", True, False, "RoutedDoc records: domain assignment or novel"),
    TopicSpec("domains", False, True, "Domain table, keyed by domain_id"),
    TopicSpec("drift", False, False, "DriftEvent records"),
    TopicSpec("train", False, False, "TrainJob records, keyed by job_id"),
    TopicSpec("train.status", False, False, "training progress and outcomes, keyed by job_id"),
    TopicSpec("experts", False, True, "expert registrations, keyed by expert_id"),
    TopicSpec("metrics", False, False, "evaluation rows and forgetting metrics"),
)


class Topics:
    """Resolved topic names for one prefix: ``Topics("acme").docs == "acme.docs"``."""

    def __init__(self, prefix: str = "worx") -> None:
        self.prefix = prefix
        # resolved once: the stage runner asks for a name per emitted record
        self._names = {spec.suffix: f"{prefix}.{spec.suffix}" for spec in TOPICS}

    def name(self, suffix: str) -> str:
        try:
            return self._names[suffix]
        except KeyError:
            raise KeyError(
                f"no topic {suffix!r} is declared in topology.composition.topics.TOPICS"
            ) from None

    @property
    def docs(self) -> str:
        return self.name("docs")

    @property
    def dlq(self) -> str:
        return self.name("dlq")

    @property
    def routed(self) -> str:
        return self.name("routed")

    @property
    def domains(self) -> str:
        return self.name("domains")

    @property
    def drift(self) -> str:
        return self.name("drift")

    @property
    def train(self) -> str:
        return self.name("train")

    @property
    def train_status(self) -> str:
        return self.name("train.status")

    @property
    def experts(self) -> str:
        return self.name("experts")

    @property
    def metrics(self) -> str:
        return self.name("metrics")

    def all(self) -> list[str]:
        return [self.name(spec.suffix) for spec in TOPICS]


def _partitions_of(spec: TopicSpec, partitions: int, train_partitions: int) -> int:
    if spec.suffix == "train":
        return train_partitions
    return partitions if spec.partitioned else 1


def ensure_configured_topics(admin_conf: dict[str, str], kafka: KafkaConfig) -> list[str]:
    """:func:`ensure_topics` with the ``[kafka]`` section's prefix, partitions and
    replication factor (every command that creates topics goes through here), once the
    cluster answers (else :class:`topology.composition.kafka_clients.ClusterUnreachable`,
    one line)."""
    from topology.composition.kafka_clients import require_reachable

    require_reachable(admin_conf, kafka.connect_timeout_s)
    return ensure_topics(
        admin_conf,
        prefix=kafka.topic_prefix,
        partitions=kafka.partitions,
        replication_factor=kafka.replication_factor,
        train_partitions=kafka.train_partitions,
    )


def ensure_topics(
    admin_conf: dict[str, str],
    prefix: str = "worx",
    partitions: int = 4,
    replication_factor: int = 1,
    extra: dict[str, int] | None = None,
    timeout_s: float = 15.0,
    train_partitions: int = 1,
) -> list[str]:
    """Create every declared topic (and ``extra`` name -> partitions) if missing.

    ``train_partitions``: partitions of ``<prefix>.train`` (one per parallel trainer).

    Returns the names that were created now; existing topics are left as they are.
    """
    admin = AdminClient(admin_conf)
    wanted = [
        NewTopic(
            f"{prefix}.{spec.suffix}",
            num_partitions=_partitions_of(spec, partitions, train_partitions),
            replication_factor=replication_factor,
            config={"cleanup.policy": "compact" if spec.compacted else "delete"},
        )
        for spec in TOPICS
    ]
    for name, count in (extra or {}).items():
        wanted.append(NewTopic(name, num_partitions=count, replication_factor=replication_factor))
    created = []
    for name, future in admin.create_topics(wanted, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    if created:
        log.info("created topics %s", created)
    return created
