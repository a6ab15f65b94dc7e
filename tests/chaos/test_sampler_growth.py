"""Soak growth per 10,000 documents, per process after warm-up, and the unbounded list."""

from __future__ import annotations

from topology.chaos.sampler import Sample, growth_per_10k, unbounded


def test_growth_is_measured_per_process_and_a_restart_does_not_hide_a_leak():
    leaking = [Sample("serve", 1, d, {"rss_mb": 100 + d / 100}, 90) for d in (1000, 2000, 3000)]
    # the restarted process starts low again: across both, the rss would look flat
    restarted = [
        Sample("serve", 2, d, {"rss_mb": 100 + (d - 3000) / 100}, 90) for d in (3000, 4000)
    ]
    growth = growth_per_10k([*leaking, *restarted], warmup_docs=1000)
    assert growth == {"serve": {"rss_mb": 100.0}}
    assert unbounded(growth) == ["serve.rss_mb"]


def test_warm_up_and_short_processes_are_left_out():
    warming = [Sample("route", 1, d, {"fds": d}, 90) for d in (0, 500)]  # before warm-up only
    short = [Sample("route", 2, d, {"fds": 10}, 90) for d in (1000, 1050)]  # 50 documents
    # a process just restarted: loading its model, well after the stream's warm-up
    loading = [Sample("serve", 4, d, {"rss_mb": d}, age) for d, age in ((2000, 5), (4000, 20))]
    steady = [Sample("trainer", 3, d, {"threads": 12}, 90) for d in (1000, 5000)]
    growth = growth_per_10k([*warming, *short, *loading, *steady], warmup_docs=600)
    assert growth == {"trainer": {"threads": 0.0}}
    assert unbounded(growth) == []
