"""Chaos and soak: the whole loop under a seeded fault schedule, against a fault-free run
of the same stream; prints ONE JSON line (docs/chaos.md).

Two runs of the demo's loop (the supervisor, every stage, the feed, on the embedded broker,
with configs/demo.toml's settings) over one labelled stream: the trunk's two domains, then
the new domains one after another, then a mixture where every domain recurs. The first run
has no fault; the second runs ``--faults-per-minute`` faults for ``--minutes`` (SIGKILL of
a stage, two at once, again during its recovery, SIGSTOP of a stage past the session
timeout, SIGSTOP of the broker), the feed paced over most of it. The schedule is printed
on stderr before the run; ``--seed`` reproduces it, ``--schedule FILE`` replays a printed one.

The line: ``faults_injected``, ``faults_by_kind``, ``docs_fed``, ``docs_routed``,
``docs_lost``, ``duplicate_experts``, ``invariant_violations`` (the fault-free comparison of
discover's domains included: the same labels found, and ``labels_nmi_vs_fault_free`` >= 0.99,
the NMI of the labels of the stream's documents' nearest domains in the two runs; beside
them ``domains_nmi_vs_fault_free`` and ``domain_counts_differ``), ``serve_availability``,
``time_to_expert_p50_s`` / ``_p95_s`` with ``fault_free_`` ones beside them,
``growth_per_10k_docs`` and ``unbounded``, ``wall_s``, ``new_domains``, ``seed``, the load
averages before and after.

Usage::

    python bench/chaos.py [--minutes 10] [--seed 0] [--faults-per-minute 4] [--no-faults]
                          [--schedule FILE] [--out DIR] [--trunk DIR] [--serve-replicas 3]
                          [--corpus many --new-domains a,b,...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experts.default_trunk import default_trunk_dir  # noqa: E402
from topology.chaos.agreement import agreement, stream_texts  # noqa: E402
from topology.chaos.invariants import (  # noqa: E402
    decisions_not_once,
    domains_differ,
    labels_differ,
)
from topology.chaos.run import (  # noqa: E402
    ChaosPlan,
    discover_decisions,
    run_chaos,
    soak_figures,
)
from topology.chaos.sampler import Sample  # noqa: E402
from topology.chaos.schedule import (  # noqa: E402
    ScheduleShape,
    chaos_schedule,
    read_schedule,
    schedule_json,
    stage_names,
)
from topology.commands.demo import choose_domains, demo_stage_defaults  # noqa: E402
from topology.loop.demo_run import DemoPlan  # noqa: E402

MIN_AVAILABILITY = 0.99
MIN_LABELS_NMI = 0.99  # the stream's documents' nearest domains' labels, the two runs
RUNS = ("chaos", "fault-free")  # the two run directories of a bench
KEPT_FAULT_FREE = ("time_to_expert_p50_s", "time_to_expert_p95_s", "time_to_expert_s", "wall_s")


def stream_plan(args: argparse.Namespace, run_dir: Path) -> DemoPlan:
    """The stream of both runs: the demo's, longer with --minutes (its mixture grows), on
    --corpus's domains (--new-domains of them) when given."""
    plan = DemoPlan(
        run_dir=run_dir,
        trunk_dir=Path(args.trunk or default_trunk_dir()).resolve(),
        per_domain=args.per_domain,
        mixture_docs=args.mixture_docs or int(150 * args.minutes),
        seed=args.seed,
        stage_env={k: v for k, v in demo_stage_defaults().items() if k not in os.environ},
        timeout_s=args.minutes * 60 + 1200,
        serve_replicas=args.serve_replicas,
    )
    choose_domains(plan, args.corpus, None, args.new_domains or None)
    return plan


def compare(report: dict, fault_free: dict, root: Path) -> None:
    """The checks that need both runs (``root``'s :data:`RUNS`), added to the chaos run's
    ``report``."""
    ours, theirs = report["domain_labels"], fault_free["domain_labels"]
    report["invariant_violations"] += labels_differ(ours, theirs)
    # how many domains one kind got moves with the order discover reads documents in, and
    # that order moves with timing in any run (two fault-free runs differ too: docs/chaos.md)
    report["domain_counts_differ"] = domains_differ(ours, theirs)
    texts = stream_texts(root / RUNS[1] / "stream.jsonl")  # the same stream in both runs
    tables = [root / run / "domains.json" for run in RUNS]
    agree = agreement(texts, *tables)
    report["domains_nmi_vs_fault_free"] = agree["domains_nmi"]
    report["labels_nmi_vs_fault_free"] = agree["labels_nmi"]
    nmi = agree["labels_nmi"]
    if nmi is None or nmi < MIN_LABELS_NMI:
        report["invariant_violations"].append(
            f"documents reach the fault-free run's kinds at NMI {nmi} < {MIN_LABELS_NMI}"
        )
    if (report["serve_availability"] or 0) < MIN_AVAILABILITY:
        report["invariant_violations"].append(
            f"serve availability {report['serve_availability']} < {MIN_AVAILABILITY}"
        )
    for key in KEPT_FAULT_FREE:
        report[f"fault_free_{key}"] = fault_free[key]
    report["fault_free_invariant_violations"] = fault_free["invariant_violations"]


