"""`worx serve`: the mixture-of-experts HTTP API, with hot registration from the topic."""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the trunk + experts over HTTP; register new experts without a restart",
        description="Load the frozen trunk, build the expert table from the store, follow "
        "<prefix>.experts and register every new expert while serving (no restart, no "
        "failed request). Follows <prefix>.domains too: a text is given its domain as the "
        "route stage gives it one, and only that domain's experts serve it (a domain "
        "without an expert, or a novel text, gets the trunk alone). HTTP API (JSON): "
        "GET /health, GET /experts, GET /experts/ID, "
        "POST /score {text}, POST /generate {text, max_new_tokens}, and OpenAI's "
        "GET /v1/models, POST /v1/completions, POST /v1/chat/completions (model: auto, "
        "a domain or an expert). Binds 127.0.0.1 unless "
        "told otherwise; limits, workers and the optional bearer token (serve.api_token, "
        "WORX_SERVE__API_TOKEN) are set in [serve]. Prints 'serving on http://HOST:PORT' when "
        "ready; SIGTERM or Ctrl-C stops it. With --run DIR it serves a finished run from its "
        "files instead (no broker, no registration while serving).",
    )
    parser.add_argument("--host", help="listen address (default: experts.serve_host, 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port (default: experts.serve_port; 0 picks a free one)"
    )
    parser.add_argument("--trunk", help="trunk model directory (default: experts.trunk_dir)")
    parser.add_argument(
        "--store", help="expert store (default: experts.store_dir or <data_dir>/experts)"
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka cluster (default: kafka.bootstrap_servers; empty: an embedded broker)",
    )
    parser.add_argument(
        "--run",
        metavar="DIR",
        help="serve a finished run (a `worx demo` run directory, or the data_dir of `worx "
        "up`) from its files: its trunk, expert store and domain table (domains.json), with "
        "no broker and no topic followed; --trunk / --store override the run's own",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.run:  # before the imports below: a mistyped run fails at once
        from topology.composition.worx_config import load_config

        config = load_config(args.config)
        host = args.host or config.experts.serve_host
        port = config.experts.serve_port if args.port is None else args.port
        return serve_run(args, config, host, port)
    import logging

    from topology.composition.assemble import server_from_config
    from topology.composition.embedded_broker import bootstrap
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import Topics, ensure_configured_topics
    from topology.composition.worx_config import load_config
    from topology.runtimes.table_follower import TableFollower
    from topology.serve.http_api import make_http_server, options_from_config
    from topology.serve.registration_follower import RegistrationFollower

    log = logging.getLogger("worx.serve")
    config = load_config(args.config)
    section = config.experts
    host = args.host or section.serve_host
    port = section.serve_port if args.port is None else args.port
    server = server_from_config(config, args.trunk, args.store)
    server.rebuild_from_store()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with bootstrap(args.bootstrap_servers or config.kafka.bootstrap_servers) as servers:
        conf = client_conf(config.kafka, servers)
        prefix = config.kafka.topic_prefix
        ensure_configured_topics(conf, config.kafka)
        topics = Topics(prefix)
        # the domains first: a registered expert is only reachable through its domain's row
        # a follower that stops ends the server (exit 3): its supervisor restarts it
        domains = TableFollower(conf, topics.domains, server.domains.apply, on_death=stop.set)
        domains.start()
        follower = RegistrationFollower(server, conf, topics.experts)
        follower.on_death = stop.set
        follower.start()
        options = options_from_config(config.serve)
        httpd = make_http_server(server, host, port, followers=[domains, follower], **options)
        try:
            serve_until_stopped(
                httpd,
                stop,
                lambda: log.info(
                    "%d experts, following %s and %s",
                    len(server.table),
                    topics.experts,
                    topics.domains,
                ),
            )
        finally:
            follower.stop()
            domains.stop()
    dead = [f.describe() for f in (domains, follower) if not f.healthy()]
    if dead:
        log.error("stopped because a table follower stopped: %s", "; ".join(dead))
        return 3
    return 0


def serve_run(args: argparse.Namespace, config, host: str, port: int) -> int:
    """``worx serve --run DIR``: the finished run's experts and domain table, no broker."""
    import logging

    from topology.composition.run_dir import RunError, open_run, run_server

    if args.bootstrap_servers:
        raise RunError(
            "--run serves a finished run from its files and follows no cluster",
            "drop --bootstrap-servers, or drop --run to serve the live topics",
        )
    run = open_run(args.run)
    from topology.serve.http_api import make_http_server, options_from_config

    server = run_server(config, run, args.trunk, args.store)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    httpd = make_http_server(server, host, port, **options_from_config(config.serve))
    serve_until_stopped(
        httpd,
        stop,
        lambda: logging.getLogger("worx.serve").info(
            "run %s: %d experts, %d domains (no topic followed)",
            run.root,
            len(server.table),
            len(server.domains),
        ),
    )
    return 0


def serve_until_stopped(httpd, stop: threading.Event, started: Callable[[], None]) -> None:
    """Start ``httpd``, call ``started``, print its address (scripts and tests read that
    line), and serve until ``stop`` is set (SIGTERM, a dead follower) or Ctrl-C; the
    server stops after."""
    httpd.start()
    started()
    bound_host, bound_port = httpd.server_address
    print(f"serving on http://{bound_host}:{bound_port}", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.stop()
