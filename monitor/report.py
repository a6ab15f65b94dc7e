"""`worx report`: a self-contained HTML page, PNG plots and the JSON of every figure.

The numbers come from :func:`monitor.figures.build_state`, the same dict the dashboard
shows, so the report and the live page never disagree.
"""

from __future__ import annotations

import base64
import html
import logging
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402

from worx.atomic import atomic_write_bytes, atomic_write_json  # noqa: E402

log = logging.getLogger(__name__)

PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d"]
INK = "#1f2937"
MUTED = "#6b7280"


def _style(ax: Any, title: str) -> None:
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold", color=INK, pad=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#d1d5db")
    ax.tick_params(colors=MUTED, labelsize=9)
    ax.grid(axis="y", color="#f3f4f6", linewidth=1)
    ax.set_axisbelow(True)


def _delta(run: dict[str, Any]) -> list[list[float]]:
    """Loss minus the best earlier loss, ``(steps, domains)``; NaN where undefined (row 0)."""
    return [[math.nan if v is None else v for v in row] for row in run["forgetting_matrix"]]


def _heatmap(ax: Any, run: dict[str, Any], title: str, span: float) -> None:
    delta = _delta(run)
    image = ax.imshow(
        delta, cmap="RdYlGn_r", norm=TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span), aspect="auto"
    )
    names = run.get("domain_names", run["domains"])
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(
        range(len(run["steps"])),
        [f"{s}  {lab}" for s, lab in zip(run["steps"], run["step_labels"], strict=True)],
    )
    for i, row in enumerate(run["perplexity"]):
        for j, ppl in enumerate(row):
            if ppl is not None:
                strong = not math.isnan(delta[i][j]) and abs(delta[i][j]) > 0.6 * span
                ax.text(
                    j,
                    i,
                    f"{ppl:.1f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if strong else INK,
                )
    for j, arrived in enumerate(run["arrivals"]):
        if arrived is not None:
            ax.add_patch(plt.Rectangle((j - 0.5, arrived - 0.5), 1, 1, fill=False, lw=2, ec=INK))
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold", color=INK, pad=10)
    ax.tick_params(colors=MUTED, labelsize=9, length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    bar = plt.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    bar.set_label("loss change vs best earlier step (nats/token)", color=MUTED, fontsize=8)
    bar.ax.tick_params(labelsize=8, colors=MUTED)


def plot_heatmap(state: dict[str, Any], path: Path) -> None:
    runs = [(k, v) for k, v in state["runs"].items() if v]
    fig, axes = plt.subplots(
        1, len(runs), figsize=(6.2 * len(runs), 0.45 * max(len(v["steps"]) for _, v in runs) + 2.6)
    )
    axes = [axes] if len(runs) == 1 else list(axes)
    names = {
        "ours": "Experts (ours): perplexity per step",
        "dense_baseline": "Dense fine-tuning (baseline)",
    }
    # one colour scale for every panel, so equal colours mean equal changes
    span = max(
        [abs(v) for _, run in runs for row in _delta(run) for v in row if not math.isnan(v)]
        + [1e-6]
    )
    for ax, (key, run) in zip(axes, runs, strict=True):
        _heatmap(ax, run, names.get(key, key), span)
    fig.text(
        0.01,
        0.01,
        "colour: loss change vs the domain's best earlier step (red = forgotten, green = "
        "improved); boxed: the step where its own expert / fine-tune arrived",
        fontsize=8,
        color=MUTED,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=130, facecolor="white")
    plt.close(fig)


def plot_perplexity(state: dict[str, Any], path: Path) -> None:
    run = state["runs"]["ours"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    _style(ax, "Held-out perplexity per domain, as experts arrive")
    for j, name in enumerate(run.get("domain_names", run["domains"])):
        ys = [row[j] for row in run["perplexity"]]
        color = PALETTE[j % len(PALETTE)]
        ax.plot(run["steps"], ys, marker="o", ms=4, lw=2, color=color, label=name)
    top = ax.get_ylim()[1]
    for step, expert in zip(run["steps"], run["experts"], strict=True):
        if expert:
            ax.axvline(step, color="#9ca3af", lw=1, ls="--", zorder=0)
            ax.text(
                step, top, f" {expert}", rotation=90, va="top", ha="right", fontsize=7, color=MUTED
            )
    ax.set_xlabel(
        "step (0 = trunk alone; i = after the i-th expert registration)", color=MUTED, fontsize=9
    )
    ax.set_ylabel("perplexity", color=MUTED, fontsize=9)
    ax.set_xticks(run["steps"])
    ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=130, facecolor="white")
    plt.close(fig)


def plot_forgetting(state: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    styles = {
        "ours": (PALETTE[0], "experts (ours)"),
        "dense_baseline": (PALETTE[6], "dense fine-tuning"),
    }
    for key, run in state["runs"].items():
        if not run:
            continue
        color, label = styles[key]
        f_avg = [math.nan if v is None else v for v in run["forgetting_avg"]]
        f_max = [math.nan if v is None else v for v in run["forgetting_max"]]
        bwt = [math.nan if v is None else v for v in run["backward_transfer"]]
        axes[0].plot(run["steps"], f_avg, marker="o", lw=2, color=color, label=f"{label}: average")
        axes[0].plot(
            run["steps"], f_max, marker="^", lw=1.2, ls="--", color=color, label=f"{label}: max"
        )
        axes[1].plot(run["steps"], bwt, marker="o", lw=2, color=color, label=label)
    _style(axes[0], "Forgetting (loss rise above best earlier value)")
    _style(axes[1], "Backward transfer (>= 0: nothing forgotten)")
    for ax in axes:
        ax.axhline(0, color="#9ca3af", lw=1)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        steps = [s for run in state["runs"].values() if run for s in run["steps"]]
        ax.set_xlim(min(steps) - 0.2, max(steps) + 0.2)
        ax.set_xlabel("step", color=MUTED, fontsize=9)
        ax.set_ylabel("nats/token", color=MUTED, fontsize=9)
        ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130, facecolor="white")
    plt.close(fig)


def plot_timeline(state: dict[str, Any], path: Path) -> None:
    run = state["runs"]["ours"]
    jobs = state.get("live", {}).get("jobs", {})
    fig, ax = plt.subplots(figsize=(9, 0.5 * max(len(jobs), len(run["steps"]) - 1, 1) + 1.6))
    _style(ax, "Experts: training and registration")
    ax.grid(axis="x", color="#f3f4f6")
    t0 = min(
        [r for r in run["created_ms"] if r]
        + [j.get("first_ms") or j["updated_ms"] for j in jobs.values()]
        or [0]
    )
    labels = []
    if jobs:
        for i, (job_id, job) in enumerate(sorted(jobs.items(), key=lambda kv: kv[1]["updated_ms"])):
            start = ((job.get("first_ms") or job["updated_ms"]) - t0) / 1000
            end = (job["updated_ms"] - t0) / 1000
            done = job.get("total_steps") and job.get("step", 0) / job["total_steps"]
            color = {"finished": PALETTE[2], "failed": PALETTE[6]}.get(job.get("state"), PALETTE[0])
            ax.barh(i, max(end - start, 0.5), left=start, color=color, alpha=0.85, height=0.6)
            ax.text(
                end,
                i,
                f"  {job.get('state')} {100 * (done or 0):.0f}%",
                va="center",
                fontsize=8,
                color=MUTED,
            )
            labels.append(job.get("domain_id") or job_id[:10])
    else:
        arrivals = zip(run["steps"][1:], run["experts"][1:], run["created_ms"][1:], strict=True)
        for i, (step, expert, created) in enumerate(arrivals):
            x = (created - t0) / 1000
            ax.scatter([x], [i], s=90, marker="D", color=PALETTE[i % len(PALETTE)], zorder=3)
            domain = run["step_labels"][step].lstrip("+")
            ax.text(x, i, f"   step {step}: {domain}", va="center", fontsize=8, color=MUTED)
            labels.append(expert)
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(-0.5, lo), hi + 0.25 * (hi - lo))  # room for the labels
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first event", color=MUTED, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130, facecolor="white")
    plt.close(fig)


PLOTS = {
    "heatmap.png": plot_heatmap,
    "perplexity.png": plot_perplexity,
    "forgetting.png": plot_forgetting,
    "timeline.png": plot_timeline,
}


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
    for name, plot in PLOTS.items():
        plot(state, out / name)
        written[name] = out / name
    atomic_write_json(out / "figures.json", state)
    written["figures.json"] = out / "figures.json"
    images = "".join(
        f'<figure><img alt="{n}" src="data:image/png;base64,'
        f'{base64.b64encode((out / n).read_bytes()).decode()}"></figure>'
        for n in PLOTS
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
<p style="color:#6b7280">Definitions: docs/monitor.md. All figures as JSON: figures.json.</p>
</body></html>"""
