"""`worx report`: a self-contained HTML report, PNG plots and the JSON of every figure."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write report.html, PNG plots and figures.json from the monitor's history",
        description="Read the monitor's history (<state-dir>/history.json) and write, into "
        "--out (domains named by <state-dir>/domain_labels.json where known): "
        "report.html (self-contained: plots embedded), heatmap.png (the evaluation "
        "matrix, ours beside the dense baseline), perplexity.png (per domain over time, "
        "expert arrivals marked), forgetting.png (ours vs dense), timeline.png (experts "
        "and training) and figures.json (every number the plots show).",
    )
    parser.add_argument("--state-dir", help="monitor state (default: <data_dir>/monitor)")
    parser.add_argument("--out", help="output folder (default: <state-dir>/report)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from monitor.figures import build_state
    from monitor.history import MatrixHistory
    from monitor.labels import load_labels
    from monitor.live import LiveState
    from monitor.report import write_report
    from topology.composition.paths import STATE_HINT, existing_dir, monitor_state_dir
    from topology.composition.worx_config import load_config
    from worx.errors import UserError

    config = load_config(args.config)
    root = existing_dir(
        monitor_state_dir(config, args.state_dir), "monitor state directory", STATE_HINT
    )
    if not (root / "history.json").exists():
        raise UserError(
            f"no history in {root}", "run `worx monitor` first, or pass --state-dir DIR"
        )
    live = LiveState(root / "live.json").snapshot() if (root / "live.json").exists() else {}
    try:
        labels = load_labels(root)  # domain id -> name, kept by `worx monitor`
    except ValueError as exc:
        print(f"worx report: {exc}", file=sys.stderr)
        return 2
    state = build_state(MatrixHistory(root), live, labels=labels)
    out = Path(args.out) if args.out else root / "report"
    for name, path in write_report(state, out).items():
        print(f"{name}\t{path}")
    return 0
