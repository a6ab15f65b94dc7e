"""`worx demo --quick --stream mixed`: the whole loop, every stage a separate process on
the real embedded broker, fed the mixed (company-shaped) stream (the quick plan's old and new
domains mixed from the first document) instead of phases; at the reduced scale of
tests/e2e/test_loop.py (a tiny trunk, tests/support/reduced_loop.py's settings).

What is checked is what the feed changes: the file the demo streamed is the mixed stream
of its plan (the same in this process), every line of it is accounted for (ingested or a
dead letter with a reason), and the summary after it is the phased run's, with experts
registered and nothing forgotten.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experts.testing import build_tiny_trunk
from tests.support.reduced_loop import SMALL_LOOP
from topology.commands.demo import QUICK
from topology.loop.demo_run import BAD_LINES, TRUNK_DOMAINS, DemoPlan, stream_lines
from worx.scenario import Scenario

pytestmark = [pytest.mark.broker, pytest.mark.slow]

DOCS = 700


def test_quick_demo_on_a_mixed_stream(tmp_path: Path):
    scenario = Scenario.from_directory()
    labels = [*TRUNK_DOMAINS, *QUICK["new_domains"]]
    texts = [doc.text for name in labels for doc in scenario.domains[name][:40]]
    trunk = build_tiny_trunk(tmp_path / "trunk", layers=2, width=64, vocab_size=512, texts=texts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env.update(SMALL_LOOP)
    report_path = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "topology.commands", "demo",
        "--quick", "--stream", "mixed", "--docs", str(DOCS),
        "--trunk", str(trunk),
        "--no-serve",
        "--out", str(tmp_path / "runs"),
        "--report-json", str(report_path),
        "--timeout", "300",
    ]  # fmt: skip
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420
    )
    output = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, output
    report = json.loads(report_path.read_text())
    run_dir = Path(report["run_dir"])

    # the demo streamed the mixed stream of its plan, not phases
    plan = DemoPlan(run_dir=run_dir, trunk_dir=trunk, stream="mixed", docs=DOCS)
    for name, value in QUICK.items():
        setattr(plan, name, value)
    streamed = (run_dir / "stream.jsonl").read_text().splitlines()
    assert streamed == stream_lines(plan)
    domains = [json.loads(line)["domain"] for line in streamed if line not in BAD_LINES]
    assert len(domains) == DOCS and set(domains) == set(labels)
    assert len(set(domains[:100])) >= 2  # mixed from the start

    # everything after the feed as in the phased run
    assert report["stream"] == "mixed" and report["finished"], output
    assert report["documents_fed"] == len(streamed)
    bad = sum(line in BAD_LINES for line in streamed)
    assert report["dead_letters"] == bad >= 1
    assert report["documents"] == DOCS and report["all_accounted_for"]
    assert report["routed"] == report["documents"]
    assert set(report["domain_labels"].values()) <= set(labels)
    # both new domains (scripture joins a third of the way in, at seed 0) get an expert
    # that lowers their held-out perplexity; the old domains' are counted apart
    assert report["new_domains_with_expert"] == 2 and report["spurious_experts"] == 0
    assert report["experts"] == 2 + report["old_domain_experts"]
    assert set(report["new_domains"]) == set(QUICK["new_domains"])
    for label, figures in report["new_domains"].items():
        assert figures["ppl_final"] < figures["ppl_trunk"], (label, figures)
    waits = report["time_to_expert_s"]
    assert waits["never"] == []
    assert report["time_to_expert_p50_s"] == waits["p50_s"]["total_s"] > 0
    assert report["time_to_expert_p95_s"] == waits["p95_s"]["total_s"]
    assert report["time_to_expert_p95_s"] >= report["time_to_expert_p50_s"]
    for label, wait in waits["per_label"].items():  # the parts add up to the whole
        parts = (wait["detect_s"], wait["queue_s"], wait["train_s"])
        assert sum(parts) == pytest.approx(wait["total_s"], abs=0.2), (label, wait)
    assert 0 < report["nmi"] <= 1
    assert report["weight_forgetting"] == 0
    assert Path(report["report"]["report.html"]).exists()
