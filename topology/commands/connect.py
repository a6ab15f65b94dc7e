"""`worx connect`: the Kafka-to-Kafka connector, company topic(s) -> normalised Docs on worx.docs.

Runs the ingest stage on the plain confluent-kafka runtime (:class:`topology.runtimes.stage_runner.
StageRunner`): it reached the throughput target where the Faust runtime did not (see
docs/ingest.md and bench/ingest.py). Offsets on the source are committed only after the
batch's Docs and dead letters are flushed to the destination: at least once.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.config import IngestConfig
    from topology.composition.worx_config import WorxConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands._shared import add_mapping_arguments

    parser = subparsers.add_parser(
        "connect",
        help="consume company topic(s) on any Kafka cluster into worx.docs",
        description="Consume the company's own topic(s) (JSON objects or plain-text values) "
        "with a field mapping, normalise each document, and produce Doc records to "
        "<prefix>.docs and rejected input, with the reason and its source topic/partition/"
        "offset, to <prefix>.dlq. The source may be another cluster "
        "(--source-bootstrap-servers, [ingest] source_client for its librdkafka settings). "
        "Runs until Ctrl-C or SIGTERM, or --idle-timeout.",
    )
    parser.add_argument(
        "--topics", help="comma-separated source topics (default: ingest.source_topics)"
    )
    parser.add_argument(
        "--format", choices=("json", "text"), help="how source values are read (default: json)"
    )
    parser.add_argument(
        "--source-bootstrap-servers",
        help="cluster of the source topics (default: ingest.source_bootstrap_servers, "
        "else the destination cluster)",
    )
    parser.add_argument("--group", help="consumer group on the source (default: worx-connect)")
    parser.add_argument(
        "--idle-timeout", type=float, help="stop after this many seconds without input"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes in the consumer group (at most the source partitions; default 1)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="destination cluster (default: kafka.bootstrap_servers; empty: embedded broker)",
    )
    add_mapping_arguments(parser)
    parser.set_defaults(func=run)


def build_connector(
    config: WorxConfig, section: IngestConfig, destination_servers: str, on_batch: Any = None
) -> Any:
    """A StageRunner that moves ``section.source_topics`` into ``<prefix>.docs``."""
    from ingest.stage import NormaliseStage
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import Topics
    from topology.runtimes.stage_runner import StageRunner

    if not section.source_topics:
        raise ValueError("no source topics: pass --topics or set ingest.source_topics")
    destination = client_conf(config.kafka, destination_servers)
    if section.source_bootstrap_servers:
        source = {**section.source_client, "bootstrap.servers": section.source_bootstrap_servers}
    else:
        source = {**destination, **section.source_client}
    return StageRunner(
        NormaliseStage(section),
        source,
        Topics(config.kafka.topic_prefix),
        list(section.source_topics),
        group_id=section.source_group,
        stage_name="ingest",
        batch_size=section.batch_size,
        session_timeout_ms=config.kafka.session_timeout_ms,
        on_batch=on_batch,
        producer_conf=destination,
    )


def _worker(
    config: WorxConfig,
    section: IngestConfig,
    servers: str,
    stop: Any,
    counts: Any,
    index: int,
    idle: Any,
) -> None:
    """One connector process (multiprocessing target): runs until ``stop`` is set."""
    import signal as _signal
    import sys

    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # the parent decides when to stop
    _signal.signal(_signal.SIGTERM, lambda *_: stop.set())
    if sys.platform.startswith("linux"):  # a SIGKILLed parent must not leave us running
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, _signal.SIGTERM)  # PR_SET_PDEATHSIG

    def on_batch(consumed: int, emitted: int) -> None:
        counts[index] = runner.consumed

    runner = build_connector(config, section, servers, on_batch=on_batch)
    runner.run(stop, idle_timeout_s=idle)


def run_workers(
    config: WorxConfig,
    section: IngestConfig,
    servers: str,
    workers: int,
    stop: Any,
    idle_timeout_s: float | None = None,
    on_tick: Any = None,
) -> int:
    """Run ``workers`` connector processes in one consumer group until ``stop`` is set
    (a ``multiprocessing`` Event) or all went idle; returns the messages consumed."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    counts = context.Array("q", workers)
    procs = [
        context.Process(
            target=_worker,
            args=(config, section, servers, stop, counts, i, idle_timeout_s),
            name=f"worx-connect-{i}",
        )
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        while any(proc.is_alive() for proc in procs):
            for proc in procs:
                proc.join(0.5)
            if on_tick is not None:
                on_tick(sum(counts))
    finally:
        stop.set()
        for proc in procs:
            proc.join(60)
            if proc.is_alive():
                proc.kill()
    failed = [proc.name for proc in procs if proc.exitcode not in (0, None)]
    if failed:
        raise RuntimeError(f"connector worker(s) {failed} failed; see their log above")
    return sum(counts)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from topology.commands._shared import destination, ingest_config, stop_on_sigterm
    from topology.composition.kafka_clients import require_reachable
    from topology.composition.worx_config import ConfigError, load_config

    console = Console(stderr=True)
    config = load_config(args.config)
    section = ingest_config(config, args)
    changes: dict[str, Any] = {}
    if args.topics:
        changes["source_topics"] = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    if args.format:
        changes["source_format"] = args.format
    if args.source_bootstrap_servers:
        changes["source_bootstrap_servers"] = args.source_bootstrap_servers
    if args.group:
        changes["source_group"] = args.group
    section = dataclasses.replace(section, **changes)
    if args.workers < 1:
        raise ConfigError("--workers must be >= 1")
    if not section.source_topics:
        raise ConfigError("no source topics: pass --topics or set [ingest] source_topics")
    stop_on_sigterm()
    stop = threading.Event()
    with destination(config, args.bootstrap_servers) as (servers, embedded):
        if section.source_bootstrap_servers:  # another cluster: it must answer too
            require_reachable(
                {**section.source_client, "bootstrap.servers": section.source_bootstrap_servers},
                config.kafka.connect_timeout_s,
                setting="ingest.source_bootstrap_servers",
                flag="--source-bootstrap-servers",
            )
        if embedded:
            console.print(f"[yellow]temporary embedded broker at {servers}[/yellow]")
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console)
        task = progress.add_task("waiting for input")

        def on_batch(consumed: int, emitted: int) -> None:
            counters = runner.stage.counters
            progress.update(
                task,
                description=f"in {runner.consumed:,}  docs {counters['docs']:,}  "
                f"dlq {counters['dlq']:,}  duplicates {counters['duplicates']:,}",
            )

        console.print(
            f"connect: {', '.join(section.source_topics)} -> {config.kafka.topic_prefix}.docs "
            f"with {args.workers} worker(s) (Ctrl-C stops)"
        )
        if args.workers > 1:
            import multiprocessing

            shared_stop = multiprocessing.get_context("spawn").Event()

            def on_tick(consumed: int) -> None:
                progress.update(task, description=f"in {consumed:,}")

            with progress:
                try:
                    run_workers(
                        config,
                        section,
                        servers,
                        args.workers,
                        shared_stop,
                        args.idle_timeout,
                        on_tick,
                    )
                except KeyboardInterrupt:
                    shared_stop.set()
            return 0
        runner = build_connector(config, section, servers, on_batch=on_batch)
        with progress:
            try:
                runner.run(stop, idle_timeout_s=args.idle_timeout)
            except KeyboardInterrupt:
                stop.set()
    return 0
