"""Terminal view of the running loop (rich): stream rates, domains, jobs, experts, forgetting."""

from __future__ import annotations

import time

from rich.console import Group
from rich.panel import Panel
from rich.table import Table

from topology.watch import LoopState


def render(
    state: LoopState, started: float, dashboard_url: str | None, stages: dict[str, str]
) -> Group:
    elapsed = time.monotonic() - started
    head = Table.grid(padding=(0, 3))
    head.add_row(
        f"[bold]elapsed[/] {elapsed:5.0f}s",
        f"[bold]docs[/] {state.docs} ({state.docs_per_s():.0f}/s)",
        f"[bold]routed[/] {state.routed} (novel {state.novel})",
        f"[bold]dead letters[/] {state.dead_letters}",
        f"[bold]drift events[/] {len(state.drift_events)}",
    )
    stage_line = "  ".join(
        f"{name}:[{'green' if status == 'up' else 'red'}]{status}[/]"
        for name, status in stages.items()
    )
    parts = [head, stage_line]
    if dashboard_url:
        parts.append(f"dashboard: [link={dashboard_url}]{dashboard_url}[/link]")
    parts.append(_domains(state))
    parts.append(_jobs(state))
    latest = state.latest_eval()
    if latest is not None:
        parts.append(_forgetting(state))
    return Group(*parts)


def _domains(state: LoopState) -> Panel:
    table = Table(expand=True, show_edge=False)
    for column in ("domain", "label (majority)", "size", "cohesion", "threshold", "experts"):
        table.add_column(column)
    for record in state.domains.values():
        table.add_row(
            record.domain_id,
            record.label_hint or "",
            str(record.size),
            f"{record.cohesion:.2f}",
            f"{record.threshold:.2f}",
            ", ".join(record.expert_ids) or "-",
        )
    return Panel(table, title=f"domains discovered: {len(state.domains)}")


def _jobs(state: LoopState) -> Panel:
    table = Table(expand=True, show_edge=False)
    for column in ("job", "domain", "reason", "state", "step", "loss", "outcome"):
        table.add_column(column)
    for job_id, job in state.jobs.items():
        status = state.job_status.get(job_id)
        outcome = ""
        if status is not None:
            outcome = status.expert_id or status.reason
        table.add_row(
            job_id[:16],
            job.domain_id,
            job.reason,
            status.state if status else "queued",
            f"{status.step}/{status.total_steps}" if status else "",
            f"{status.loss:.3f}" if status and status.loss is not None else "",
            outcome[:40],
        )
    return Panel(
        table, title=f"training jobs: {len(state.jobs)}   experts registered: {len(state.experts)}"
    )


def _forgetting(state: LoopState) -> Panel:
    rows = sorted(
        (row for (run, _), row in state.eval_rows.items() if run == "ours"), key=lambda r: r.step
    )
    domains = sorted({d for row in rows for d in row.loss})
    labels = {d: (state.domains[d].label_hint or d) if d in state.domains else d for d in domains}
    table = Table(expand=True, show_edge=False)
    table.add_column("step")
    for domain in domains:
        table.add_column(labels[domain][:14], justify="right")
    table.add_column("weights changed", justify="right")
    for row in rows:
        arrived = (
            labels.get(row.arrived_domain, row.arrived_domain) if row.arrived_domain else "trunk"
        )
        table.add_row(
            f"{row.step} {arrived}",
            *(f"{row.perplexity[d]:.1f}" if d in row.perplexity else "" for d in domains),
            str(len(row.weight_changes)),
        )
    return Panel(
        table, title="held-out perplexity per domain after each registration (row 0: trunk alone)"
    )
