"""Soak growth per 10,000 documents, per process after warm-up, and the unbounded list."""

from __future__ import annotations

import pytest

from topology.chaos.sampler import Sample, growth_per_10k, unbounded


def test_growth_is_measured_per_process_and_a_restart_does_not_hide_a_leak():
    leaking = [Sample("serve", 1, d, {"rss_mb": 100 + d / 100}, 90) for d in range(1000, 3001, 400)]
    # the restarted process starts low again: across both, the rss would look flat
    restarted = [
        Sample("serve", 2, d, {"rss_mb": 100 + (d - 3000) / 100}, 90)
        for d in range(3000, 5001, 400)
    ]
    growth = growth_per_10k([*leaking, *restarted], warmup_docs=1000)
    assert growth == {"serve": {"rss_mb": 100.0}}
    assert unbounded(growth) == ["serve.rss_mb"]


def test_work_in_progress_is_not_growth_but_a_rising_floor_is():
    """Found by the 50,000-document chaos soak: a restarted monitor sampled 5 times over
    800 documents, the last samples while it evaluated (440 -> 609 MB, 20 -> 39 fds), read
    as 2,235 MB, 145 fds and 39 threads per 10,000 documents: `unbounded` on a monitor
    that stayed at ~440 MB between evaluations for 27,000 documents."""

    def busy(d: int) -> bool:
        return d % 1000 == 0

    evaluating = [
        Sample(
            "monitor", 5, d, {"rss_mb": 950 if busy(d) else 440, "fds": 39 if busy(d) else 28}, 90
        )
        for d in range(20000, 30001, 250)
    ]
    short = [Sample("monitor", 6, d, {"rss_mb": 440 + (d > 30400) * 170}, 90)
             for d in range(30000, 30801, 200)]  # fmt: skip
    leaking = [
        Sample("route", 7, d, {"rss_mb": 200 + d / 100 + (300 if busy(d) else 0)}, 90)
        for d in range(20000, 30001, 250)
    ]
    growth = growth_per_10k([*evaluating, *short, *leaking], warmup_docs=20000)
    assert growth["monitor"] == {"rss_mb": 0.0, "fds": 0.0}
    assert growth["route"]["rss_mb"] == pytest.approx(100.0, rel=0.05)
    assert unbounded(growth) == ["route.rss_mb"]


def test_a_sample_of_an_exiting_process_is_left_out():
    exiting = [Sample("serve", 8, d, {"rss_mb": 0.0 if d == 1000 else 400.0}, 90)
               for d in range(1000, 4001, 500)]  # fmt: skip
    assert growth_per_10k(exiting, warmup_docs=1000) == {"serve": {"rss_mb": 0.0}}


def test_warm_up_and_short_processes_are_left_out():
    warming = [Sample("route", 1, d, {"fds": d}, 90) for d in (0, 500)]  # before warm-up only
    short = [Sample("route", 2, d, {"fds": 10}, 90) for d in (1000, 1050)]  # 50 documents
    # a process just restarted: loading its model, well after the stream's warm-up
    loading = [Sample("serve", 4, d, {"rss_mb": d}, age) for d, age in ((2000, 5), (4000, 20))]
    steady = [Sample("trainer", 3, d, {"threads": 12}, 90) for d in range(1000, 5001, 800)]
    growth = growth_per_10k([*warming, *short, *loading, *steady], warmup_docs=600)
    assert growth == {"trainer": {"threads": 0.0}}
    assert unbounded(growth) == []
