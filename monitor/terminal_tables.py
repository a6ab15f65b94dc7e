"""`worx monitor --once`: the matrix and the metrics as rich tables in the terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table

NAMES = {"ours": "experts (ours)", "dense_baseline": "dense fine-tuning (baseline)"}


def _f(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def matrix_table(run: dict[str, Any], title: str) -> Table:
    table = Table(
        title=f"{title}: held-out perplexity (row = step, column = domain)", title_justify="left"
    )
    table.add_column("step", justify="right")
    table.add_column("arrived")
    for name in run.get("domain_names", run["domains"]):
        table.add_column(escape(name), justify="right")  # a label is text, not markup
    for i, step in enumerate(run["steps"]):
        cells = []
        for j, ppl in enumerate(run["perplexity"][i]):
            if ppl is None:
                cells.append("–")
                continue
            delta = run["forgetting_matrix"][i][j]  # vs the best earlier step
            style = "" if delta is None or abs(delta) < 1e-9 else ("green" if delta < 0 else "red")
            text = f"{ppl:.2f}"
            if run["arrivals"][j] == step:
                text = f"[bold]{text}*[/bold]"
            cells.append(f"[{style}]{text}[/{style}]" if style else text)
        table.add_row(str(step), run["experts"][i] or "trunk alone", *cells)
    table.caption = (
        "* = the domain's own expert arrived at this step; "
        "red/green = loss above/below the domain's best earlier step (forgotten/improved)"
    )
    return table


def metrics_table(state: dict[str, Any]) -> Table:
    table = Table(
        title="forgetting and transfer at the latest step (nats/token)", title_justify="left"
    )
    table.add_column("metric")
    runs = [k for k, v in state["runs"].items() if v]
    for key in runs:
        table.add_column(NAMES.get(key, key), justify="right")

    def row(label: str, getter: Any) -> None:
        table.add_row(label, *[getter(state["runs"][k]) for k in runs])

    row("forgetting, average (learned domains)", lambda r: _f(r["forgetting_avg"][-1]))
    row("forgetting, max", lambda r: _f(r["forgetting_max"][-1]))
    row("forgetting, average (all domains)", lambda r: _f(r["forgetting_all_avg"][-1]))
    row("relative perplexity rise, max", lambda r: _f(r["relative_ppl_change_max"][-1]))
    row("backward transfer (>= 0: nothing lost)", lambda r: _f(r["backward_transfer"][-1]))
    row("forward transfer, average", lambda r: _f(r["forward_transfer_avg"]))
    row("weight changes at the latest step", lambda r: str(len(r["weight_changes"][-1])))

    def rerouted(run: dict[str, Any]) -> str:
        names = dict(zip(run["domains"], run.get("domain_names", run["domains"]), strict=True))
        shares = run["routing_changed"][-1].items()
        text = ", ".join(f"{names.get(d, d)} {100 * v:.0f}%" for d, v in shares if v)
        return escape(text) or "none"

    row("re-routed held-out docs (latest step)", rerouted)
    return table


def render(state: dict[str, Any]) -> Group:
    parts: list[Any] = []
    for key, run in state["runs"].items():
        if run:
            parts.append(matrix_table(run, NAMES.get(key, key)))
    if not parts:
        return Group("[yellow]no evaluation yet[/yellow]: the history is empty")
    parts.append(metrics_table(state))
    changes = state["runs"]["ours"]["weight_changes"][-1] if state["runs"]["ours"] else []
    if changes:
        parts.append(f"[bold red]WEIGHT FORGETTING[/bold red]: {len(changes)} problems")
        parts.extend(f"  {c}" for c in changes[:20])
    return Group(*parts)
