"""The dashboard: its JSON and /metrics over real HTTP, and the page in headless Chromium."""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.figures import build_state
from monitor.live import LiveState
from monitor.records import EvalRow
from monitor.server import DashboardServer
from tests.support.browser import needs_chromium, rendered_page
from tests.support.smallrun import ALL_DOMAINS, SmallRun

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def live_state() -> LiveState:
    live = LiveState()
    now = int(time.time() * 1000)
    live.seen("docs", 120)
    live.seen("routed", 118)
    live.dead_letter("not_json")
    live.train_status(
        {
            "job_id": "job-news",
            "domain_id": "news",
            "state": "step",
            "step": 30,
            "total_steps": 100,
            "loss": 3.2,
            "created_ms": now,
        }
    )
    live.drift_event(
        {
            "event_id": "d1",
            "detector": "novelty_rate",
            "kind": "new_domain",
            "domain_id": None,
            "statistics": {"rate": 0.3},
            "created_ms": now,
        }
    )
    return live


@pytest.fixture
def server(run_copy: SmallRun) -> Iterator[DashboardServer]:
    live = live_state()
    store = {"experts": 3, "bytes": 1, "quarantined": 0}
    labels = {"legal": "Court rulings"}  # the domain table's label_hint of one domain

    def state() -> dict:
        return build_state(run_copy.history, live.snapshot(), store, labels)

    srv = DashboardServer(state, port=0)
    srv.history = run_copy.history  # type: ignore[attr-defined]  # the test adds a row later
    with srv:
        yield srv


def get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as res:
        return res.status, res.headers["Content-Type"], res.read()


def test_state_json_and_assets(server: DashboardServer) -> None:
    status, ctype, body = get(server.url + "api/state")
    assert status == 200 and ctype == "application/json"
    state = json.loads(body)
    assert state["headline"]["experts"] == 3 and state["headline"]["weight_changes"] == 0
    assert len(state["runs"]["ours"]["loss"]) == 4
    assert len(state["runs"]["dense_baseline"]["loss"]) == 4
    ours = state["runs"]["ours"]
    assert ours["domain_names"][ours["domains"].index("legal")] == "Court rulings"
    page = get(server.url)[2].decode()
    assert 'src="dashboard.js"' in page and "http" not in page.split("<body>")[1]  # no CDN
    assert b"api/state" in get(server.url + "dashboard.js")[2]
    assert server.url.startswith("http://127.0.0.1:")


def test_prometheus_metrics(server: DashboardServer) -> None:
    status, ctype, body = get(server.url + "metrics")
    text = body.decode()
    assert status == 200 and ctype.startswith("text/plain")
    for domain in ALL_DOMAINS:
        name = "Court rulings" if domain == "legal" else domain  # ids key, names label
        assert f'worx_domain_perplexity{{domain="{domain}",name="{name}",run="ours"}}' in text
        assert f'worx_domain_loss{{domain="{domain}",name="{name}",run="dense_baseline"}}' in text
        assert f'worx_domain_info{{domain="{domain}",name="{name}"}} 1.0' in text
    assert 'worx_forgetting_avg{run="dense_baseline"}' in text
    assert "worx_weight_changes 0.0" in text
    assert "worx_experts 3.0" in text
    assert 'worx_eval_cpu_seconds{run="ours"}' in text  # the monitor's cost of its latest step
    assert 'worx_eval_docs_scored{run="dense_baseline"} 24.0' in text  # 4 domains x 6
    assert 'worx_train_progress{domain="news",name="news",state="step"} 0.3' in text
    assert 'worx_dead_letters_total{reason="not_json"} 1.0' in text
    assert 'worx_stream_messages_total{topic="docs"} 120.0' in text
    assert "worx_store_experts 3.0" in text


