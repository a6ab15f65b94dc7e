"""Argument groups and helpers shared by the ``worx`` commands (no command imports another)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.config import IngestConfig
    from topology.composition.worx_config import WorxConfig


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka cluster (default: kafka.bootstrap_servers; start one with `worx broker`)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="exit after this many seconds without input (default: run until stopped)",
    )
    parser.add_argument("--batch-size", type=int, default=200, help="messages per commit")


def servers_of(config, args: argparse.Namespace) -> str:
    from topology.composition.worx_config import ConfigError

    servers = args.bootstrap_servers or config.kafka.bootstrap_servers
    if not servers:
        raise ConfigError(
            "no Kafka cluster: pass --bootstrap-servers, or set kafka.bootstrap_servers / "
            "WORX_KAFKA__BOOTSTRAP_SERVERS (e.g. to the address `worx broker` prints)"
        )
    return servers


def add_runtime_argument(parser: argparse.ArgumentParser) -> None:
    """``--runtime``: where route + discover run (`worx up`, `worx demo`)."""
    parser.add_argument(
        "--runtime",
        choices=("plain", "flink"),
        default="plain",
        help="route + discover as plain Kafka loops (default) or as one PyFlink job "
        '(`worx flink run`; needs the Flink venv, README "Flink")',
    )


def add_mapping_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--text-field", help="input field holding the text (default: text)")
    parser.add_argument(
        "--id-field", help="input field holding the id (default: id; '' = content hash)"
    )
    parser.add_argument(
        "--domain-field", help="input field holding a domain label (labelled data only)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        default=None,
        help="dead-letter objects with fields the mapping does not name",
    )


def ingest_config(config: WorxConfig, args: argparse.Namespace) -> IngestConfig:
    """The [ingest] section with the command-line mapping options applied."""
    changes = {
        name: getattr(args, name)
        for name in ("text_field", "id_field", "domain_field", "strict", "text_unit")
        if getattr(args, name, None) is not None
    }
    section = dataclasses.replace(config.ingest, **changes)
    section.validate()
    return section


@contextlib.contextmanager
def destination(
    config: WorxConfig, bootstrap_servers: str | None = None
) -> Iterator[tuple[str, bool]]:
    """Yield (bootstrap servers, embedded?) with every worx topic created there."""
    from topology.composition.embedded_broker import bootstrap
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import ensure_configured_topics

    configured = (
        bootstrap_servers if bootstrap_servers is not None else config.kafka.bootstrap_servers
    )
    with bootstrap(configured) as servers:
        ensure_configured_topics(client_conf(config.kafka, servers), config.kafka)
        yield servers, not configured


def stop_on_sigterm() -> None:
    """Make SIGTERM behave like Ctrl-C, so context managers (the broker) clean up."""

    def _raise(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)
