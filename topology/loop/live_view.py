"""Terminal view of the running loop (rich): stream rates, domains, jobs, experts, forgetting.

Rates are counted over a sliding window (:class:`WindowRate`), so they fall to 0 once the
stream stops, instead of averaging over the whole run. Domains are shown by their name
(:func:`router.naming.display_name`), long outcomes wrap, the serve and dashboard
addresses are shown, and drift events are told with what they led to
(:mod:`monitor.drift_explain`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rich.console import Group
from rich.panel import Panel
from rich.table import Table

from monitor.compact import COMPACT_DOMAINS
from monitor.drift_explain import explain, outcome, tally
from monitor.run_summary import old_domain_loss_rises
from router.naming import display_name
from topology.loop.watcher import LoopState
from trainer.records import ACTIVE_STATES

RATE_WINDOW_S = 10.0
DRIFT_ROWS = 6  # latest drift events shown (all of them are in the summary)
# rows of the domains, jobs and (beyond COMPACT_DOMAINS) forgetting panels, so that a run of
# 50 domains fits a screen: the latest domains, the running and queued jobs first, the
# domains that lost most first; the panel's title counts the rest
LIST_ROWS = 12
ID_SHOWN = 12  # characters of a job or expert id ("exp-" and 8 hex), as the timeline shows


class WindowRate:
    """Per-second rate of a running count over the last ``window_s`` seconds.

    Each :meth:`update` samples the count; the rate is the change since the oldest sample
    still inside the window (or the one just before it), so it falls to 0 within
    ``window_s`` of the count standing still.

    >>> now = [0.0]
    >>> rate = WindowRate(window_s=10.0, clock=lambda: now[0])
    >>> for t, count in ((0, 0), (5, 500), (10, 1000)):
    ...     now[0] = t
    ...     _ = rate.update(count)
    >>> rate.update(1000)
    100.0
    >>> now[0] = 25.0
    >>> rate.update(1000)
    0.0
    """

    def __init__(
        self, window_s: float = RATE_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ):
        self.window_s = window_s
        self.clock = clock
        self._samples: deque[tuple[float, int]] = deque()  # (time, count), oldest first

    def update(self, count: int) -> float:
        now = self.clock()
        self._samples.append((now, count))
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()
        then, before = self._samples[0]
        if now - then <= 0:
            return 0.0
        return max(count - before, 0) / (now - then)


class LiveView:
    """What :func:`topology.loop.orchestrate.watch_live` shows, re-rendered on every change."""

    def __init__(
        self,
        started: float,
        dashboard_url: str | None = None,
        serve_url: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = RATE_WINDOW_S,
    ) -> None:
        self.started = started
        self.dashboard_url = dashboard_url
        self.serve_url = serve_url
        self.clock = clock
        self.docs_rate = WindowRate(window_s, clock)
        self.routed_rate = WindowRate(window_s, clock)

    def render(self, state: LoopState, stages: dict[str, str]) -> Group:
        elapsed = self.clock() - self.started
        head = Table.grid(padding=(0, 3))
        head.add_row(
            f"[bold]elapsed[/] {elapsed:5.0f}s",
            f"[bold]docs[/] {state.docs} ({self.docs_rate.update(state.docs):.0f}/s)",
            f"[bold]routed[/] {state.routed} ({self.routed_rate.update(state.routed):.0f}/s, "
            f"novel {state.novel})",
            f"[bold]dead letters[/] {state.dead_letters}",
        )
        stage_line = "  ".join(
            f"{name}:[{'green' if status == 'up' else 'red'}]{status}[/]"
            for name, status in stages.items()
        )
        parts: list = [head, stage_line]
        for what, url in (("serve", self.serve_url), ("dashboard", self.dashboard_url)):
            if url:
                parts.append(f"{what}: [link={url}]{url}[/link]")
        parts.append(_domains(state))
        parts.append(_jobs(state))
        if state.drift_events:
            parts.append(_drift(state))
        if state.latest_eval() is not None:
            parts.append(_forgetting(state))
        return Group(*parts)


def _names(state: LoopState) -> dict[str, str]:
    return {d: display_name(r) for d, r in state.domains.items()}


def _domains(state: LoopState) -> Panel:
    table = Table(expand=True, show_edge=False)
    table.add_column("domain", no_wrap=True)
    table.add_column("name", overflow="fold")
    for column in ("size", "cohesion", "threshold"):
        table.add_column(column, justify="right")
    table.add_column("experts", overflow="fold")
    records = list(state.domains.values())
    for record in records[-LIST_ROWS:]:  # the most recently changed last
        table.add_row(
            record.domain_id,
            display_name(record) if display_name(record) != record.domain_id else "",
            str(record.size),
            f"{record.cohesion:.2f}",
            f"{record.threshold:.2f}",
            ", ".join(expert_id[:ID_SHOWN] for expert_id in record.expert_ids) or "-",
        )
    shown = f" (latest {LIST_ROWS} shown)" if len(records) > LIST_ROWS else ""
    return Panel(table, title=f"domains discovered: {len(records)}{shown}")


def _jobs(state: LoopState) -> Panel:
    names = _names(state)
    table = Table(expand=True, show_edge=False)
    table.add_column("job", no_wrap=True)
    table.add_column("domain", overflow="fold", ratio=1)
    table.add_column("reason", overflow="fold")
    table.add_column("state", overflow="fold", max_width=12)  # step and loss as it trains
    # the outcome takes twice the domain's share of the width left, so that it stays
    # readable at 80 columns too (a piped run's final view); it wraps by words
    table.add_column("outcome", overflow="fold", ratio=2)
    for job_id, job in _jobs_shown(state):
        status = state.job_status.get(job_id)
        table.add_row(
            job_id[:ID_SHOWN],
            names.get(job.domain_id, job.domain_id),
            job.reason,
            _job_state(status),
            outcome(status, ID_SHOWN) if status and status.state not in ACTIVE_STATES else "",
        )
    title = f"training jobs: {len(state.jobs)}   experts registered: {len(state.experts)}"
    if len(state.jobs) > LIST_ROWS:
        title += f"   ({len(state.pending_jobs())} queued or running first, then the latest)"
    return Panel(table, title=title)


def _job_state(status) -> str:
    if status is None:
        return "queued"
    if status.state not in ACTIVE_STATES or not status.total_steps:
        return status.state
    loss = f", loss {status.loss:.3f}" if status.loss is not None else ""
    return f"{status.state} {status.step}/{status.total_steps}{loss}"


def _jobs_shown(state: LoopState) -> list:
    """At most LIST_ROWS jobs: those queued or running, then the latest to end, in order."""
    pending = state.pending_jobs()
    ended = [job_id for job_id in state.jobs if job_id not in set(pending)]
    room = max(0, LIST_ROWS - len(pending))
    keep = set(pending[:LIST_ROWS]) | set(ended[len(ended) - room :])
    return [(job_id, job) for job_id, job in state.jobs.items() if job_id in keep]


def _drift(state: LoopState) -> Panel:
    events = list(state.drift_events)
    told = explain(events, state.jobs.values(), state.job_status, _names(state))
    table = Table(expand=True, show_edge=False, show_header=False)
    table.add_column("what fired", no_wrap=True)
    table.add_column("domain", overflow="fold")
    table.add_column("what it led to", overflow="fold", ratio=1)
    for item in told[-DRIFT_ROWS:]:
        table.add_row(item.fired, item.domain, item.led_to)
    shown = f" (latest {DRIFT_ROWS})" if len(told) > DRIFT_ROWS else ""
    return Panel(table, title=f"drift events: {tally(events)}{shown}")


def _forgetting(state: LoopState) -> Panel:
    rows = sorted(
        (row for (run, _), row in state.eval_rows.items() if run == "ours"), key=lambda r: r.step
    )
    domains = sorted({d for row in rows for d in row.loss})
    names = _names(state)
    labels = {d: names.get(d, d) for d in domains}
    if len(domains) > COMPACT_DOMAINS:
        return _forgetting_worst_first(rows, domains, labels)
    table = Table(expand=True, show_edge=False)
    table.add_column("step")
    for domain in domains:
        table.add_column(labels[domain], justify="right", overflow="fold")
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


def _forgetting_worst_first(rows: list, domains: list[str], labels: dict[str, str]) -> Panel:
    """Many domains: one row per domain (not a column), the LIST_ROWS that lost most first:
    perplexity under the trunk alone (row 0) and now, and the worst loss rise since it was
    old (monitor.run_summary.old_domain_loss_rises, the summary's figure)."""
    rises = old_domain_loss_rises(rows)
    first = {d: next(r.perplexity[d] for r in rows if d in r.perplexity) for d in domains}
    latest = rows[-1]
    order = sorted(domains, key=lambda d: (-rises.get(d, 0.0), labels[d]))
    table = Table(expand=True, show_edge=False)
    table.add_column("domain", overflow="fold")
    for column in ("first ppl", "ppl now", "worst loss rise"):
        table.add_column(column, justify="right")
    for domain in order[:LIST_ROWS]:
        now = latest.perplexity.get(domain)
        table.add_row(
            labels[domain],
            f"{first[domain]:.1f}",
            "" if now is None else f"{now:.1f}",
            f"{100 * rises.get(domain, 0.0):.2f}%",
        )
    changed = sum(len(r.weight_changes) for r in rows)
    rest = len(domains) - min(len(domains), LIST_ROWS)
    return Panel(
        table,
        title=f"held-out perplexity of {len(domains)} domains after step {latest.step}, "
        f"the {min(len(domains), LIST_ROWS)} that lost most first ({rest} more)   "
        f"weights changed: {changed}",
    )
