"""Where a read-only command gets the domain table: a finished run, a file, or the topic.

``--run DIR`` (the run's ``domains.json``), ``--domains FILE`` (any such file, e.g. a
monitor's ``<state>/domains.json``), else the live ``<prefix>.domains`` topic of
``--bootstrap-servers`` / ``kafka.bootstrap_servers``, read from the beginning until
nothing new arrives for ``--wait`` seconds (the embedded broker cannot report end
offsets reliably). Shared by ``worx domains``, ``worx explain`` and ``worx route --explain``.
"""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topology.composition.worx_config import WorxConfig


def add_arguments(parser: argparse.ArgumentParser, servers: bool = True) -> None:
    """--run, --domains, --wait, and --bootstrap-servers unless the parser has its own."""
    source = parser.add_argument_group("domain table (one of)")
    source.add_argument(
        "--run", metavar="DIR", help="a finished run (worx demo's run directory, up's data_dir)"
    )
    source.add_argument(
        "--domains", metavar="FILE", help="a domains.json file (the topic's rows as a list)"
    )
    if servers:
        source.add_argument(
            "--bootstrap-servers", help="Kafka cluster (default: kafka.bootstrap_servers)"
        )
    source.add_argument(
        "--wait",
        type=float,
        default=3.0,
        help="topic only: stop reading after this many quiet seconds (default 3)",
    )


def domain_table(
    args: argparse.Namespace, config: WorxConfig, dim: int | None = None
) -> tuple[Any, str]:
    """The :class:`router.table.DomainTable` the arguments name, and where it came from.

    Raises:
        RunError: a missing run or file, a corrupt table, or --run with --bootstrap-servers.
    """
    from topology.composition.run_dir import RunError, load_domains, open_run

    if getattr(args, "run", None) and args.bootstrap_servers:
        raise RunError(
            "--run reads a finished run's files; --bootstrap-servers follows a live cluster",
            "pass one of them",
        )
    if getattr(args, "domains", None):
        from router.table_file import TableFileError, load_table

        try:
            return load_table(args.domains, dim), args.domains
        except TableFileError as exc:
            raise RunError(str(exc), "pass the domains.json of a run (or --run DIR)") from None
    if getattr(args, "run", None):
        run = open_run(args.run)
        return load_domains(run, dim), str(run.domains_file)
    return follow_topic(config, args.bootstrap_servers, getattr(args, "wait", 3.0), dim)


def follow_topic(
    config: WorxConfig, servers: str | None, wait_s: float, dim: int | None = None
) -> tuple[Any, str]:
    """The topic's table, read until ``wait_s`` quiet seconds (no dead letters written)."""
    from router.table import DomainTable
    from topology.composition.kafka_clients import client_conf, require_reachable
    from topology.composition.run_dir import RunError
    from topology.composition.topics import Topics
    from topology.runtimes.table_follower import TableFollower

    servers = servers or config.kafka.bootstrap_servers
    if not servers:
        raise RunError(
            "no domain table to read",
            "pass --run DIR (a finished run), --domains FILE, or --bootstrap-servers HOST:PORT "
            "(or set kafka.bootstrap_servers)",
        )
    conf = client_conf(config.kafka, servers)
    require_reachable(conf, config.kafka.connect_timeout_s)  # one line, not librdkafka's flood
    table = DomainTable(dim=dim)
    arrived = threading.Event()

    def apply(row: Any) -> None:
        table.apply(row)
        arrived.set()

    topic = Topics(config.kafka.topic_prefix).domains
    # a listing writes nothing: the stages dead-letter the rows they refuse
    follower = TableFollower(conf, topic, apply, dead_letters=False).start()
    try:
        while arrived.wait(wait_s):
            arrived.clear()
    finally:
        follower.stop()
    return table, topic
