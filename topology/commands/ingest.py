"""`worx ingest PATH...`: replay JSON-lines / text / CSV files (optionally .gz) into worx.docs."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands._shared import add_mapping_arguments

    parser = subparsers.add_parser(
        "ingest",
        help="replay JSON-lines, plain-text or CSV files into worx.docs",
        description="Read files (JSON-lines, plain text, CSV/TSV; .gz is decompressed), "
        "normalise each document, and produce Doc records to <prefix>.docs and rejected "
        "input, with the reason, to <prefix>.dlq. With --checkpoint, a killed ingest resumes "
        "where it stopped (at most one batch is produced twice). Without configured "
        "bootstrap servers an embedded broker is started for the run and stopped after it.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files to ingest")
    parser.add_argument(
        "--format",
        choices=("jsonl", "text", "csv", "tsv"),
        help="file format (default: from the suffix: .jsonl/.ndjson/.json, .csv, .tsv, "
        "else plain text)",
    )
    add_mapping_arguments(parser)
    parser.add_argument(
        "--text-unit",
        choices=("file", "paragraph", "line"),
        help="plain-text files: what one document is (default: ingest.text_unit, paragraph)",
    )
    parser.add_argument("--rate", type=float, help="at most this many documents per second")
    parser.add_argument(
        "--checkpoint", metavar="FILE", help="resume file: progress is saved here after each batch"
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka cluster (default: kafka.bootstrap_servers; empty: embedded broker)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from ingest.files import FileIngestor, IngestFileError, check_files
    from topology.commands._shared import destination, ingest_config, stop_on_sigterm
    from topology.composition.kafka_clients import client_conf, make_producer
    from topology.composition.topics import Topics
    from topology.composition.worx_config import load_config
    from topology.runtimes.publisher import Publisher
    from worx.errors import UserError

    console = Console(stderr=True)
    config = load_config(args.config)
    section = ingest_config(config, args)
    for name in args.paths:
        if Path(name).is_dir():
            raise UserError(
                f"{name} is a directory; worx ingest reads files (it has no recursive option)",
                f"name the files, e.g. `worx ingest {name.rstrip('/')}/*.jsonl` (your shell "
                "expands the pattern)",
            )
    missing = [p for p in args.paths if not Path(p).is_file()]
    if missing:
        raise UserError(f"no such file: {', '.join(missing)}", "check the path(s)")
    check_files(args.paths, args.format, section)  # a mapping that matches nothing: say so now
    stop_on_sigterm()
    with destination(config, args.bootstrap_servers) as (servers, embedded):
        if embedded:
            console.print(
                f"[yellow]no kafka.bootstrap_servers configured: using a temporary embedded "
                f"broker at {servers}; its data is gone when this command ends. Run `worx "
                "broker` and export WORX_KAFKA__BOOTSTRAP_SERVERS to keep it.[/yellow]"
            )
        topics = Topics(config.kafka.topic_prefix)
        sink = Publisher(make_producer(client_conf(config.kafka, servers)), topics, 60)
        with progress_bar(console, args.paths, disabled=args.no_progress) as on_progress:
            ingestor = FileIngestor(
                section,
                sink,
                fmt=args.format,
                rate=args.rate,
                checkpoint=args.checkpoint,
                target=f"{servers}/{config.kafka.topic_prefix}",
                on_progress=on_progress,
            )
            try:
                report = ingestor.run(args.paths)
            except IngestFileError as exc:
                console.print(f"[red]worx ingest: {exc}[/red]")
                return 1
            finally:
                sink.close()
                del sink, ingestor  # close connections before an embedded broker stops
        print_report(console, report, topics)
    return 0


@contextlib.contextmanager
def progress_bar(console: Any, paths: list[str], disabled: bool = False) -> Iterator[Any]:
    """A rich progress bar over the bytes of ``paths``; yields FileIngestor's on_progress."""
    from pathlib import Path

    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    sizes = {Path(p).resolve(): Path(p).stat().st_size for p in paths}
    done_before: dict[Path, int] = {}
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=disabled,
    )
    task = progress.add_task("ingest", total=sum(sizes.values()))

    def on_progress(path: Path, position: int, report: Any) -> None:
        key = path.resolve()
        finished = sum(v for k, v in done_before.items() if k != key)
        if position >= sizes.get(key, 0):
            done_before[key] = sizes.get(key, 0)
        dlq = sum(report.dead_letters.values())
        progress.update(
            task,
            completed=finished + position,
            description=f"{path.name[:28]:28} docs {report.docs:>8,} dlq {dlq:>6,}",
        )

    with progress:
        yield on_progress


def print_report(console: Any, report: Any, topics: Any) -> None:
    from rich.table import Table

    table = Table(title=f"ingest into {topics.docs}", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("files", f"{report.files:,}")
    table.add_row("inputs read", f"{report.inputs:,}")
    if report.resumed_skipped:
        table.add_row("skipped (checkpoint)", f"{report.resumed_skipped:,}")
    table.add_row(f"docs -> {topics.docs}", f"{report.docs:,}")
    table.add_row("  of which split parts", f"{report.counters.get('parts', 0):,}")
    table.add_row("duplicates dropped", f"{report.counters.get('duplicates', 0):,}")
    for reason, count in sorted(report.dead_letters.items()):
        table.add_row(f"dead letter: {reason}", f"{count:,}")
    rate = report.inputs / report.seconds if report.seconds else 0.0
    table.add_row("seconds", f"{report.seconds:.1f} ({rate:,.0f} inputs/s)")
    console.print(table)
