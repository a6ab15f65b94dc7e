"""`worx demo`: the whole loop on the embedded broker with the bundled corpus.

The stream (:func:`stream_lines`) is ``phased`` (the default: the trunk's own domains first,
then new domains one after another, then a mixture of everything) or ``mixed`` (every
selected domain mixed from the first document, as a company's stream is,
:meth:`Scenario.company`; ``company`` is its older name), with the same malformed lines
mixed in either way. Every stage runs as its own supervised process; the
terminal shows the loop live; at the end a summary is printed and the report (HTML, PNGs,
JSON) is written to the run directory.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from ingest.scenario import LabelledDoc, Scenario
from monitor import run_summary
from monitor.cluster_agreement import nmi_purity_of_counts
from monitor.history import MatrixHistory
from monitor.summary_table import print_summary
from router.naming import display_name
from topology.composition.embedded_broker import EmbeddedBroker
from topology.composition.topics import ensure_topics
from topology.loop.final_domains import final_domains_nmi
from topology.loop.orchestrate import LoopOptions, RunningLoop, start_loop, watch_live
from topology.loop.supervisor import ChildSpec, worx_argv
from topology.loop.watcher import LoopState
from worx.atomic import atomic_write_json
from worx.errors import UserError

log = logging.getLogger(__name__)

TRUNK_DOMAINS = ("fiction_austen", "news")  # what the bundled trunk was pretrained on
NEW_DOMAINS = ("python_code", "legal", "biomedical", "scripture", "tech_docs")


@dataclass
class DemoPlan:
    run_dir: Path
    trunk_dir: Path
    corpus_dir: Path | None = None  # None: the bundled corpus
    old_domains: tuple[str, ...] = TRUNK_DOMAINS
    new_domains: tuple[str, ...] = NEW_DOMAINS
    per_domain: int = 320
    mixture_docs: int = 300
    seed: int = 0
    baseline: bool = False
    timeout_s: float = 900.0
    quiet_s: float = 12.0  # the loop is done when nothing moved for this long at the end
    stage_env: dict[str, str] = field(default_factory=dict)
    serve: bool = True
    store_dir: Path | None = None  # where the stages keep experts (None: <run_dir>/experts)
    keep_serving: bool = False  # serve the finished run until Ctrl-C (loop/keep_serving.py)
    runtime: str = "plain"  # route + discover: "plain" or "flink" (topology/loop/orchestrate.py)
    stream: str = "phased"  # the documents' order, one of STREAMS (demo_documents)
    docs: int | None = None  # mixed: the stream's length (None: mixed_docs's default)
    trainers: int = 1  # trainer processes in one group (orchestrate.trainer_children)
    serve_replicas: int = 1  # serve processes behind one front (orchestrate.serve_children)
    rate: float | None = None  # documents fed per second (None: as fast as ingest goes)


STREAMS = ("phased", "mixed")
STREAM_ALIASES = {"company": "mixed"}  # the mixed stream's first name, still accepted


def stream_name(name: str) -> str:
    """``name`` as one of :data:`STREAMS`, an alias read as what it stands for.

    Raises
    ------
    UserError
        ``name`` is neither a stream nor an alias.
    """
    name = STREAM_ALIASES.get(name, name)
    if name not in STREAMS:
        raise UserError(f"unknown stream {name!r}", f"use one of {', '.join(STREAMS)}")
    return name


# Malformed lines mixed into the stream, as a real one would have: each must come out on
# the dead-letter topic with its reason, and nothing valid may be lost because of them.
BAD_LINES = (
    '{"id": "bad-1", "text": ',
    '["an", "array"]',
    '{"id": "bad-3", "domain": "news"}',
    '{"id": "bad-4", "text": 42}',
    '{"id": "bad-5", "text": "   "}',
)


def mixed_docs(plan: DemoPlan, scenario: Scenario) -> int:
    """The mixed stream's length when ``plan.docs`` is None: the phased stream's of the
    same plan, each selected domain's documents up to ``per_domain`` plus ``mixture_docs``
    (the bundled corpus, default plan: 7 x 320 + 300 = 2,540)."""
    names = [*plan.old_domains, *plan.new_domains]
    sizes = [len(scenario.domains.get(name, ())) for name in names]  # unknown: refused later
    return sum(min(plan.per_domain, size) for size in sizes) + plan.mixture_docs


def demo_documents(plan: DemoPlan) -> list[LabelledDoc]:
    """The plan's documents in stream order, over its old and new domains: ``phased`` (the
    old domains, then each new one, then a mixture) or ``mixed``
    (:meth:`Scenario.company`, ``plan.docs`` long, default :func:`mixed_docs`).

    Raises
    ------
    UserError
        For an unknown stream, a length below 1 or a domain the corpus does not have.
    """
    stream_kind = stream_name(plan.stream)
    scenario = Scenario.from_directory(plan.corpus_dir)
    order = [*plan.old_domains, *plan.new_domains]
    if stream_kind == "phased":
        stream = scenario.phases_then_mixture(order, plan.per_domain, plan.mixture_docs, plan.seed)
        return list(stream)
    n = plan.docs if plan.docs is not None else mixed_docs(plan, scenario)
    docs = list(scenario.company(n, plan.seed, domains=order))  # an unknown domain raises
    if not docs:
        raise UserError(f"a mixed stream of {n} documents", "pass --docs N with N >= 1")
    missing = sorted(set(order) - {doc.domain for doc in docs})
    if missing:  # rare kinds joining late: their share of a short stream can round to none
        log.warning("the mixed stream of %d documents has none of %s", n, ", ".join(missing))
    return docs


def stream_lines(plan: DemoPlan) -> list[str]:
    """The stream of either kind as the lines of a JSON-lines file for `worx ingest`: the
    plan's documents with the malformed lines of :data:`BAD_LINES` spread through them
    (one before every 400th document from the 200th on, while they last)."""
    lines = []
    for index, doc in enumerate(demo_documents(plan)):
        if index % 400 == 199 and index // 400 < len(BAD_LINES):
            lines.append(BAD_LINES[index // 400])
        lines.append(doc.to_json_line())
    return lines


def write_stream(plan: DemoPlan) -> tuple[Path, int]:
    """:func:`stream_lines` written to ``<run_dir>/stream.jsonl``; returns its path and the
    number of lines."""
    # the whole stream first: an unknown domain is refused before the run directory exists
    lines = stream_lines(plan)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    path = plan.run_dir / "stream.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(line + "\n" for line in lines)
    return path, len(lines)


def feed_spec(
    stream_path: Path, rate: float | None = None, checkpoint: Path | None = None, restarts: int = 3
) -> ChildSpec:
    """The feed: `worx ingest` of the stream file as a oneshot stage (restarted if it crashes;
    with ``checkpoint`` it resumes where it stopped, else it replays from the start)."""
    argv = ["ingest", str(stream_path), "--domain-field", "domain", "--no-progress"]
    if rate is not None:
        argv += ["--rate", str(rate)]
    if checkpoint is not None:
        argv += ["--checkpoint", str(checkpoint)]
    return ChildSpec("ingest", worx_argv(*argv), restart=True, max_restarts=restarts, oneshot=True)


def loop_is_done(state: LoopState, fed: int, quiet_s: float, feed_done: bool) -> bool:
    """Everything fed was ingested and routed, every job ended, the monitor evaluated the last
    registration, and nothing moved for ``quiet_s``."""
    if not feed_done or state.docs + state.dead_letters < fed:
        return False
    if len(state.routed_ids) < len(state.doc_ids) or state.pending_jobs():
        return False
    latest = state.latest_eval()
    if latest is None or latest.step < len(state.experts):
        return False
    return time.monotonic() - state.last_change_at >= quiet_s


def run_demo(
    plan: DemoPlan,
    console: Console | None = None,
    on_stopped: Callable[[RunningLoop, bool], dict] | None = None,
) -> dict:
    """Run the demo; returns the summary (also in ``<run_dir>/demo.json``).

    ``on_stopped(loop, interrupted)`` is called once every stage has stopped, before the
    summary is written (``--keep-serving`` starts the finished run's servers there, so
    they load while the report is drawn); what it returns updates the summary.
    """
    console = console or Console()
    started = time.monotonic()
    stream_path, fed = write_stream(plan)
    console.print(
        f"[bold]worx demo[/]: {fed} documents ({stream_name(plan.stream)} stream), "
        f"run directory {plan.run_dir}"
    )
    with EmbeddedBroker() as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        ensure_topics(conf, prefix="worx", partitions=2, train_partitions=plan.trainers)
        options = LoopOptions(
            bootstrap_servers=broker.bootstrap_servers,
            run_dir=plan.run_dir,
            trunk_dir=plan.trunk_dir,
            baseline=plan.baseline,
            serve=plan.serve,
            # the stages read the partitions of <prefix>.train made here
            stage_env={**plan.stage_env, "WORX_KAFKA__TRAIN_PARTITIONS": str(plan.trainers)},
            store_dir=plan.store_dir,
            runtime=plan.runtime,
            trainers=plan.trainers,
            serve_replicas=plan.serve_replicas,
        )
        loop = start_loop(options, conf)
        try:
            if loop.dashboard_url:
                console.print(f"dashboard: {loop.dashboard_url}")
            loop.supervisor.start(feed_spec(stream_path, plan.rate))

            def done(state: LoopState) -> bool:
                feed_done = loop.supervisor.exit_code("ingest") == 0
                return loop_is_done(state, fed, plan.quiet_s, feed_done)

            interrupted = False
            try:
                finished = watch_live(loop, done, plan.timeout_s, console)
            except KeyboardInterrupt:  # stop everything, then report what happened so far
                console.print("[yellow]interrupted: stopping every stage[/]")
                finished, interrupted = False, True
            with loop.watcher.lock:
                rows = {d: r for d, r in loop.watcher.state.domains.items() if r.status == "active"}
                labels = {d: r.label_hint or "?" for d, r in rows.items()}
                names = {d: display_name(r) for d, r in rows.items()}
                drift = (
                    list(loop.watcher.state.drift_events),
                    list(loop.watcher.state.jobs.values()),
                    dict(loop.watcher.state.job_status),
                )
                expert_domains = {e: r.domain_id for e, r in loop.watcher.state.experts.items()}
                registrations = {
                    e: (r.domain_id, r.created_ms, r.job_id)
                    for e, r in loop.watcher.state.experts.items()
                }
                job_created_ms = {j: r.created_ms for j, r in loop.watcher.state.jobs.items()}
                job_started_ms = dict(loop.watcher.state.job_started_ms)
                first_doc_ms = dict(loop.watcher.state.first_doc_ms)
                routed_by_label = dict(loop.watcher.state.routed_by_label)
                docs = loop.watcher.state.docs
                dead = loop.watcher.state.dead_letters
                routed = len(loop.watcher.state.routed_ids)
        finally:
            loop.stop()
    # where the run was served and its dashboard: live again after the run with
    # --keep-serving (the same ports when free), else `explore_command` serves it
    addresses = {"serve_url": loop.serve_url, "dashboard_url": loop.dashboard_url}
    if on_stopped is not None:
        addresses.update(on_stopped(loop, interrupted) or {})
    report = summarise(plan, labels, expert_domains)
    waits = run_summary.time_to_expert(
        first_doc_ms,
        registrations,
        labels,
        list(plan.new_domains),
        job_created_ms,
        job_started_ms,
    )
    report.update(
        time_to_expert_s=waits,
        time_to_expert_p50_s=waits["p50_s"]["total_s"],
        time_to_expert_p95_s=waits["p95_s"]["total_s"],
        nmi=_final_nmi(plan),
        # each routed document's domain when it was routed (novel: one more cluster)
        nmi_as_routed=nmi_purity_of_counts(routed_by_label)[0] if routed_by_label else None,
        trainers=plan.trainers,
        rate_docs_per_s=plan.rate,
    )
    report.update(
        wall_s=round(time.monotonic() - started, 1),
        finished=finished,
        stream=stream_name(plan.stream),
        documents_fed=fed,
        documents=docs,
        all_accounted_for=docs + dead >= fed,
        dead_letters=dead,
        routed=routed,
        run_dir=str(plan.run_dir),
        keep_serving=plan.keep_serving and not interrupted,
        interrupted=interrupted,
        explore_command=explore_command(plan.run_dir),
    )
    report.update(addresses)
    atomic_write_json(plan.run_dir / "demo.json", report)
    print_summary(report, console, drift=drift, names=names)
    return report


def _final_nmi(plan: DemoPlan) -> float | None:
    """:func:`final_domains_nmi` of the plan's stream; None (logged) if it cannot be had."""
    env = {**os.environ, **plan.stage_env}
    try:
        return final_domains_nmi(plan.run_dir, demo_documents(plan), env)
    except Exception:  # a figure of the summary, not a reason to lose the others
        log.exception("the final domains' nmi failed")
        return None


