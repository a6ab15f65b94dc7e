"""`worx monitor`: the forgetting monitor, its dashboard and /metrics; `--once` prints tables."""

from __future__ import annotations

import argparse
import signal
import threading


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "monitor",
        help="evaluate every domain after every expert registration; serve the dashboard",
        description="Follow the stream: held-out documents of every training job, expert "
        "registrations (each one triggers an evaluation of the serving mixture on every "
        "domain's held-out set, and a step of the dense fine-tuning baseline), training "
        "progress, drift events, dead letters. Serves a live dashboard and Prometheus "
        "/metrics on 127.0.0.1 unless told otherwise; rows go to <prefix>.metrics and "
        "<state-dir>/history.json. Held-out documents are routed as the server routes "
        "them: by the domain table (<prefix>.domains, kept in <state-dir>/domains.json), "
        "then only that domain's experts. Domains are shown by name (the domain's name, "
        "else its label hint; kept in <state-dir>/domain_labels.json), else by id. With "
        "--once: print the matrix and the metrics as tables and exit (no broker needed).",
    )
    parser.add_argument("--once", action="store_true", help="print the tables and exit")
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="evaluate now (row 0 if none, else re-check the latest step) before --once "
        "prints, or at start when serving",
    )
    parser.add_argument(
        "--no-stream", action="store_true", help="serve the dashboard from disk only"
    )
    parser.add_argument("--host", help="dashboard address (default: monitor.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="dashboard port (default: monitor.port; 0: any)")
    parser.add_argument(
        "--state-dir", help="history and held-out sets (default: <data_dir>/monitor)"
    )
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the dense fine-tuning baseline beside ours (default: monitor.baseline, on)",
    )
    parser.add_argument("--trunk", help="trunk model directory (default: experts.trunk_dir)")
    parser.add_argument("--store", help="expert store (default: experts.store_dir)")
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka cluster (default: kafka.bootstrap_servers; empty: an embedded broker)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from worx.errors import UserError

    try:
        return _run(args)
    except UserError:
        raise  # one line from the command line's handler
    except ValueError as exc:  # unusable state on disk, bad arguments: say what and how
        print(f"worx monitor: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import dataclasses
    import logging

    from rich.console import Console

    from monitor.terminal_tables import render
    from topology.composition.assemble import build_monitor
    from topology.composition.paths import STATE_HINT, existing_dir, monitor_state_dir
    from topology.composition.worx_config import load_config

    log = logging.getLogger("worx.monitor")
    config = load_config(args.config)
    if args.baseline is not None:
        config = dataclasses.replace(
            config, monitor=dataclasses.replace(config.monitor, baseline=args.baseline)
        )
    root = monitor_state_dir(config, args.state_dir)
    if args.once or args.no_stream:  # read what is on disk: a missing directory is a mistake
        existing_dir(root, "monitor state directory", STATE_HINT)
    if args.once:
        stage = build_monitor(
            config, root, with_model=args.evaluate, trunk_dir=args.trunk, store_dir=args.store
        )
        if args.evaluate:
            stage.evaluate_now()
        Console().print(render(stage.state()))
        return 0

    from monitor.server import DashboardServer
    from topology.composition.embedded_broker import bootstrap
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import Topics, ensure_configured_topics
    from topology.runtimes.stage_runner import StageRunner
    from topology.runtimes.table_follower import TableFollower

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    host = args.host or config.monitor.host
    port = config.monitor.port if args.port is None else args.port
    http_options = {
        "api_token": config.monitor.api_token,
        "allowed_hosts": config.monitor.allowed_hosts,
    }
    if args.no_stream:
        stage = build_monitor(
            config, root, with_model=args.evaluate, trunk_dir=args.trunk, store_dir=args.store
        )
        if args.evaluate:
            stage.evaluate_now()
        with DashboardServer(stage.state, host, port, **http_options) as server:
            print(f"dashboard on {server.url} (from {root}; Ctrl-C stops)", flush=True)
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
        return 0
    with bootstrap(args.bootstrap_servers or config.kafka.bootstrap_servers) as servers:
        conf = client_conf(config.kafka, servers)
        prefix = config.kafka.topic_prefix
        ensure_configured_topics(conf, config.kafka)
        stage = build_monitor(config, root, conf, args.trunk, args.store)
        if args.evaluate:
            stage.evaluate_now()
        topics = Topics(prefix)
        inputs = [
            topics.name(s)
            for s in ("docs", "routed", "dlq", "drift", "train", "train.status", "experts")
        ]
        # an evaluation (and a dense baseline step) may take long between two polls
        runner_conf = {"max.poll.interval.ms": 86_400_000, **conf}
        # one group per deployment (prefix), as route's and discover's: deployments sharing
        # a cluster never join, rebalance or wedge each other's group
        group = config.monitor.group_id or f"{prefix}-monitor"
        # the whole domain table, from the start, outside the group: names for the dashboard,
        # and the table the evaluator routes by (the server's); if it stops, the monitor
        # exits non-zero (the runner raises FollowerDied) to be restarted
        follower = TableFollower(conf, topics.domains, stage.apply_domain, name="monitor-domains")
        runner = StageRunner(
            stage,
            runner_conf,
            topics,
            inputs,
            group,
            "monitor",
            session_timeout_ms=config.kafka.session_timeout_ms,
            on_batch=lambda _in, _out: stage.live.save(),
            producer_conf=conf,
            followers=[follower],
        )
        follower.start()
        try:
            dashboard = DashboardServer(
                stage.state,
                host,
                port,
                on_evaluate=stage.evaluate_now,
                followers=[follower],
                **http_options,
            )
            with dashboard as server:
                print(f"dashboard on {server.url}  metrics on {server.url}metrics", flush=True)
                log.info("following %s (and %s for names)", ", ".join(inputs), topics.domains)
                try:
                    runner.run(stop)
                except KeyboardInterrupt:
                    pass
            stage.finish()  # every expert's weights verified once more at the end
        finally:
            follower.stop()
    return 0
