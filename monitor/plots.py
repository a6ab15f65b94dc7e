"""The report's figures as matplotlib Figures (``worx report`` saves them as PNGs).

Each builder takes :func:`monitor.figures.build_state`'s dict and returns a Figure laid out
with constrained layout, so every title, legend, caption and tick label lies inside the
picture (tests check the drawn text boxes: inside the figure, none overlapping another).
Nothing is written over the data: names go in legends and on the axes.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from monitor.compact import COMPACT_DOMAINS  # noqa: E402
from trainer.records import ACTIVE_STATES  # noqa: E402

PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d"]
INK = "#1f2937"
MUTED = "#6b7280"
OUTCOME_COLOURS = {  # a training span's colour: how the job ended
    "finished": "#059669",
    "not_worth_it": "#d97706",
    "failed": "#dc2626",
    "skipped": "#9ca3af",
}
RUNNING = "#2563eb"
CAPTION_PT = 8
CELL_IN = 0.24  # a compact heatmap cell, inches (a 7-point label per row and column fits)


def _style(ax: Any, title: str) -> None:
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold", color=INK, pad=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#d1d5db")
    ax.tick_params(colors=MUTED, labelsize=9)
    ax.grid(axis="y", color="#f3f4f6", linewidth=1)
    ax.set_axisbelow(True)


def _caption(fig: Figure, text: str) -> None:
    """A caption under the axes, wrapped to the figure's width (constrained layout keeps
    room for it)."""
    chars = int(fig.get_figwidth() * 72 / (0.6 * CAPTION_PT))  # ~0.6 em per character
    fig.supxlabel(textwrap.fill(text, chars), fontsize=CAPTION_PT, color=MUTED, x=0.01, ha="left")


def _plain_number(value: float, _pos: int) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


# ---------------------------------------------------------------- heatmap
def _delta(run: dict[str, Any]) -> list[list[float]]:
    """Loss minus the best earlier loss, ``(steps, domains)``; NaN where undefined (row 0)."""
    return [[math.nan if v is None else v for v in row] for row in run["forgetting_matrix"]]


def _heatmap(
    fig: Figure, ax: Any, run: dict[str, Any], title: str, span: float, compact: bool
) -> None:
    delta = _delta(run)
    image = ax.imshow(
        delta, cmap="RdYlGn_r", norm=TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span), aspect="auto"
    )
    names = run.get("domain_names", run["domains"])
    if compact:
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    else:
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(
        range(len(run["steps"])),
        [f"{s}  {lab}" for s, lab in zip(run["steps"], run["step_labels"], strict=True)],
        fontsize=7 if compact else None,
    )
    for i, row in enumerate([] if compact else run["perplexity"]):
        for j, ppl in enumerate(row):
            if ppl is not None:
                strong = not math.isnan(delta[i][j]) and abs(delta[i][j]) > 0.6 * span
                ax.text(
                    j, i, f"{ppl:,.0f}" if ppl >= 1000 else f"{ppl:.1f}",
                    ha="center", va="center", fontsize=7.5, color="white" if strong else INK,
                )  # fmt: skip
    for j, arrived in enumerate(run["arrivals"]):
        if arrived is not None:
            ax.add_patch(plt.Rectangle((j - 0.5, arrived - 0.5), 1, 1, fill=False, lw=2, ec=INK))
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold", color=INK, pad=10)
    ax.tick_params(colors=MUTED, labelsize=7 if compact else 9, length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    bar.set_label("loss change (nats/token)", color=MUTED, fontsize=8)
    bar.ax.tick_params(labelsize=8, colors=MUTED)


def heatmap_figure(state: dict[str, Any]) -> Figure:
    runs = [(k, v) for k, v in state["runs"].items() if v]
    rows = max(len(v["steps"]) for _, v in runs)
    cols = max(len(v["domains"]) for _, v in runs)
    compact = cols > COMPACT_DOMAINS
    if compact:  # one panel under the other, colour only (see COMPACT_DOMAINS)
        size = (CELL_IN * cols + 4.5, (CELL_IN * rows + 2.4) * len(runs) + 1.0)
        fig, axes = plt.subplots(len(runs), 1, figsize=size, layout="constrained", squeeze=False)
        axes = [[row[0] for row in axes]]
    else:
        size = (max(6.0, 0.65 * cols + 2.6) * len(runs), 0.5 * rows + 3.0)
        fig, axes = plt.subplots(1, len(runs), figsize=size, layout="constrained", squeeze=False)
    titles = {
        "ours": "Experts (ours): held-out perplexity per step",
        "dense_baseline": "Dense fine-tuning (baseline)",
    }
    # one colour scale for every panel, so equal colours mean equal changes
    span = max(
        [abs(v) for _, run in runs for row in _delta(run) for v in row if not math.isnan(v)]
        + [1e-6]
    )
    for ax, (key, run) in zip(axes[0], runs, strict=True):
        _heatmap(fig, ax, run, titles.get(key, key), span, compact)
    cell = (
        "Cell: the column's domain after the row's step (perplexities: figures.json)."
        if compact
        else "Cell: held-out perplexity of the column's domain after the row's step."
    )
    _caption(
        fig,
        f"{cell} Colour: loss change vs the domain's best earlier step (red = forgotten, "
        "green = improved). Boxed: the step where the domain's own expert (or fine-tune) "
        "arrived.",
    )
    return fig


# ---------------------------------------------------------------- perplexity
def perplexity_figure(state: dict[str, Any]) -> Figure:
    """Perplexity per domain over the steps, on a log axis (domains 30 and 200,000 apart
    both stay readable); which expert arrived at each step is on the x axis, the domains
    (with their final perplexity) in the legend."""
    run = state["runs"]["ours"]
    count = len(run["domains"])
    columns = 1 if count <= COMPACT_DOMAINS else 2 if count <= 2 * COMPACT_DOMAINS + 12 else 3
    height = max(4.8, 0.17 * math.ceil(count / columns) + 1.8)  # the legend's rows fit
    fig, ax = plt.subplots(figsize=(10 + 2.2 * (columns - 1), height), layout="constrained")
    _style(ax, "Held-out perplexity per domain after each expert registration (log scale)")
    for step, expert in zip(run["steps"], run["experts"], strict=True):
        if expert:
            ax.axvline(step, color="#d1d5db", lw=1, ls="--", zorder=0)
    for j, name in enumerate(run.get("domain_names", run["domains"])):
        ys = [math.nan if row[j] is None else row[j] for row in run["perplexity"]]
        final = next((y for y in reversed(ys) if not math.isnan(y)), None)
        label = f"{name} ({final:,.1f})" if final is not None else name
        color = PALETTE[j % len(PALETTE)]
        if count > COMPACT_DOMAINS:  # many lines: thin, no markers
            ax.plot(run["steps"], ys, lw=1.1, color=color, label=label)
        else:
            ax.plot(run["steps"], ys, marker="o", ms=4, lw=2, color=color, label=label)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_plain_number))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.grid(axis="y", which="major", color="#f3f4f6", linewidth=1)
    ticks = [f"{s}\n{lab}" for s, lab in zip(run["steps"], run["step_labels"], strict=True)]
    if len(ticks) > 2 * COMPACT_DOMAINS:  # no room for names: every k-th step's number
        every = math.ceil(len(ticks) / COMPACT_DOMAINS)
        shown = run["steps"][::every]
        ax.set_xticks(shown, [str(s) for s in shown])
    else:
        ax.set_xticks(run["steps"], ticks, rotation=30 if len(ticks) > 9 else 0, ha="center")
    ax.set_xlabel("step: the expert registered (0 = trunk alone)", color=MUTED, fontsize=9)
    ax.set_ylabel("held-out perplexity", color=MUTED, fontsize=9)
    ax.legend(
        frameon=False, fontsize=8 if columns == 1 else 7, loc="upper left",
        bbox_to_anchor=(1.01, 1.0), title="domain (final)", title_fontsize=8, ncols=columns,
    )  # fmt: skip
    return fig


# ---------------------------------------------------------------- forgetting
def forgetting_figure(state: dict[str, Any]) -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0), layout="constrained")
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
    steps = [s for run in state["runs"].values() if run for s in run["steps"]]
    for ax in axes:
        ax.axhline(0, color="#9ca3af", lw=1)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlim(min(steps) - 0.2, max(steps) + 0.2)
        ax.set_xlabel("step (i = after the i-th expert registration)", color=MUTED, fontsize=9)
        ax.set_ylabel("nats/token", color=MUTED, fontsize=9)
        ax.legend(frameon=False, fontsize=8, loc="best")
    return fig


# ---------------------------------------------------------------- timeline
def training_spans(live: dict[str, Any]) -> list[dict[str, Any]]:
    """One span per training job from the trainer's status records (``live["jobs"]``:
    the first status, ``taken``, to the last: registered, not worth it, failed, or still
    running), in start order, each with its registration time if it registered one.

    A registration proves its job finished even where the job's last status seen was
    still ``step`` (the monitor can read ``worx.experts`` ahead of ``worx.train.status``).

    Returns dicts ``{job_id, domain_id, start_ms, end_ms, state, expert_id,
    registered_ms}``.
    """
    registered = {r.get("job_id"): r for r in live.get("registrations", []) if r}
    spans = []
    for job_id, job in (live.get("jobs") or {}).items():
        end = int(job.get("updated_ms") or job.get("created_ms") or 0)
        start = int(job.get("first_ms") or end)
        state, expert = job.get("state", ""), job.get("expert_id")
        registration = registered.get(job_id) or {}
        if registration and state in ACTIVE_STATES:
            state, expert = "finished", registration.get("expert_id")
        spans.append(
            {
                "job_id": job_id,
                "domain_id": job.get("domain_id"),
                "start_ms": min(start, end),
                "end_ms": end,
                "state": state,
                "expert_id": expert,
                "registered_ms": registration.get("created_ms"),
            }
        )
    return sorted(spans, key=lambda s: (s["start_ms"], s["job_id"]))


def _outcome_text(span: dict[str, Any]) -> str:
    state = span["state"]
    if state == "finished" and span["expert_id"]:
        return f"registered {span['expert_id'][:12]}"
    shown = {"not_worth_it": "not worth it", "taken": "setting up"}
    return shown.get(state, "training" if state in ("started", "step") else state)


def timeline_figure(state: dict[str, Any]) -> Figure:
    """Training spans (from ``worx.train.status``) and registrations, one row per job; with
    no training status at hand, the registrations alone (and the title says so)."""
    run = state["runs"]["ours"]
    names = state.get("names") or dict(
        zip(run["domains"], run.get("domain_names", []), strict=False)
    )
    spans = training_spans(state.get("live") or {})
    rows = max(len(spans), len(run["steps"]) - 1, 1)
    fig, ax = plt.subplots(figsize=(10, 0.45 * rows + 2.2), layout="constrained")
    ax.grid(axis="x", color="#f3f4f6")
    if spans:
        _style(ax, "Experts: training spans and registrations")
        t0 = min(s["start_ms"] for s in spans)
        labels = []
        for i, span in enumerate(spans):
            start, end = (span["start_ms"] - t0) / 1000, (span["end_ms"] - t0) / 1000
            color = OUTCOME_COLOURS.get(span["state"], RUNNING)
            ax.barh(i, max(end - start, 0.5), left=start, color=color, alpha=0.85, height=0.55)
            if span["registered_ms"]:
                end = max(end, (span["registered_ms"] - t0) / 1000)
                ax.scatter([end], [i], s=60, marker="D", color=INK, zorder=3)
            ax.annotate(
                _outcome_text(span), (end, i), xytext=(9, 0), textcoords="offset points",
                va="center", fontsize=8, color=MUTED,
            )  # fmt: skip
            labels.append(names.get(span["domain_id"], span["domain_id"]) or span["job_id"])
        shown = {s["state"] if s["state"] in OUTCOME_COLOURS else "training" for s in spans}
        legend = {
            "registered": ("finished", OUTCOME_COLOURS["finished"]),
            "not worth it": ("not_worth_it", OUTCOME_COLOURS["not_worth_it"]),
            "failed": ("failed", OUTCOME_COLOURS["failed"]),
            "skipped": ("skipped", OUTCOME_COLOURS["skipped"]),
            "training": ("training", RUNNING),
        }
        handles, texts = [], []
        for text, (state_name, colour) in legend.items():
            if state_name in shown:
                handles.append(plt.Rectangle((0, 0), 1, 1, color=colour, alpha=0.85))
                texts.append(f"training span: {text}")
        if any(s["registered_ms"] for s in spans):
            handles.append(plt.Line2D([], [], marker="D", color=INK, ls="", ms=6))
            texts.append("expert registered")
        ax.legend(
            handles, texts, frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0)
        )
        ax.set_xlabel("seconds since the first job started", color=MUTED, fontsize=9)
    else:
        _style(ax, "Expert registrations (no training status recorded)")
        created = [c for c in run["created_ms"][1:] if c]
        t0 = min(created) if created else 0
        labels = []
        arrivals = zip(run["steps"][1:], run["experts"][1:], run["created_ms"][1:], strict=True)
        for i, (step, expert, when) in enumerate(arrivals):
            x = (when - t0) / 1000
            ax.scatter([x], [i], s=70, marker="D", color=PALETTE[i % len(PALETTE)], zorder=3)
            ax.text(x, i, f"   step {step}: {expert}", va="center", fontsize=8, color=MUTED)
            labels.append(run["step_labels"][step].lstrip("+"))
        ax.set_xlabel("seconds since the first evaluated registration", color=MUTED, fontsize=9)
    lo, hi = ax.get_xlim()
    ax.set_xlim(min(lo, 0.0), hi + 0.3 * (hi - min(lo, 0.0)) + 1.0)  # room for the outcomes
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first job on top
    return fig


FIGURES = {
    "heatmap.png": heatmap_figure,
    "perplexity.png": perplexity_figure,
    "forgetting.png": forgetting_figure,
    "timeline.png": timeline_figure,
}