def explore_command(run_dir: Path) -> str:
    """The one line that serves a finished run from its files (no broker)."""
    return f"worx serve --run {shlex.quote(str(run_dir))}"


def summarise(plan: DemoPlan, labels: dict[str, str], expert_domains: dict[str, str]) -> dict:
    history = MatrixHistory(plan.run_dir / "monitor")
    ours = history.rows("ours")
    dense = history.rows("dense_baseline")
    new = list(plan.new_domains)
    report: dict = {
        **run_summary.expert_counts(expert_domains, labels, new),
        "weight_forgetting": run_summary.weight_forgetting(ours),
        "max_old_domain_loss_rise": run_summary.max_old_domain_loss_rise(ours),
        "max_old_domain_loss_rise_at": run_summary.worst_old_domain_loss_rise(ours, labels),
        "baseline_max_old_domain_loss_rise": (
            run_summary.max_old_domain_loss_rise(dense) if dense else None
        ),
        "new_domains": run_summary.new_domain_perplexities(ours, labels, new),
        **run_summary.final_against_baseline(ours, dense, labels),
        "monitor_cpu_s_per_registration": run_summary.cpu_per_registration(ours),
        "baseline_cpu_s_per_registration": run_summary.cpu_per_registration(dense),
        "domains_discovered": len(labels),
        "domain_labels": labels,
    }
    try:
        from monitor.figures import build_state
        from monitor.report import write_report

        paths = write_report(build_state(history, labels=labels), plan.run_dir / "report")
        report["report"] = {name: str(path) for name, path in paths.items()}
    except Exception as exc:  # the figures above are the result; the plots are a view of them
        log.exception("writing the report failed")
        report["report_error"] = f"{type(exc).__name__}: {exc}"
    return report
