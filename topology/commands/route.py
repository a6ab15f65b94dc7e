"""`worx route`: one route worker (plain Kafka), following the domain table."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands._shared import add_kafka_arguments

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
    parser.add_argument(
        "--explain",
        metavar="TEXT|-|FILE",
        help="run no worker: say which domain and experts this text gets and why (as `worx "
        "explain`), e.g. on a finished run with --run DIR",
    )
    from topology.commands import _explain_text

    _explain_text.add_arguments(parser, servers=False)  # --bootstrap-servers is the worker's
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.explain is not None:
        from topology.commands import _explain_text

        return _explain_text.run(args, args.explain)
    return run_worker(args)


def run_worker(args: argparse.Namespace) -> int:
    import threading

    from router.route import RouteStage
    from topology.commands._shared import servers_of, stop_on_sigterm
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import Topics, ensure_configured_topics
    from topology.composition.worx_config import load_config
    from topology.runtimes.stage_runner import StageRunner
    from topology.runtimes.table_follower import TableFollower

    config = load_config(args.config)
    conf = client_conf(config.kafka, servers_of(config, args))
    prefix = config.kafka.topic_prefix
    ensure_configured_topics(conf, config.kafka)
    topics = Topics(prefix)
    stage = RouteStage(config.router)
    follower = TableFollower(conf, topics.domains, stage.table.apply).start()
    runner = StageRunner(
        stage,
        conf,
        topics,
        [topics.docs],
        group_id=f"{prefix}-route",
        stage_name="route",
        batch_size=args.batch_size,
        session_timeout_ms=config.kafka.session_timeout_ms,
        followers=[follower],  # a dead table follower ends the worker (non-zero exit)
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
