"""The live view: rates over a window fall to 0 when idle, outcomes wrap, URLs and drift told."""

from __future__ import annotations

from rich.console import Console

from router.records import DomainRecord, DriftEvent, TrainJob
from topology.loop.live_view import LiveView, WindowRate
from topology.loop.watcher import LoopState
from trainer.records import TrainStatus

REASON = (
    "held-out perplexity 27.57 does not beat the current mixture's 27.57 by 3% "
    "so no expert was registered for this domain endfinalword"
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _text(view: LiveView, state: LoopState, width: int = 100) -> str:
    console = Console(record=True, width=width)
    console.print(view.render(state, {"route": "up"}))
    return console.export_text()


def _job(job_id: str, domain_id: str, reason: str, created_ms: int) -> TrainJob:
    return TrainJob(
        job_id, domain_id, reason, [], ["d1"], ["d2"], [1.0, 0.0], created_ms=created_ms
    )


def test_the_rate_falls_to_zero_once_the_stream_stops() -> None:
    clock = Clock()
    rate = WindowRate(window_s=10.0, clock=clock)
    for t in range(0, 21):  # 100 docs/s for 20 s, sampled every second
        clock.now = float(t)
        during = rate.update(100 * t)
    assert during == 100.0
    seen = []
    for t in range(21, 40):  # idle: the count stands still
        clock.now = float(t)
        seen.append(rate.update(2000))
    assert seen[0] > 0 and seen[-1] == 0.0
    assert all(a >= b for a, b in zip(seen, seen[1:], strict=False))  # decays, never jumps


def test_the_view_shows_the_idle_rate_urls_wrapped_outcomes_and_drift() -> None:
    clock = Clock()
    view = LiveView(0.0, "http://127.0.0.1:9001/", "http://127.0.0.1:9002", clock=clock)
    state = LoopState()
    state.domains["dom-a"] = DomainRecord("dom-a", [1.0, 0.0], 0.5, 40, 0.6, name="legal")
    state.domains["dom-b"] = DomainRecord("dom-b", [0.0, 1.0], 0.5, 40, 0.6, label_hint="news")
    state.jobs["job-1"] = _job("job-1", "dom-a", "new_domain", 5)
    state.job_status["job-1"] = TrainStatus("job-1", "dom-a", "not_worth_it", 40, 40, reason=REASON)
    state.jobs["job-2"] = _job("job-2", "dom-a", "drift", 9)
    events = [
        DriftEvent("ev-1", "promotion", "new_domain", "dom-a", {"size": 40.0}, 0, 10, 5),
        DriftEvent("ev-2", "domain_distance", "drift", "dom-a", {"recent_docs": 50.0}, 10, 20, 9),
        DriftEvent("ev-3", "domain_distance", "drift", "dom-b", {"recent_docs": 3.0}, 20, 30, 12),
    ]
    state.drift_events.extend(events)
    for t in range(0, 6):
        clock.now = float(t)
        state.docs = 500 * t
        busy = _text(view, state)
    assert "(500/s)" in busy
    clock.now = 30.0  # the stream stopped long ago
    text = _text(view, state)
    assert "docs 2500 (0/s)" in text
    assert "serve: http://127.0.0.1:9002" in text and "dashboard: http://127.0.0.1:9001/" in text
    assert "endfinalword" in text and "…" not in text  # the outcome wraps, nothing cut
    assert "legal" in text and "news" in text  # names, not only ids
    assert "1 new domain, 0 novelty-rate rises, 2 domain drifts" in text
    assert "job job-2 (drift): queued" in text  # what the drift of dom-a led to
    assert "no drift job: 3 recent documents" in " ".join(text.split())  # and why dom-b none


def test_fifty_domains_fit_a_screen_with_the_worst_forgetting_shown_first() -> None:
    from monitor.records import EvalRow
    from topology.loop.live_view import LIST_ROWS

    state = LoopState()
    ids = [f"dom-{i:02d}" for i in range(50)]
    for i, domain in enumerate(ids):
        state.domains[domain] = DomainRecord(domain, [1.0, 0.0], 0.5, 40, 0.6, name=f"kind{i:02d}")
        state.jobs[f"job-{i:02d}"] = _job(f"job-{i:02d}", domain, "new_domain", i)
        if i < 45:  # 45 ended, 5 still queued
            state.job_status[f"job-{i:02d}"] = TrainStatus(f"job-{i:02d}", domain, "finished")
    loss = {d: 2.0 for d in ids}
    state.eval_rows[("ours", 0)] = EvalRow("ours", 0, [], dict(loss), {d: 7.39 for d in ids})
    later = {**loss, "dom-17": 2.1}  # kind17's loss rose 5% (the one to call out)
    ppl = {d: 7.39 for d in ids} | {"dom-17": 8.17}
    state.eval_rows[("ours", 1)] = EvalRow("ours", 1, ["e1"], later, ppl, arrived_domain="dom-03")
    text = _text(LiveView(0.0), state, width=120)
    assert len(text.splitlines()) < 70  # 50 domains, 50 jobs, 50 forgetting columns: a screen
    assert "domains discovered: 50 (latest 12 shown)" in text and "kind49" in text
    assert "kind00 " not in text.split("training jobs")[0]  # the oldest domain is not listed
    assert all(f"job-{i}" in text for i in range(45, 50))  # every queued job is shown
    forgetting = text.split("held-out perplexity of 50 domains")[1]
    first_row = next(line for line in forgetting.splitlines() if "kind" in line)
    assert "kind17" in first_row and "5.00%" in first_row
    assert text.count("kind") <= 3 * LIST_ROWS + 2


def test_jobs_stay_readable_at_80_columns_with_short_expert_ids_and_progress_in_state() -> None:
    state = LoopState()
    for i in range(3):
        domain, job_id = f"dom-{i:012d}", f"job-{i:020d}"
        state.domains[domain] = DomainRecord(
            domain,
            [1.0, 0.0],
            0.5,
            40,
            0.6,
            label_hint="json_api_models",
            expert_ids=["exp-7cf2e9a219e26d73a733"],
        )
        state.jobs[job_id] = _job(job_id, domain, "new_domain", i)
    ids = list(state.jobs)
    state.job_status[ids[0]] = TrainStatus(
        ids[0], "dom-000000000000", "finished", 30, 30, expert_id="exp-7cf2e9a219e26d73a733"
    )
    state.job_status[ids[1]] = TrainStatus(ids[1], "dom-000000000001", "step", 12, 30, loss=3.2141)
    text = _text(LiveView(0.0), state, width=80)
    jobs = text.split("training jobs")[1]
    assert "expert exp-7cf2e9a2 " in jobs  # the id as the timeline shows it, on one line
    assert "exp-7cf2e9a219" not in text
    assert "step 12/30," in jobs and "loss 3.214" in jobs
    rows = [line for line in jobs.splitlines() if "│" in line and "━" not in line][1:]
    assert len(rows) <= 2 * 3 + 1  # at most two lines a job (the running one's state wraps)
