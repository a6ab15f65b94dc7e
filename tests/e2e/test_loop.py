"""The whole loop at reduced scale, every stage a separate process on the real embedded
broker: ingest, route, discover, trainer, serve, monitor (driven by `worx demo`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from experts.testing import build_tiny_trunk
from worx.scenario import Scenario

pytestmark = [pytest.mark.broker, pytest.mark.slow]

SMALL_LOOP = {
    "WORX_ROUTER__JOB_DOCS": "100",
    "WORX_TRAINER__MAX_STEPS": "8",
    "WORX_TRAINER__SEQ_LEN": "64",
    "WORX_TRAINER__MICRO_BATCH_SIZE": "4",
    "WORX_TRAINER__GRAD_ACCUM_STEPS": "1",
    "WORX_TRAINER__LR": "0.01",
    "WORX_TRAINER__EVAL_EVERY": "4",
    "WORX_TRAINER__GATE_MARGIN": "0.0",
}


def test_two_new_domains_become_two_experts_with_nothing_forgotten(tmp_path, processes_with):
    scenario = Scenario.from_directory()
    texts = [doc.text for name in ("python_code", "legal") for doc in scenario.domains[name][:80]]
    trunk = build_tiny_trunk(tmp_path / "trunk", layers=2, width=64, vocab_size=512, texts=texts)
    marker = f"worx-e2e-{uuid.uuid4().hex}"
    report_path = tmp_path / "report.json"
    env = {**os.environ, **SMALL_LOOP, "WORX_E2E_MARKER": marker}
    command = [
        sys.executable, "-m", "topology.cli", "demo",
        "--trunk", str(trunk),
        "--old-domains", "",
        "--new-domains", "python_code,legal",
        "--per-domain", "150",
        "--mixture-docs", "40",
        "--out", str(tmp_path / "runs"),
        "--report-json", str(report_path),
        "--timeout", "420",
    ]  # fmt: skip
    result = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())

    # both new domains are discovered; python_code's codec tables sometimes become a small
    # domain of their own (the discovery issue's known split, measured by
    # bench/discovery.py), which must then not get an expert of its own
    assert sorted(set(report["domain_labels"].values())) == ["legal", "python_code"]
    assert report["domains_discovered"] <= 3
    assert report["experts"] == 2
    assert report["new_domains_with_expert"] == 2
    assert report["spurious_experts"] == 0
    for label in ("python_code", "legal"):
        figures = report["new_domains"][label]
        assert figures["ppl_final"] < figures["ppl_trunk"], (label, figures)
    assert report["weight_forgetting"] == 0
    assert report["documents"] + report["dead_letters"] == report["documents_fed"]
    assert report["dead_letters"] >= 1  # the malformed lines of the stream
    assert report["routed"] == report["documents"]
    assert Path(report["report"]["report.html"]).exists()
    assert processes_with(marker) == []
