"""The Faust runtime of the stream: one app, one agent per stage (``topology/faust/agents``).

Settings chosen for the embedded broker (Tansu) and kept valid for Apache Kafka:

- at-least-once (``processing_guarantee``), never exactly-once: Tansu accepts
  transactions without isolating them and refuses aiokafka's idempotent producer;
- ``broker_session_timeout`` 10 s by default (``kafka.session_timeout_ms``): a group
  join takes about half of it on Tansu;
- no tables and no table recovery (Tansu's end offsets are wrong), in-memory store;
- ``topic_allow_declare`` off and ``topic_disable_leader`` on: topics are created up
  front by :func:`topology.composition.topics.ensure_topics`, Faust creates none of its own;
- no web server (``web_enabled`` off): the monitor serves metrics.

Stage objects live outside ``topology`` and know nothing of Faust; each agent module
wires one (see :mod:`topology.faust.agents` for the ``register`` contract).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faust

from topology.composition.topics import Topics
from topology.composition.worx_config import WorxConfig
from topology.faust.agents import load

log = logging.getLogger(__name__)


def create_app(config: WorxConfig, bootstrap_servers: str, agents: Sequence[str]) -> faust.App:
    """A Faust app on ``bootstrap_servers`` running the named ``agents``.

    Raises:
        AgentNotConfigured: an agent name is unknown, or its stage lacks configuration.
    """
    kafka = config.kafka
    datadir = Path(config.data_dir) / "faust"
    datadir.mkdir(parents=True, exist_ok=True)
    servers = ";".join(f"kafka://{s.strip()}" for s in bootstrap_servers.split(",") if s.strip())
    app = faust.App(
        f"{kafka.topic_prefix}-stream",
        broker=servers,
        broker_credentials=_credentials(kafka.client),
        processing_guarantee="at_least_once",
        broker_session_timeout=kafka.session_timeout_ms / 1000,
        broker_heartbeat_interval=max(0.5, kafka.session_timeout_ms / 5000),
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        topic_allow_declare=False,
        topic_disable_leader=True,
        topic_replication_factor=kafka.replication_factor,
        topic_partitions=kafka.partitions,
        store="memory://",
        table_standby_replicas=0,
        web_enabled=False,
        autodiscover=False,
        datadir=str(datadir),
    )
    topics = Topics(kafka.topic_prefix)
    for name in agents:
        load(name)(app, config, topics)
        log.info("faust agent %s registered", name)
    return app


def _credentials(client: dict[str, str]) -> Any:
    """Map the librdkafka SASL/TLS settings Faust (aiokafka) understands; None if plaintext."""
    protocol = client.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        import ssl

        ssl_context = ssl.create_default_context(cafile=client.get("ssl.ca.location"))
        if client.get("ssl.certificate.location"):
            ssl_context.load_cert_chain(
                client["ssl.certificate.location"],
                client.get("ssl.key.location"),
                password=client.get("ssl.key.password"),  # an encrypted private key
            )
    if protocol == "SSL":
        return faust.SSLCredentials(ssl_context)
    return faust.SASLCredentials(
        username=client.get("sasl.username"),
        password=client.get("sasl.password"),
        mechanism=client.get("sasl.mechanism", "PLAIN"),
        ssl_context=ssl_context,
    )
