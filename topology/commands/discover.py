"""`worx discover`: the discover stage (one instance), with crash-safe snapshots.

The runtime is :class:`topology.runtimes.discover_runner.DiscoverRunner` (snapshot plus outbox:
state, offsets and outputs are saved before any output leaves; see its module).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands._shared import add_kafka_arguments

    parser = subparsers.add_parser(
        "discover",
        help="run the discover stage: worx.routed -> new domains, drift events, train jobs",
        description="Read every routing decision on <prefix>.routed (one instance reads all "
        "partitions), cluster the novel documents online, promote new domains to "
        "<prefix>.domains, report drift on <prefix>.drift and issue training jobs on "
        "<prefix>.train. State is snapshotted with its input offsets to --snapshot (JSON) "
        "before any output leaves, so a restart after a crash resumes with nothing lost "
        "and no job issued twice. Runs until Ctrl-C or SIGTERM (or --idle-timeout).",
    )
    add_kafka_arguments(parser)
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=None,
        help="state file (default: <data_dir>/discover/state.json)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from router.discover import DiscoverStage
    from topology.commands._shared import servers_of, stop_on_sigterm
    from topology.composition.kafka_clients import client_conf
    from topology.composition.paths import discover_snapshot
    from topology.composition.topics import Topics, ensure_configured_topics
    from topology.composition.worx_config import load_config
    from topology.runtimes.discover_runner import DiscoverRunner

    config = load_config(args.config)
    conf = client_conf(config.kafka, servers_of(config, args))
    prefix = config.kafka.topic_prefix
    ensure_configured_topics(conf, config.kafka)
    runner = DiscoverRunner(
        DiscoverStage(config.router),
        conf,
        Topics(prefix),
        discover_snapshot(config, args.snapshot),
        batch_size=args.batch_size,
        snapshot_every_s=config.router.snapshot_every_s,
    )
    stop_on_sigterm()
    try:
        runner.run(idle_timeout_s=args.idle_timeout)
    except KeyboardInterrupt:
        pass
    log.info("discover done: %d decisions, %d domains", runner.stage.seen, len(runner.stage.table))
    return 0