@pytest.mark.slow
@needs_chromium
def test_dashboard_in_headless_chromium(server: DashboardServer) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with rendered_page(server.url) as (page, errors):
        count = lambda sel: page.eval_on_selector_all(sel, "n => n.length")  # noqa: E731
        assert count("#heatmap-ours g.hm-row") == 4  # trunk + three experts
        assert count("#heatmap-ours g.hm-row:first-child rect.hm-cell") == len(ALL_DOMAINS)
        assert count("#heatmap-dense_baseline g.hm-row") == 4
        assert count("#ppl path.series") == len(ALL_DOMAINS)
        assert count("#ppl line.arrival") == 3  # expert arrivals marked
        assert count("#forgetting path.series") == 4  # avg and max, ours and dense
        drift = page.inner_text("#drift")  # told: what fired and what it led to
        assert drift.count("novelty rate rose") == 1 and "no new domain followed" in drift
        # perplexity on a log axis, and no expert id written over the lines
        assert page.get_attribute("#ppl svg", "data-scale") == "log"
        ticks = page.eval_on_selector_all(
            "#ppl text.ytick", "ns => ns.map(n => [n.textContent, +n.getAttribute('y')])"
        )
        assert len(ticks) >= 3
        per_decade = [
            (y1 - y0) / math.log10(float(v1.replace(",", "")) / float(v0.replace(",", "")))
            for (v0, y0), (v1, y1) in zip(ticks, ticks[1:], strict=False)
        ]  # pixels per decade: the same between every pair of ticks on a log axis
        assert max(per_decade) - min(per_decade) < 1.0, ticks
        drawn = page.eval_on_selector_all("#ppl text", "ns => ns.map(n => n.textContent)")
        experts = json.loads(get(server.url + "api/state")[2])["runs"]["ours"]["experts"]
        assert not {e for e in experts if e} & {t.strip() for t in drawn}
        assert "job-news" in page.inner_text("#timeline")
        assert "no weight changed" in page.inner_text("#checks")
        # domains are shown by their label where one is known, else by id
        columns = page.eval_on_selector_all(
            "#heatmap-ours text.hm-domain", "ns => ns.map(n => n.textContent)"
        )
        assert columns == ["Court rulings" if d == "legal" else d for d in ALL_DOMAINS]
        series = page.eval_on_selector_all("#ppl path.series", "ns => ns.map(n => n.dataset.name)")
        assert "Court rulings" in series and "legal" not in series
        page.screenshot(path=str(ARTIFACTS / "monitor-dashboard.png"), full_page=True)
        # live: a new row on disk shows up at the next poll, without a reload
        last = server.history.rows("ours")[-1]  # type: ignore[attr-defined]
        server.history.append(  # type: ignore[attr-defined]
            EvalRow.from_dict({**last.to_dict(), "step": 4, "arrived_expert": "x-e1"})
        )
        page.wait_for_function(
            "document.querySelectorAll('#heatmap-ours g.hm-row').length === 5", timeout=15_000
        )
        assert count("#ppl line.arrival") == 4
        assert errors == []
    assert (ARTIFACTS / "monitor-dashboard.png").stat().st_size > 10_000


@pytest.mark.slow
@needs_chromium
def test_fifty_domains_stay_readable_in_headless_chromium(tmp_path: Path) -> None:
    from tests.monitor.test_plots_many import N, _history

    history = _history(tmp_path)
    names = {f"dom-{k:03d}": f"kind_of_text_{k:02d}" for k in range(N)}
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        DashboardServer(lambda: build_state(history, labels=names), port=0) as srv,
        rendered_page(srv.url) as (page, errors),
    ):
        count = lambda sel: page.eval_on_selector_all(sel, "n => n.length")  # noqa: E731
        assert count("#heatmap-ours svg.compact g.hm-row") == N + 1
        # colour only: the one text of a row is its label, no number in any cell
        assert count("#heatmap-ours g.hm-row text") == N + 1
        widths = page.eval_on_selector_all(
            "#heatmap-ours rect.hm-cell",
            "ns => ns.map(n => n.getBoundingClientRect().width)",
        )
        assert min(widths) >= 14  # a full row of the page: room for a 10-point label
        assert "w12" in page.get_attribute("#heatmap-ours >> xpath=..", "class")
        # the dense baseline forgets: its worst cells are outlined and listed
        assert count("#heatmap-dense_baseline rect.hm-worst") == 8
        worst = page.inner_text("#heatmap-dense_baseline table.worst-cells")
        assert "kind_of_text_49" in worst.splitlines()[1]  # the most forgotten first
        assert count("#heatmap-ours table.worst-cells") == 0  # ours forgets nothing
        assert count("#ppl text.legend") == 0 and count("#ppl path.series") == N
        assert "the latest 12 of 50" in page.inner_text("#timeline")
        assert page.evaluate("document.body.scrollHeight") < 4500
        page.screenshot(path=str(ARTIFACTS / "monitor-dashboard-50.png"), full_page=True)
        assert errors == []
