"""The report's pictures: every drawn text box inside the figure and none over another,
perplexity on a log axis with nothing written over the data, and training spans taken from
the trainer's status records."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.text import Text

from monitor.figures import build_state
from monitor.history import MatrixHistory
from monitor.live import LiveState
from monitor.plots import heatmap_figure, perplexity_figure, timeline_figure, training_spans
from monitor.records import EvalRow

DOMAINS = {  # trunk perplexity, as far apart as the demo's (news 36 .. python_code 240,000)
    "dom-news": 36.0,
    "dom-fiction": 26.0,
    "dom-legal": 5572.0,
    "dom-code": 240_000.0,
    "dom-bio": 29_755.0,
    "dom-scripture": 2033.0,
    "dom-tech": 154_844.0,
}
NAMES = {
    "dom-news": "news",
    "dom-fiction": "fiction_austen",
    "dom-legal": "legal",
    "dom-code": "python_code",
    "dom-bio": "biomedical",
    "dom-scripture": "scripture",
    "dom-tech": "tech_docs",
}
T0 = 1_796_133_000_000


def _history(root: Path) -> MatrixHistory:
    history = MatrixHistory(root)
    ppl = dict(DOMAINS)
    arrivals = [None, "dom-bio", "dom-tech", "dom-scripture", "dom-news", "dom-legal", "dom-code"]
    for step, arrived in enumerate(arrivals):
        if arrived:
            ppl[arrived] = max(20.0, ppl[arrived] / 50)
        history.append(
            EvalRow(
                run="ours",
                step=step,
                expert_ids=[],
                loss={d: math.log(v) for d, v in ppl.items()},
                perplexity=dict(ppl),
                arrived_expert=f"exp-{step:020d}" if arrived else None,
                arrived_domain=arrived,
                created_ms=T0 + 60_000 * step,
            )
        )
    return history


def _live(root: Path) -> LiveState:
    """Three jobs as the trainer reports them: registered, not worth it, still running."""
    live = LiveState(root / "live.json")
    for job, domain, states, start in (
        ("job-a", "dom-bio", ("started", "step", "finished"), 0),
        ("job-b", "dom-fiction", ("started", "step", "not_worth_it"), 5_000),
        ("job-c", "dom-code", ("started", "step"), 40_000),
    ):
        for k, state in enumerate(states):
            live.train_status(
                {
                    "job_id": job,
                    "domain_id": domain,
                    "state": state,
                    "step": 10 * k,
                    "total_steps": 20,
                    "expert_id": "exp-a" if state == "finished" else None,
                    "created_ms": T0 + start + 10_000 * k,
                }
            )
    live.registration({"expert_id": "exp-a", "domain_id": "dom-bio", "job_id": "job-a",
                       "created_ms": T0 + 21_000})  # fmt: skip
    # job-d's last status read is a step, but its expert is registered: it finished
    live.train_status({"job_id": "job-d", "domain_id": "dom-legal", "state": "step", "step": 20,
                       "total_steps": 20, "created_ms": T0 + 60_000})  # fmt: skip
    live.registration({"expert_id": "exp-d", "domain_id": "dom-legal", "job_id": "job-d",
                       "created_ms": T0 + 62_000})  # fmt: skip
    live.save()
    return live


def _off_view_tick_labels(fig) -> set[int]:
    """Tick labels matplotlib keeps but does not draw (their tick lies outside the view)."""
    hidden = set()
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = sorted(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not low - 1e-9 * abs(low) <= loc <= high + 1e-9 * abs(high):
                    hidden.update((id(tick.label1), id(tick.label2)))
    return hidden


def _texts(fig) -> list[tuple[str, object]]:
    """Every text the saved picture shows, with its box in pixels."""
    return [(t.get_text(), box) for t, box, _ in _drawn(fig)]


def _drawn(fig) -> list[tuple[Text, object, np.ndarray]]:
    """Every text the saved picture shows: its box and its corners ``(4, 2)`` in pixels
    (a rotated label's own rectangle, not the larger upright box around it)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = _off_view_tick_labels(fig)
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in hidden:
            continue
        box = t.get_window_extent(renderer)
        angle = t.get_rotation()
        t.set_rotation(0)
        flat = t.get_window_extent(renderer)
        t.set_rotation(angle)
        half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [flat.width / 2, flat.height / 2]
        turn = np.radians(angle)
        rot = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
        centre = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
        out.append((t, box, centre + (half * 0.98) @ rot.T))
    return out


def _apart(a: np.ndarray, b: np.ndarray) -> bool:
    """Do two convex quadrilaterals not overlap? (separating axis test)"""
    for quad in (a, b):
        for i in range(4):
            edge = quad[(i + 1) % 4] - quad[i]
            normal = np.array([-edge[1], edge[0]])
            pa, pb = a @ normal, b @ normal
            if pa.max() <= pb.min() or pb.max() <= pa.min():
                return True
    return False


def _assert_inside_and_apart(fig) -> None:
    box = fig.bbox
    drawn = _drawn(fig)
    for t, extent, _ in drawn:
        text = t.get_text()
        assert (
            extent.x0 >= box.x0 - 0.5
            and extent.y0 >= box.y0 - 0.5
            and extent.x1 <= box.x1 + 0.5
            and extent.y1 <= box.y1 + 0.5
        ), f"{text!r} is cut at the figure's edge: {extent} vs {box}"
    for (a, _, qa), (b, _, qb) in itertools.combinations(drawn, 2):
        assert _apart(qa, qb), f"{a.get_text()!r} is drawn over {b.get_text()!r}"


@pytest.fixture
def state(tmp_path: Path) -> dict:
    history = _history(tmp_path)
    _live(tmp_path)  # saved beside history.json, as the monitor keeps it
    return build_state(history, labels=NAMES)  # live=None: read from the run's state


def test_perplexity_is_on_a_log_axis_with_nothing_written_over_the_data(state: dict) -> None:
    fig = perplexity_figure(state)
    try:
        [ax] = fig.axes
        assert ax.get_yscale() == "log"
        assert not ax.texts  # no expert ids (or anything) drawn inside the plot area
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "news (20.0)" in legend and "fiction_austen (26.0)" in legend
        low, high = ax.get_ylim()
        assert low < 20.0 and high > 240_000.0  # both ends of the range are on the axis
        # the two lowest domains stay apart on the page (linear: both flat on 0)
        news, fiction = (ax.transData.transform((6, y))[1] for y in (20.0, 26.0))
        assert fiction - news > 8  # pixels
        _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)


