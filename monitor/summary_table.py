"""The demo's end-of-run summary as a person reads it: a table of rounded figures with what
each means, the new domains before and after their expert, the report's files, the serve
and dashboard addresses, and every drift event with what it led to.

The figures are :mod:`monitor.run_summary`'s (the ``demo.json`` keys); drift events and
job outcomes are read from the run's monitor state (``live.json``, ``jobs.json``), so a
finished run directory prints the same summary as the run that made it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table

from monitor.drift_explain import explain, tally

log = logging.getLogger(__name__)

# (figure key, what a person reads, how to show the value)
SUMMARY_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("wall_s", "wall time", "seconds"),
    ("documents", "documents ingested", "int"),
    ("dead_letters", "dead letters (malformed lines, with reasons)", "int"),
    ("domains_discovered", "domains discovered", "int"),
    ("nmi", "discovered domains against the labels (NMI, final table)", "score"),
    ("nmi_as_routed", "... as route decided when each document came", "score"),
    ("experts", "experts registered", "int"),
    ("new_domains_with_expert", "new domains with their expert", "int"),
    ("spurious_experts", "spurious experts (a 2nd for one label, or unlabelled)", "int"),
    ("old_domain_experts", "experts for the trunk's own domains (passed the gate)", "int"),
    ("weight_forgetting", "trunk/expert tensors changed (must be 0)", "int"),
    ("max_old_domain_loss_rise", "worst loss rise of an old domain, ours", "percent"),
    ("max_old_domain_loss_rise_at", "... which domain, when, where its documents went", "rise_at"),
    ("baseline_max_old_domain_loss_rise", "worst loss rise of an old domain, dense", "percent"),
    ("ppl_geomean_final", "final perplexity, geometric mean, ours", "ppl"),
    ("baseline_ppl_geomean_final", "final perplexity, geometric mean, dense", "ppl"),
    ("ppl_geomean_final_over_baseline", "ours / dense (lower is better)", "ratio"),
    ("domains_dense_better", "domains where dense ends lower", "list"),
    ("monitor_cpu_s_per_registration", "monitor CPU per registration, ours", "cpu"),
    ("baseline_cpu_s_per_registration", "monitor CPU per registration, dense", "cpu"),
    ("time_to_expert_s", "first document of a new kind -> its expert serving", "wait_total_s"),
    ("time_to_expert_s", "... of which until discover asked for a job", "wait_detect_s"),
    ("time_to_expert_s", "... of which the job queued for a trainer", "wait_queue_s"),
    ("time_to_expert_s", "... of which training (and the quality gate)", "wait_train_s"),
    ("trainers", "trainer processes", "int"),
)


def format_figure(value: object, kind: str) -> str:
    """A figure rounded for reading: ``477.0`` s -> ``"7 min 57 s"``, 0.6375 -> ``"63.7%"``."""
    if value is None:
        return "-"
    if kind == "cpu":  # run_summary.cpu_per_registration
        first, last = value["first_ten_mean"], value["last_ten_mean"]  # type: ignore[index]
        return f"{first:.2f} s first 10, {last:.2f} s last 10"
    if kind.startswith("wait_"):  # run_summary.time_to_expert: one part's percentiles
        part = kind.removeprefix("wait_")
        p50, p95 = value["p50_s"][part], value["p95_s"][part]  # type: ignore[index]
        if p50 is None:
            return "no new kind got an expert" if part == "total_s" else "-"
        return f"p50 {format_figure(p50, 'seconds')}, p95 {format_figure(p95, 'seconds')}"
    if kind == "rise_at":  # run_summary.worst_old_domain_loss_rise
        moved = ", ".join(f"{n} to {where}" for where, n in value["moved"].items())  # type: ignore[index]
        return (
            f"{value['domain']} at step {value['step']} ({value['arrived']}'s expert): "  # type: ignore[index]
            f"{moved or 'where its documents went was not recorded'}"
        )
    if kind == "score":
        return f"{value:.3f}"
    if kind == "list":
        return ", ".join(str(v) for v in value) if value else "none"  # type: ignore[union-attr]
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, int | float) or not math.isfinite(value):
        return str(value)
    if kind == "seconds":
        minutes, seconds = divmod(round(value), 60)
        return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    if kind == "percent":
        return f"{100 * value:.1f}%"
    if kind == "ratio":
        return f"{value:.2f}x"
    if kind == "ppl":
        return f"{value:,.1f}"
    return f"{round(value):,}"


def figures_table(report: Mapping[str, Any]) -> Table:
    """The whole-run figures, one row each: what it is, its rounded value, its key."""
    table = Table(title="worx demo: summary", title_justify="left", show_edge=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("key (demo.json)", style="dim")
    for key, meaning, kind in SUMMARY_FIGURES:
        if key in report:
            table.add_row(meaning, format_figure(report[key], kind), key)
    return table


def new_domains_table(report: Mapping[str, Any]) -> Table | None:
    """Held-out perplexity of each new domain: trunk alone, then with its expert."""
    new = report.get("new_domains") or {}
    if not new:
        return None
    table = Table(title="new domains: held-out perplexity", title_justify="left", show_edge=False)
    for column in ("domain", "trunk alone", "final", "reduction"):
        table.add_column(column, justify="left" if column == "domain" else "right")
    for label, fig in sorted(new.items()):
        trunk, final, cut = fig.get("ppl_trunk"), fig.get("ppl_final"), fig.get("ppl_reduction")
        if trunk is None or final is None:
            table.add_row(label, "not evaluated", "", "")
            continue
        table.add_row(
            label,
            format_figure(trunk, "ppl"),
            format_figure(final, "ppl"),
            format_figure(cut, "percent"),
        )
    return table


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.debug("%s not read: %s", path, exc)
        return None


def saved_drift(monitor_dir: Path) -> tuple[list, list, dict]:
    """The drift events, jobs and latest job statuses the monitor saved in ``monitor_dir``
    (``live.json``, ``jobs.json``); empty where absent."""
    live = _read_json(monitor_dir / "live.json") or {}
    jobs = list((_read_json(monitor_dir / "jobs.json") or {}).values())
    return list(live.get("drift") or []), jobs, dict(live.get("jobs") or {})


def drift_table(
    events: list, jobs: list, statuses: Mapping[str, Any], names: Mapping[str, str]
) -> Table | None:
    """Every drift event and what it led to (records or their dicts; see drift_explain)."""
    if not events:
        return None
    table = Table(title=f"drift events: {tally(events)}", title_justify="left", show_edge=False)
    table.add_column("what fired", no_wrap=True)
    table.add_column("domain", overflow="fold")
    table.add_column("what it led to", overflow="fold", ratio=1)
    for item in explain(events, jobs, statuses, names):
        table.add_row(item.fired, item.domain, item.led_to)
    return table


def summary(
    report: Mapping[str, Any],
    drift: tuple[list, list, Mapping[str, Any]] | None = None,
    names: Mapping[str, str] | None = None,
) -> Group:
    """The whole printed summary of a demo ``report`` (the ``demo.json`` dict).

    ``drift`` is ``(events, jobs, statuses)`` as the caller saw them (e.g. the loop
    watcher's, which is never behind); None reads what the monitor saved in the run
    directory (:func:`saved_drift`). ``names``: domain id -> name (default: the report's
    ``domain_labels``).
    """
    parts: list[Any] = [figures_table(report)]
    new = new_domains_table(report)
    if new is not None:
        parts.append(new)
    run_dir = report.get("run_dir")
    if drift is None and run_dir:
        drift = saved_drift(Path(run_dir) / "monitor")
    if drift is not None:
        names = names if names is not None else (report.get("domain_labels") or {})
        table = drift_table(*drift, names=names)
        if table is not None:
            parts.append(table)
    files = report.get("report") or {}
    if isinstance(files, Mapping) and files:
        ordered = sorted(files.items(), key=lambda kv: (kv[0] != "report.html", kv[0]))
        parts.append("[bold]report[/]:")
        parts.extend(f"  {name:<16} {path}" for name, path in ordered)
    if report.get("report_error"):
        parts.append(f"[red]report not written[/]: {report['report_error']}")
    parts.extend(_addresses(report))
    return Group(*parts)


def _addresses(report: Mapping[str, Any]) -> list[str]:
    """Where the run is served, or was (and the one command that serves it again)."""
    urls = [
        (what, report.get(key))
        for key, what in (("serve_url", "serve"), ("dashboard_url", "dashboard"))
    ]
    urls = [(what, url) for what, url in urls if url]
    if report.get("keep_serving"):
        lines = [f"[bold]{what}[/]: {url}" for what, url in urls]
        return [*lines, "still serving the finished run: Ctrl-C stops"] if lines else []
    lines = [f"{what} was: {url} (stopped with the demo)" for what, url in urls]
    if report.get("explore_command"):
        lines.append(f"[bold]explore the finished run[/]: {report['explore_command']}")
    return lines


def print_summary(
    report: Mapping[str, Any],
    console: Console | None = None,
    drift: tuple[list, list, Mapping[str, Any]] | None = None,
    names: Mapping[str, str] | None = None,
) -> None:
    """Print :func:`summary` (same arguments) on ``console``."""
    (console or Console()).print(summary(report, drift, names))
