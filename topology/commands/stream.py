"""`worx stream`: run the stream's stages as Faust agents (at least once)."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stream",
        help="run the stream stages (normalise, route, discover) as a Faust app",
        description="Run the stream's stages as Faust agents against the configured cluster "
        "(or an embedded broker), at least once: outputs are flushed before input offsets "
        "are committed, and a record a stage cannot handle is dead-lettered with the reason. "
        "Runs until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--agents",
        help="comma-separated agents to run (default: every available agent that is "
        "configured; normalise needs ingest.source_topics)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka cluster (default: kafka.bootstrap_servers; empty: embedded broker)",
    )
    parser.add_argument("--loglevel", default="WARNING", help="Faust worker log level")
    parser.set_defaults(func=run)


def default_agents(config) -> list[str]:
    from topology.faust.agents import available

    names = available()
    if not config.ingest.source_topics and "normalise" in names:
        log.info("normalise agent not started: no ingest.source_topics configured")
        names.remove("normalise")
    return names


def run(args: argparse.Namespace) -> int:
    import faust

    from topology.commands._shared import destination
    from topology.composition.worx_config import ConfigError, load_config
    from topology.faust.agents import AgentNotConfigured
    from topology.faust.app import create_app

    config = load_config(args.config)
    if args.agents:
        agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    else:
        agents = default_agents(config)
    if not agents:
        raise ConfigError("no agent to run: pass --agents or configure ingest.source_topics")
    try:  # a dry run first: a misconfigured agent fails before any broker is touched
        create_app(config, "127.0.0.1:9092", agents)
    except AgentNotConfigured as exc:
        raise ConfigError(str(exc)) from exc
    with destination(config, args.bootstrap_servers) as (servers, embedded):
        if embedded:
            print(f"worx stream: temporary embedded broker at {servers}", flush=True)
        app = create_app(config, servers, agents)
        print(f"worx stream: agents {', '.join(agents)} on {servers} (Ctrl-C stops)", flush=True)
        worker = faust.Worker(app, loglevel=args.loglevel, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:  # the worker exits through SystemExit when stopped
            return int(exc.code or 0)
    return 0
