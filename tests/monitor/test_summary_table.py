"""The demo's printed summary: a readable table of rounded figures, drift events explained."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from monitor.summary_table import format_figure, print_summary

REPORT = {
    "wall_s": 386.8,
    "documents": 2540,
    "dead_letters": 5,
    "domains_discovered": 2,
    "experts": 1,
    "max_old_domain_loss_rise": 0.0,
    "baseline_max_old_domain_loss_rise": 0.6374712984430753,
    "ppl_geomean_final": 145.67482693041885,
    "ppl_geomean_final_over_baseline": 0.27870131496693024,
    "domains_dense_better": ["python_code"],
    "new_domains": {
        "legal": {
            "ppl_trunk": 5572.215219060382,
            "ppl_final": 202.6291035697201,
            "ppl_reduction": 0.9636358080935918,
        },
    },  # fmt: skip
    "domain_labels": {"dom-a": "legal", "dom-b": "news"},
    "serve_url": "http://127.0.0.1:40001",
    "dashboard_url": "http://127.0.0.1:40002/",
    "keep_serving": False,
    "explore_command": "worx serve --run /runs/run-1",
}


def _run_dir(root: Path) -> Path:
    monitor = root / "monitor"
    monitor.mkdir(parents=True)
    events = [
        {"detector": "promotion", "kind": "new_domain", "domain_id": "dom-a", "created_ms": 10,
         "window_end_offset": 60, "statistics": {"size": 58.0}},
        {"detector": "domain_distance", "kind": "drift", "domain_id": "dom-a", "created_ms": 50,
         "window_end_offset": 900, "statistics": {"recent_docs": 256.0}},
        {"detector": "domain_distance", "kind": "drift", "domain_id": "dom-b", "created_ms": 70,
         "window_end_offset": 990, "statistics": {"recent_docs": 7.0}},
    ]  # fmt: skip
    jobs = {
        "job-first": {"job_id": "job-first", "domain_id": "dom-a", "reason": "new_domain",
                      "created_ms": 20},
        "job-drift": {"job_id": "job-drift", "domain_id": "dom-a", "reason": "drift",
                      "created_ms": 50},
    }  # fmt: skip
    statuses = {
        "job-first": {"job_id": "job-first", "domain_id": "dom-a", "state": "finished",
                      "expert_id": "exp-legal1"},
        "job-drift": {"job_id": "job-drift", "domain_id": "dom-a", "state": "failed",
                      "reason": "out of memory"},
    }  # fmt: skip
    (monitor / "live.json").write_text(json.dumps({"drift": events, "jobs": statuses}))
    (monitor / "jobs.json").write_text(json.dumps(jobs))
    return root


def _printed(report: dict, width: int = 120) -> str:
    console = Console(record=True, width=width)
    print_summary(report, console)
    return " ".join(console.export_text().split())  # wrapped cells read as one line


def test_figures_are_rounded_for_reading() -> None:
    assert format_figure(386.8, "seconds") == "6 min 27 s"
    assert format_figure(12.2, "seconds") == "12 s"
    assert format_figure(0.6374712984430753, "percent") == "63.7%"
    assert format_figure(240776.91217218246, "ppl") == "240,776.9"
    assert format_figure(0.2787, "ratio") == "0.28x"
    assert format_figure([], "list") == "none" and format_figure(None, "int") == "-"
    cpu = {"first_ten_mean": 0.812, "last_ten_mean": 0.9349}
    assert format_figure(cpu, "cpu") == "0.81 s first 10, 0.93 s last 10"
    at = {"domain": "legal", "step": 9, "arrived": "news", "moved": {"code/trunk": 3, "news": 1}}
    assert format_figure(at, "rise_at") == (
        "legal at step 9 (news's expert): 3 to code/trunk, 1 to news"
    )


def test_the_summary_is_a_table_with_drift_events_explained(tmp_path: Path) -> None:
    report = {
        **REPORT,
        "run_dir": str(_run_dir(tmp_path)),
        "report": {"timeline.png": "/r/timeline.png", "report.html": "/r/report.html"},
    }
    text = _printed(report)
    assert "wall time │ 6 min 27 s" in text and "386.8" not in text
    assert "63.7%" in text and "0.6374" not in text and "145.7" in text
    assert "legal │ 5,572.2 │ 202.6 │ 96.4%" in text
    assert "{" not in text  # no raw Python dict
    assert text.index("report.html /r/report.html") < text.index("timeline.png /r/timeline.png")
    assert "drift events: 1 new domain, 0 novelty-rate rises, 2 domain drifts" in text
    assert "job job-first (new_domain): expert exp-legal1 registered" in text
    assert "job job-drift (drift): failed: out of memory" in text  # what the drift led to
    assert "no drift job: 7 recent documents were too few" in text  # and why none
    assert "serve was: http://127.0.0.1:40001 (stopped with the demo)" in text
    assert "explore the finished run: worx serve --run /runs/run-1" in text


def test_a_run_kept_serving_shows_its_live_addresses() -> None:
    text = _printed({**REPORT, "keep_serving": True})
    assert "serve: http://127.0.0.1:40001" in text and "Ctrl-C stops" in text
    assert "drift events" not in text  # no run directory: nothing to explain


def test_drift_can_come_from_the_caller_s_records_not_the_saved_files(tmp_path: Path) -> None:
    from router.records import DriftEvent

    event = DriftEvent("ev-1", "domain_distance", "drift", "dom-a", {"recent_docs": 9.0}, 0, 5)
    report = {**REPORT, "run_dir": str(_run_dir(tmp_path))}  # the files say otherwise
    console = Console(record=True, width=120)
    print_summary(report, console, drift=([event], [], {}), names={"dom-a": "court·plaintiff"})
    text = " ".join(console.export_text().split())
    assert "0 new domains, 0 novelty-rate rises, 1 domain drift" in text
    assert "court·plaintiff (dom-a)" in text and "no drift job: 9 recent documents" in text


def test_time_to_expert_reads_as_percentiles_of_the_wait_and_its_parts() -> None:
    waits = {
        "p50_s": {"total_s": 128.7, "detect_s": 40.2, "queue_s": 3.1, "train_s": 85.4},
        "p95_s": {"total_s": 229.9, "detect_s": 60.0, "queue_s": 95.0, "train_s": 130.0},
    }
    report = {**REPORT, "time_to_expert_s": waits, "nmi": 0.92407, "nmi_as_routed": 0.14765}
    text = _printed({**report, "trainers": 2})
    rows = text.split("│ time_to_expert_s")
    assert rows[0].endswith("│ p50 2 min 9 s, p95 3 min 50 s ")  # the whole wait first
    assert rows[1].endswith("until discover asked for a job │ p50 40 s, p95 1 min 0 s ")
    assert rows[2].endswith("the job queued for a trainer │ p50 3 s, p95 1 min 35 s ")
    assert rows[3].endswith("training (and the quality gate) │ p50 1 min 25 s, p95 2 min 10 s ")
    assert "│ 0.924 │ nmi " in text and "│ 0.148 │ nmi_as_routed" in text
    assert "trainer processes │ 2 │ trainers" in text
    none = {key: dict.fromkeys(waits["p50_s"]) for key in waits}
    text = _printed({**REPORT, "time_to_expert_s": none})
    assert "│ no new kind got an expert │ time_to_expert_s" in text
    assert "queued for a trainer │ - │ time_to_expert_s" in text
