"""`worx route`: one route worker (plain Kafka), following the domain table."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "route",
        help="run a route worker: worx.docs -> worx.routed (start one per partition)",
        description="Embed every document of <prefix>.docs and assign it to the nearest known "
        "domain when it is close enough, else mark it novel, writing RoutedDoc records to "
        "<prefix>.routed. Workers share the consumer group <prefix>-route, so start as many as "
        "<prefix>.docs has partitions; each follows the whole compacted <prefix>.domains "
        "table, so a new domain takes effect in every worker without a restart. At least "
        "once; runs until Ctrl-C or SIGTERM (or --idle-timeout).",
    )
    add_kafka_arguments(parser)
    parser.set_defaults(func=run)


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
    from topology.config import ConfigError

    servers = args.bootstrap_servers or config.kafka.bootstrap_servers
    if not servers:
        raise ConfigError(
            "no Kafka cluster: pass --bootstrap-servers, or set kafka.bootstrap_servers / "
            "WORX_KAFKA__BOOTSTRAP_SERVERS (e.g. to the address `worx broker` prints)"
        )
    return servers


def run(args: argparse.Namespace) -> int:
    import threading

    from router.route import RouteStage
    from topology.commands.ingest import stop_on_sigterm
    from topology.config import load_config
    from topology.domain_follower import DomainFollower
    from topology.kafka import client_conf
    from topology.runner import StageRunner
    from topology.topics import Topics, ensure_configured_topics

    config = load_config(args.config)
    conf = client_conf(config.kafka, servers_of(config, args))
    prefix = config.kafka.topic_prefix
    ensure_configured_topics(conf, config.kafka)
    topics = Topics(prefix)
    stage = RouteStage(config.router)
    follower = DomainFollower(conf, topics.domains, stage.table.apply).start()
    runner = StageRunner(
        stage,
        conf,
        topics,
        [topics.docs],
        group_id=f"{prefix}-route",
        stage_name="route",
        batch_size=args.batch_size,
        session_timeout_ms=config.kafka.session_timeout_ms,
    )
    log.info(
        "route worker: %s -> %s, embedder %s",
        topics.docs,
        topics.routed,
        stage.embedder.fingerprint,
    )
    stop_on_sigterm()
    stop = threading.Event()
    try:
        runner.run(stop, idle_timeout_s=args.idle_timeout)
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
    log.info("route worker done: %d routed, %d novel", stage.routed, stage.novel)
    return 0
