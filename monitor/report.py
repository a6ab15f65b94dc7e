"""`worx report`: a self-contained HTML page, PNG plots and the JSON of every figure.

The numbers come from :func:`monitor.figures.build_state`, the same dict the dashboard
shows, so the report and the live page never disagree.
"""

from __future__ import annotations

import base64
import html
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.plots import FIGURES
from worx.atomic import atomic_write_bytes, atomic_write_json

log = logging.getLogger(__name__)


def save_figure(build: Callable[[dict[str, Any]], Any], state: dict[str, Any], path: Path) -> None:
    """Draw one figure of ``state`` and write it as a PNG (all of it: see monitor.plots)."""
    import matplotlib.pyplot as plt

    fig = build(state)
    try:
        fig.savefig(path, dpi=130, facecolor="white")
    finally:
        plt.close(fig)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return html.escape(str(value))


def write_report(state: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write ``report.html`` (PNGs embedded), the PNGs and ``figures.json`` into ``out_dir``.

    Raises
    ------
    ValueError
        If the history has no evaluated row yet (nothing to report).
    """
    if not state["runs"].get("ours"):
        raise ValueError("no evaluation yet: run the monitor (or `worx monitor --evaluate`) first")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, build in FIGURES.items():
        save_figure(build, state, out / name)
        written[name] = out / name
    atomic_write_json(out / "figures.json", state)
    written["figures.json"] = out / "figures.json"
    images = "".join(
        f'<figure><img alt="{n}" src="data:image/png;base64,'
        f'{base64.b64encode((out / n).read_bytes()).decode()}"></figure>'
        for n in FIGURES
    )
    atomic_write_bytes(out / "report.html", _html(state, images).encode())
    written["report.html"] = out / "report.html"
    log.info("report written to %s", out)
    return written


def _matrix_html(run: dict[str, Any], title: str) -> str:
    head = "".join(f"<th>{html.escape(d)}</th>" for d in run.get("domain_names", run["domains"]))
    body = "".join(
        f"<tr><th>{s} {html.escape(lab)}</th>"
        + "".join(f"<td>{_fmt(v, 2)}</td>" for v in row)
        + "</tr>"
        for s, lab, row in zip(run["steps"], run["step_labels"], run["perplexity"], strict=True)
    )
    return f"<h3>{html.escape(title)}</h3><table><tr><th></th>{head}</tr>{body}</table>"


def _drift_html(state: dict[str, Any]) -> str:
    """Every drift event: what fired, on which domain, what it led to (monitor.drift_explain)."""
    drift = state.get("drift") or {}
    events = drift.get("events") or []
    if not events:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(e['fired'])}</td><td>{html.escape(e['domain'])}</td>"
        f'<td style="text-align:left">{html.escape(e["led_to"])}</td></tr>'
        for e in events
    )
    return (
        f"<h2>Drift events: {html.escape(drift.get('tally', ''))}</h2><table>"
        f"<tr><th>what fired</th><th>domain</th><th>what it led to</th></tr>{rows}</table>"
    )


def _html(state: dict[str, Any], images: str) -> str:
    h = state["headline"]
    when = datetime.fromtimestamp(state["generated_ms"] / 1000, tz=UTC).strftime(
        "%Y-%m-%d %H:%M UTC"
    )
    cards = [
        ("experts", h["experts"]),
        ("domains", h["domains"]),
        ("forgetting avg (ours)", _fmt(h["forgetting_avg"])),
        ("forgetting avg (dense)", _fmt(h["baseline_forgetting_avg"])),
        ("backward transfer (ours)", _fmt(h["backward_transfer"])),
        ("backward transfer (dense)", _fmt(h["baseline_backward_transfer"])),
        ("weight changes (must be 0)", h["weight_changes"]),
    ]
    card_html = "".join(f'<div class="card"><b>{v}</b><span>{k}</span></div>' for k, v in cards)
    titles = {"ours": "experts (ours)", "dense_baseline": "dense fine-tuning (baseline)"}
    tables = "".join(
        _matrix_html(run, titles.get(key, key)) for key, run in state["runs"].items() if run
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>TrainingWorx report</title>
<style>
body{{font:14px system-ui,sans-serif;color:#1f2937;max-width:1100px;margin:2em auto;padding:0 1em}}
.cards{{display:flex;gap:12px;flex-wrap:wrap}}
.card{{border:1px solid #e5e7eb;border-radius:8px;padding:10px 16px}}
.card b{{display:block;font-size:22px}}.card span{{color:#6b7280;font-size:12px}}
.tables{{display:flex;gap:32px;flex-wrap:wrap}}h3{{font-size:14px;margin:1em 0 0}}
table{{border-collapse:collapse;margin:0.5em 0 1em}}
td,th{{border-bottom:1px solid #e5e7eb;padding:4px 10px;text-align:right}}
img{{max-width:100%}}figure{{margin:1.5em 0}}</style></head><body>
<h1>TrainingWorx: forgetting report</h1><p style="color:#6b7280">generated {when}</p>
<div class="cards">{card_html}</div>
<h2>Held-out perplexity (row = step, column = domain)</h2>
<div class="tables">{tables}</div>
{images}
{_drift_html(state)}
<p style="color:#6b7280">Definitions: docs/monitor.md. All figures as JSON: figures.json.</p>
</body></html>"""
