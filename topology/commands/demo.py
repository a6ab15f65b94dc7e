"""`worx demo`: the whole loop, as a new user first sees it (logic in topology/loop/demo_run.py)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

# configs/demo.toml: the settings that make the demo finish within minutes on 2 CPU cores.
# The stages get them as WORX_* variables, which win over a worx.toml; a WORX_* variable
# you set yourself wins over the demo's.
DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"


def demo_stage_defaults(path: Path = DEMO_CONFIG) -> dict[str, str]:
    """``path``'s settings as the ``WORX_<SECTION>__<FIELD>`` variables the stages read.

    Raises:
        UserError: the file is missing (not a checkout) or holds a nested table.
    """
    import tomllib

    from topology.composition.worx_config import dotted_leaves, variable_name
    from worx.errors import UserError

    if not path.is_file():
        raise UserError(f"the demo's settings {path} are missing", "run worx demo from a checkout")
    raw = tomllib.loads(path.read_text())
    env = {}
    for dotted in dotted_leaves(raw):
        section, _, field = dotted.partition(".")
        if not field or "." in field:
            raise UserError(f"{path}: {dotted}: only flat settings in sections", "")
        value = raw[section][field]
        env[variable_name(dotted)] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


# documents per second the demo feeds by default: 0, as fast as ingest goes (a backlog:
# every new kind's job queues behind the others); --rate 8 feeds the bundled stream over
# ~5 minutes, a new kind every 40 s (docs/results.md: at 10 per second p50 65.4 s)
DEMO_RATE = 0.0

QUICK = {"new_domains": ("legal", "scripture"), "per_domain": 300, "mixture_docs": 100}


def corpus_domains(corpus: Path, trunk_domains: tuple[str, ...]) -> tuple[tuple, tuple]:
    """A corpus's default plan: its domains the trunk was trained on are old (the trunk's
    own), every other one is new, in name order."""
    from worx.scenario import Scenario

    names = Scenario.from_directory(corpus).names  # an unreadable corpus: its one-line error
    old = tuple(name for name in trunk_domains if name in names)
    return old, tuple(name for name in names if name not in old)


def choose_domains(
    plan, corpus: str | None, old_domains: str | None, new_domains: str | None
) -> None:
    """Set ``plan``'s corpus and its old and new domains from the command line: a corpus's
    default plan (:func:`corpus_domains`), then the comma-separated lists where given."""
    if corpus:
        plan.corpus_dir = Path(corpus)
        plan.old_domains, plan.new_domains = corpus_domains(plan.corpus_dir, plan.old_domains)
    if old_domains is not None:
        plan.old_domains = tuple(d for d in old_domains.split(",") if d)
    if new_domains is not None:
        plan.new_domains = tuple(d for d in new_domains.split(",") if d)


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands._shared import add_runtime_argument
    from topology.loop.demo_run import STREAM_ALIASES, STREAMS

    parser = subparsers.add_parser(
        "demo",
        help="run the whole loop on the embedded broker with the bundled corpus",
        description="Start the embedded broker and every stage (route, discover, trainer, "
        "serve, monitor) as supervised processes, stream the bundled corpus (--stream "
        "phased: the trunk's own domains first, then new domains one after another, then a "
        "mixture; --stream mixed: every domain mixed from the start as a company's stream "
        "is; either with a few malformed records), and show live what happens. Ends with a "
        "summary and writes the report (HTML, PNGs, JSON) into the run directory, beside "
        "the domain table (domains.json) and the experts, so that `worx serve --run DIR`, "
        "`worx explain TEXT --run DIR` and `worx domains --run DIR` explore the finished run "
        "with no broker (--keep-serving serves it and its dashboard for you). Each run "
        "gets a fresh directory; Ctrl-C stops everything it started.",
    )
    parser.add_argument("--out", default="worx-demo", help="parent of the run directories")
    parser.add_argument("--report-json", help="also write the summary JSON here")
    parser.add_argument("--quick", action="store_true", help="a shorter run: 2 new domains")
    parser.add_argument(
        "--baseline", action="store_true", help="also run the dense sequential fine-tune baseline"
    )
    parser.add_argument("--trunk", help="trunk directory (default: the bundled trunk)")
    parser.add_argument(
        "--corpus",
        help="labelled corpus directory, or the preset 'many' (the trunk's two domains and "
        "data/corpus_many's 40) (default: bundled)",
    )
    parser.add_argument("--old-domains", help="comma-separated: the trunk's own domains")
    parser.add_argument("--new-domains", help="comma-separated: the domains to discover")
    parser.add_argument("--per-domain", type=int, help="documents per domain phase")
    parser.add_argument("--mixture-docs", type=int, help="documents in the final mixture")
    parser.add_argument(
        "--stream",
        choices=(*STREAMS, *STREAM_ALIASES),
        default="phased",
        help="phased: the old domains, then each new one, then a mixture (default); mixed: "
        "the old and new domains mixed from the first document, Zipf-like frequencies, half "
        "of them present from the start and the rest joining in the first half, some going "
        "silent and coming back (worx/company_stream.py); company: mixed's older name",
    )
    parser.add_argument(
        "--docs",
        type=int,
        help="--stream mixed: the stream's length (default: the phased stream's, each "
        "domain's documents up to --per-domain plus --mixture-docs)",
    )
    parser.add_argument(
        "--trainers",
        type=int,
        default=1,
        help="trainer processes in one consumer group, <prefix>.train made with as many "
        "partitions, each with cores/N torch threads (default 1)",
    )
    parser.add_argument(
        "--serve-replicas",
        type=int,
        default=1,
        help="serve processes behind one front on the serve address, so that a serve "
        "restart is not an outage ([serve] replicas; default 1)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=DEMO_RATE,
        help="documents fed per second, as a stream arrives over time (default "
        f"{DEMO_RATE:g}: as fast as ingest goes, a backlog where every job queues)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after seconds")
    parser.add_argument("--no-serve", action="store_true", help="do not start `worx serve`")
    parser.add_argument(
        "--store-url",
        help="keep the experts in this S3-compatible bucket (s3://bucket/prefix; credentials "
        "and endpoint from AWS_* variables) instead of the run directory: the trainer, serve "
        "and monitor then share only the broker and the bucket (each its own local cache)",
    )
    add_runtime_argument(parser)
    parser.add_argument(
        "--keep-serving",
        action="store_true",
        help="after the run, serve it (worx serve --run) and its dashboard until Ctrl-C, on "
        "the URLs the run used; without it the demo prints the command that serves it",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import os

    from rich.console import Console

    from experts.default_trunk import default_trunk_dir
    from experts.trunk import check_trunk_dir
    from topology.commands._shared import stop_on_sigterm
    from topology.composition import paths
    from topology.composition.worx_config import load_config
    from topology.loop import keep_serving
    from topology.loop.demo_run import DemoPlan, run_demo, stream_name
    from topology.loop.orchestrate import StageFailed
    from worx.errors import UserError

    if args.docs is not None and stream_name(args.stream) != "mixed":
        raise UserError("--docs sets the length of a mixed stream", "add --stream mixed")
    if args.trainers < 1:
        raise UserError(f"--trainers {args.trainers}", "pass --trainers N with N >= 1")
    config = load_config(args.config)
    trunk = Path(args.trunk or config.experts.trunk_dir or default_trunk_dir())
    check_trunk_dir(trunk)  # a wrong --trunk: one line now, not every stage crashing
    run_dir = (Path(args.out) / time.strftime("run-%Y%m%d-%H%M%S")).resolve()
    stage_env = {k: v for k, v in demo_stage_defaults().items() if k not in os.environ}
    if args.store_url:  # the bucket checked now: one line, not every stage failing
        from experts.object_store import ObjectStoreError, S3Backend

        try:
            S3Backend(args.store_url, cache_dir=run_dir)
        except (ValueError, ObjectStoreError) as exc:
            raise UserError(str(exc), "pass --store-url s3://bucket/prefix of a bucket") from exc
        stage_env["WORX_EXPERTS__STORE_URL"] = args.store_url
        os.environ["WORX_EXPERTS__STORE_URL"] = args.store_url  # --keep-serving's servers too
    plan = DemoPlan(run_dir=run_dir, trunk_dir=trunk.resolve(), stage_env=stage_env)
    # the stages' store: the configured one, else <run_dir>/experts (WORX_DATA_DIR=run_dir)
    plan.store_dir = paths.store_dir(dataclasses.replace(config, data_dir=str(run_dir)))
    plan.keep_serving = args.keep_serving
    if args.runtime == "flink":
        from topology.flink import require_pyflink

        require_pyflink()  # one line with the install command, before the run starts
    plan.runtime = args.runtime
    if args.quick:
        for name, value in QUICK.items():
            setattr(plan, name, value)
    choose_domains(plan, args.corpus, args.old_domains, args.new_domains)
    if args.per_domain:
        plan.per_domain = args.per_domain
    if args.mixture_docs is not None:
        plan.mixture_docs = args.mixture_docs
    plan.stream, plan.docs = stream_name(args.stream), args.docs
    plan.trainers = args.trainers
    if args.serve_replicas < 1:
        raise UserError(f"--serve-replicas {args.serve_replicas}", "pass --serve-replicas N >= 1")
    plan.serve_replicas = args.serve_replicas
    if args.rate < 0:
        raise UserError(f"--rate {args.rate:g}", "pass --rate R with R >= 0 (0: unpaced)")
    plan.rate = args.rate or None
    plan.baseline = args.baseline
    plan.timeout_s = args.timeout
    plan.serve = not args.no_serve
    console = Console()
    stop_on_sigterm()  # as Ctrl-C: every stage stopped, the summary of the run so far
    kept: list[keep_serving.FinishedRunServers] = []

    def serve_finished_run(loop, interrupted: bool) -> dict:
        """--keep-serving: start the run's servers now, to load while the report is drawn."""
        if not plan.keep_serving or interrupted:
            return {}
        try:
            servers = keep_serving.start(
                plan.run_dir, serve_url=loop.serve_url, dashboard_url=loop.dashboard_url
            )
        except UserError as exc:  # nothing to serve: the summary still comes
            console.print(f"[yellow]worx demo: not serving the finished run: {exc}[/]")
            return {"keep_serving": False}
        kept.append(servers)
        return {"serve_url": servers.serve_url, "dashboard_url": servers.dashboard_url}

    try:
        return _finish(args, console, run_demo(plan, console, serve_finished_run), kept)
    except StageFailed as exc:
        console.print(f"[red]worx demo: {exc}[/]")
        return 1
    finally:
        for servers in kept:
            servers.stop()


def _finish(args: argparse.Namespace, console, report: dict, kept: list) -> int:
    """Write the summary JSON, then serve the finished run (--keep-serving) or say how."""
    import json
    import shlex

    from topology.loop import keep_serving

    if args.report_json:
        Path(args.report_json).write_text(json.dumps(report, indent=2, sort_keys=True))
        console.print(f"summary JSON: {args.report_json}")
    code = 0 if report.get("finished") else 1
    if not report.get("keep_serving"):  # not asked, or Ctrl-C during the run
        where = shlex.quote(report["run_dir"])
        print(
            f"to serve this run again: {report['explore_command']}  (also worx explain TEXT "
            f"--run {where}, worx domains --run {where})",
            flush=True,
        )
        return code
    servers = kept[0]
    try:
        keep_serving.wait_ready(servers)
        # one plain line (no wrapping): scripts and tests read the URLs from it
        print(
            f"serving the finished run on {servers.serve_url} dashboard {servers.dashboard_url} "
            "(Ctrl-C stops)",
            flush=True,
        )
        keep_serving.serve_until_stopped(servers)
    except keep_serving.ServingFailed as exc:
        console.print(f"[red]worx demo: {exc}[/]")
        return 1
    finally:
        servers.stop()
    return code