def test_heatmap_caption_and_labels_lie_inside_the_figure(state: dict) -> None:
    fig = heatmap_figure(state)
    try:
        assert any("Boxed" in text for text, _ in _texts(fig))
        _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)


def test_training_spans_come_from_the_status_records(state: dict) -> None:
    spans = {s["job_id"]: s for s in training_spans(state["live"])}
    assert spans["job-a"]["start_ms"] == T0 and spans["job-a"]["end_ms"] == T0 + 20_000
    assert spans["job-a"]["state"] == "finished" and spans["job-a"]["registered_ms"] == T0 + 21_000
    assert spans["job-b"]["state"] == "not_worth_it" and spans["job-b"]["registered_ms"] is None
    assert spans["job-c"]["state"] == "step" and spans["job-c"]["end_ms"] == T0 + 50_000
    assert spans["job-d"]["state"] == "finished" and spans["job-d"]["expert_id"] == "exp-d"
    order = [s["job_id"] for s in training_spans(state["live"])]
    assert order == ["job-a", "job-b", "job-c", "job-d"]
    fig = timeline_figure(state)
    try:
        [ax, *_] = fig.axes
        assert "training spans" in ax.get_title(loc="left")
        bars = [p for p in ax.patches if p.get_width() > 0]
        assert len(bars) == 4
        assert bars[0].get_x() == pytest.approx(0.0) and bars[0].get_width() == pytest.approx(20.0)
        assert [t.get_text() for t in ax.get_yticklabels()] == [
            "biomedical", "fiction_austen", "python_code", "legal",
        ]  # fmt: skip
        _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)


def test_without_status_records_the_timeline_says_it_shows_registrations_only(
    tmp_path: Path,
) -> None:
    fig = timeline_figure(build_state(_history(tmp_path), live={}, labels=NAMES))
    try:
        assert fig.axes[0].get_title(loc="left").startswith("Expert registrations")
        _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)


def test_the_geometric_check_catches_overlap_and_cut_text() -> None:
    fig, ax = plt.subplots(figsize=(4, 3))
    try:
        ax.text(0.5, 0.5, "exp-0123456789", rotation=90)
        ax.text(0.5, 0.5, "exp-9876543210", rotation=90)  # drawn over the first
        with pytest.raises(AssertionError, match="drawn over"):
            _assert_inside_and_apart(fig)
        fig.texts.clear()
        for t in list(ax.texts):
            t.remove()
        fig.text(0.9, 0.5, "a caption far too long for the figure's right edge")
        with pytest.raises(AssertionError, match="cut at the figure's edge"):
            _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)


@pytest.mark.slow
def test_the_html_report_tells_each_drift_event(tmp_path: Path) -> None:
    from monitor.report import write_report

    history = _history(tmp_path)
    live = _live(tmp_path)
    live.drift_event({"event_id": "ev-1", "detector": "promotion", "kind": "new_domain",
                      "domain_id": "dom-bio", "statistics": {"size": 40.0}, "created_ms": T0,
                      "window_start_offset": 0, "window_end_offset": 9})  # fmt: skip
    live.save()
    written = write_report(build_state(history, labels=NAMES), tmp_path / "out")
    page = written["report.html"].read_text()
    assert "Drift events: 1 new domain, 0 novelty-rate rises, 0 domain drifts" in page
    assert "biomedical (dom-bio)" in page and "job job-a: expert exp-a registered" in page
