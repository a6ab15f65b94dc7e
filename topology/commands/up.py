"""`worx up`: every stage against your own Kafka cluster and trunk, from worx.toml."""

from __future__ import annotations

import argparse
import signal
import threading


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands._shared import add_runtime_argument

    parser = subparsers.add_parser(
        "up",
        help="run every stage against your Kafka cluster and trunk (from worx.toml)",
        description="Create the worx topics if missing, then start connect (your topics "
        "[ingest] source_topics -> worx.docs), route, discover, trainer, serve and monitor "
        "as supervised processes against kafka.bootstrap_servers, with the trunk of "
        "experts.trunk_dir. A crashed stage is restarted alone. Shows the loop live until "
        "Ctrl-C or SIGTERM, then stops everything it started. State (expert store, "
        "snapshots, monitor history, and the domain table in <data_dir>/domains.json) lives "
        "under data_dir: `worx serve --run <data_dir>` serves it with no cluster.",
    )
    parser.add_argument("--no-connect", action="store_true", help="do not start `worx connect`")
    parser.add_argument("--no-serve", action="store_true", help="do not start `worx serve`")
    parser.add_argument("--baseline", action="store_true", help="run the dense baseline too")
    add_runtime_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from experts.default_trunk import default_trunk_dir
    from experts.trunk import check_trunk_dir
    from topology.composition import paths
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import ensure_configured_topics
    from topology.composition.worx_config import ConfigError, load_config
    from topology.loop.orchestrate import LoopOptions, StageFailed, start_loop, watch_live
    from topology.loop.supervisor import ChildSpec, worx_argv

    config = load_config(args.config)
    if args.runtime == "flink":
        from topology.flink import require_pyflink

        require_pyflink()  # one line with the install command, before anything starts
    if not config.kafka.bootstrap_servers:
        raise ConfigError(
            "worx up runs against your own cluster: set kafka.bootstrap_servers in worx.toml "
            "(or WORX_KAFKA__BOOTSTRAP_SERVERS); `worx demo` runs on the embedded broker"
        )
    if not args.no_connect and not config.ingest.source_topics:
        raise ConfigError(
            "no company topics to read: set ingest.source_topics (and the field mapping "
            "ingest.text_field / id_field), or pass --no-connect to feed worx.docs yourself"
        )
    trunk_dir = Path(config.experts.trunk_dir or default_trunk_dir())
    check_trunk_dir(trunk_dir)  # a wrong trunk: one line now, not every stage crashing
    conf = client_conf(config.kafka, config.kafka.bootstrap_servers)
    ensure_configured_topics(conf, config.kafka)
    options = LoopOptions(
        bootstrap_servers=config.kafka.bootstrap_servers,
        run_dir=Path(config.data_dir).resolve(),
        trunk_dir=trunk_dir.resolve(),
        topic_prefix=config.kafka.topic_prefix,
        config_path=args.config,
        serve=not args.no_serve,
        baseline=args.baseline,
        store_dir=paths.store_dir(config),
        monitor_dir=paths.monitor_state_dir(config),
        runtime=args.runtime,
        serve_replicas=config.serve.replicas,
        serve_limits=config.serve.http_limits(),
    )
    console = Console()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    loop = start_loop(options, conf)
    try:
        if not args.no_connect:
            loop.supervisor.start(ChildSpec("connect", worx_argv("connect")))
        if loop.dashboard_url:
            console.print(f"dashboard: {loop.dashboard_url}")
        if loop.serve_url:
            console.print(f"serving: {loop.serve_url}")
        watch_live(loop, lambda _state: stop.is_set(), timeout_s=float("inf"), console=console)
    except StageFailed as exc:
        console.print(f"[red]worx up: {exc}[/]")
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        loop.stop()
    return 0
