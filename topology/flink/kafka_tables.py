"""The Kafka topics of the Flink job as Flink SQL tables (the Kafka connector's table form).

The table form is used, not the DataStream ``KafkaSource``/``KafkaSink`` builders, because
PyFlink's builders hand a Python function only the value: the route stage needs each
document's partition, offset and timestamp (a training job names its documents by them),
and every output needs its key (the idempotent key the other runtimes use). The table
form reads the key and the value as raw bytes with the metadata as columns, and writes
key, value and the topic of each row.

Sources are unbounded (a bounded source stops early on the embedded broker, whose
end-offset answer is wrong). ``worx.docs`` starts from the group's committed offsets
(earliest without any); the table topics are read from the beginning. A restored job
starts from its checkpoint's offsets instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from topology.composition.topics import Topics

SOURCE_COLUMNS = """
  `k` BYTES,
  `v` BYTES,
  `partition` INT METADATA VIRTUAL,
  `offset` BIGINT METADATA VIRTUAL,
  `ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL
"""

# librdkafka-only settings with no Java client equivalent (dropped, not passed through)
LIBRDKAFKA_ONLY = {"enable.idempotence", "linger.ms", "log_level", "socket.keepalive.enable"}


def _options(options: dict[str, str]) -> str:
    return ",\n".join(f"  '{key}' = '{_quote(value)}'" for key, value in options.items())


def _quote(value: str) -> str:
    return str(value).replace("'", "''")


def client_properties(bootstrap_servers: str, client: dict[str, str]) -> dict[str, str]:
    """``properties.*`` options of a table: the bootstrap servers and the ``[kafka.client]``
    settings (SASL, TLS: the Java client's names are the same for the common ones)."""
    props = {"properties.bootstrap.servers": bootstrap_servers}
    for key, value in client.items():
        if key not in LIBRDKAFKA_ONLY and key != "bootstrap.servers":
            props[f"properties.{key}"] = value
    return props


def source_ddl(
    name: str, topic: str, properties: dict[str, str], group_id: str, from_group: bool
) -> str:
    """``CREATE TABLE name`` reading ``topic`` (key, value, partition, offset, timestamp)."""
    options = {
        "connector": "kafka",
        "topic": topic,
        **properties,
        "properties.group.id": group_id,
        "scan.startup.mode": "group-offsets" if from_group else "earliest-offset",
        "properties.auto.offset.reset": "earliest",
        "key.format": "raw",
        "key.fields": "k",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
    }
    return f"CREATE TABLE `{name}` ({SOURCE_COLUMNS}) WITH (\n{_options(options)}\n)"


def sink_ddl(name: str, topics: Iterable[str], properties: dict[str, str]) -> str:
    """``CREATE TABLE name`` writing rows ``(k, v, topic)`` at least once (flushed at each
    checkpoint), each to the topic its ``topic`` column names (one of ``topics``)."""
    options = {
        "connector": "kafka",
        "topic": ";".join(topics),
        **properties,
        "key.format": "raw",
        "key.fields": "k",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
        "sink.delivery-guarantee": "at-least-once",
        "sink.partitioner": "default",  # by key, as the other runtimes' producers
    }
    columns = "`k` BYTES, `v` BYTES, `topic` STRING METADATA"
    return f"CREATE TABLE `{name}` ({columns}) WITH (\n{_options(options)}\n)"


def output_topics(topics: Topics) -> list[str]:
    """Every topic the job writes."""
    return [topics.routed, topics.domains, topics.drift, topics.train, topics.dlq]