def recheck(root: Path) -> None:
    """Print the line of a finished bench's two runs again, its soak figures (from each
    run's samples) and the comparison of the two runs made by this code."""
    report, fault_free = (json.loads((root / run / "chaos.json").read_text()) for run in RUNS)
    for run, line in zip(RUNS, (report, fault_free), strict=True):
        with open(root / run / "samples.jsonl", encoding="utf-8") as lines:
            samples = [Sample(**json.loads(body)) for body in lines]
        line.update(soak_figures(samples, int(ChaosPlan.warmup_share * line["docs_fed"])))
        if "discover_decisions" not in line:  # a line of a harness before that check
            line["discover_decisions"] = discover_decisions(root / run)
            line["invariant_violations"] += decisions_not_once(
                line["discover_decisions"], line["docs_routed"]
            )
    compare(report, fault_free, root)
    report["run_dir"] = str(root)
    print(json.dumps(report), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="the faults' window")
    parser.add_argument("--seed", type=int, default=0, help="the schedule's and the stream's")
    parser.add_argument("--faults-per-minute", type=float, default=4.0)
    parser.add_argument("--no-faults", action="store_true", help="the fault-free run only")
    parser.add_argument("--schedule", help="replay this printed schedule (a JSON list)")
    parser.add_argument("--broker-pause-max", type=float, default=60.0, help="seconds")
    parser.add_argument("--per-domain", type=int, default=320)
    parser.add_argument("--mixture-docs", type=int, help="default: 150 per minute")
    parser.add_argument("--trunk", help="default: the bundled trunk")
    parser.add_argument("--corpus", help="labelled corpus directory or preset (as worx demo's)")
    parser.add_argument("--new-domains", help="comma-separated: the stream's new domains")
    parser.add_argument(
        "--serve-replicas",
        type=int,
        default=3,
        help="serve processes behind the loop's front, each a target of its own (default 3: "
        "with 2, a fault of one while the other restarts is an outage; 1: every restart is)",
    )
    parser.add_argument("--out", default="worx-chaos", help="parent of the run directories")
    parser.add_argument(
        "--recheck",
        type=Path,
        metavar="RUN_DIR",
        help="run nothing: a finished bench's line again (chaos-*/), with its soak figures "
        "and the comparison of its two runs made by this code",
    )
    args = parser.parse_args()
    if args.recheck:
        recheck(args.recheck.resolve())
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    load_before = os.getloadavg()
    root = (Path(args.out) / time.strftime("chaos-%Y%m%d-%H%M%S")).resolve()
    feed_s = 0.6 * args.minutes * 60

    fault_free = run_chaos(
        ChaosPlan(stream_plan(args, root / "fault-free"), seed=args.seed, feed_seconds=feed_s)
    )
    if args.no_faults:
        fault_free["loadavg"] = [list(load_before), list(os.getloadavg())]
        print(json.dumps(fault_free), flush=True)
        return
    if args.schedule:
        faults = read_schedule(Path(args.schedule).read_text())
    else:
        shape = ScheduleShape(
            args.minutes * 60,
            args.faults_per_minute,
            broker_pause_max_s=args.broker_pause_max,
            stages=stage_names(args.serve_replicas),
        )
        faults = chaos_schedule(args.seed, shape)
    print(f"chaos schedule (seed {args.seed}): {schedule_json(faults)}", file=sys.stderr)
    plan = ChaosPlan(stream_plan(args, root / "chaos"), faults, args.seed, feed_seconds=feed_s)
    report = run_chaos(plan)
    compare(report, fault_free, root)
    report["minutes"] = args.minutes
    report["serve_replicas"] = args.serve_replicas
    report["run_dir"] = str(root)
    report["loadavg"] = [list(load_before), list(os.getloadavg())]
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
