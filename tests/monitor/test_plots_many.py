"""The report's pictures stay readable with fifty domains: every text inside the figure
and none over another, no numbers crammed into heatmap cells, a page a screen can show."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from monitor.figures import build_state
from monitor.history import MatrixHistory
from monitor.plots import COMPACT_DOMAINS, heatmap_figure, perplexity_figure
from monitor.records import EvalRow
from tests.monitor.test_plots import _assert_inside_and_apart

N = 50
T0 = 1_796_133_000_000
DPI = 130  # as monitor.report saves them


def _history(root: Path) -> MatrixHistory:
    """Fifty domains whose experts arrive one per step, ours and a dense baseline."""
    history = MatrixHistory(root)
    domains = [f"dom-{k:03d}" for k in range(N)]
    for run, forget in (("ours", 0.0), ("dense_baseline", 0.02)):
        ppl = {d: 50.0 * (1 + k % 9) for k, d in enumerate(domains)}
        for step in range(N + 1):
            arrived = domains[step - 1] if step else None
            ppl = {d: v * math.exp(forget) for d, v in ppl.items()}
            if arrived:
                ppl[arrived] /= 4
            history.append(
                EvalRow(
                    run=run,
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


@pytest.fixture
def state(tmp_path: Path) -> dict:
    names = {f"dom-{k:03d}": f"kind_of_text_{k:02d}" for k in range(N)}
    return build_state(_history(tmp_path), labels=names)


def test_fifty_domain_heatmap_is_colour_only_and_fits_a_page(state: dict) -> None:
    assert N > COMPACT_DOMAINS
    fig = heatmap_figure(state)
    try:
        panels = [ax for ax in fig.axes if ax.images]
        assert len(panels) == 2
        assert all(not ax.texts for ax in panels)  # no perplexity numbers in the cells
        assert panels[0].get_position().y0 > panels[1].get_position().y1  # stacked
        width, height = fig.get_size_inches() * DPI
        assert width <= 2400 and height <= 4000, (width, height)
        _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)


def test_fifty_domain_perplexity_legend_lists_every_domain_inside(state: dict) -> None:
    fig = perplexity_figure(state)
    try:
        [ax] = fig.axes
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert len(legend) == N
        _assert_inside_and_apart(fig)
    finally:
        plt.close(fig)
