"""The whole loop at reduced scale, every stage a separate process on the real embedded
broker: ingest, route, discover, trainer, serve, monitor (driven by `worx demo
--keep-serving`), then the finished run explored from its files with no broker.

One demo run for the module; the tests use it in the order they are written, the last one
ends it with Ctrl-C as a user would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from experts.testing import build_tiny_trunk
from router.table_file import read_rows
from tests.support.reduced_loop import NEW_DOMAINS, SMALL_LOOP
from topology.commands import main
from worx.scenario import Scenario

pytestmark = [pytest.mark.broker, pytest.mark.slow]

SERVING = re.compile(r"serving the finished run on (\S+) dashboard (\S+)")


@dataclass
class FinishedDemo:
    process: subprocess.Popen
    marker: str  # WORX_E2E_MARKER of every process the demo started
    report: dict
    run_dir: Path
    serve_url: str  # `worx serve --run <run_dir>`, started by --keep-serving
    dashboard_url: str
    output: list[str] = field(default_factory=list)  # the demo's stdout and stderr lines

    def stop(self, timeout_s: float = 60.0) -> int:
        """Ctrl-C, as a user ends --keep-serving; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout_s)
        return self.process.returncode

    def tail(self) -> str:
        return "\n".join(self.output[-60:])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("demo")
    scenario = Scenario.from_directory()
    texts = [doc.text for name in NEW_DOMAINS for doc in scenario.domains[name][:80]]
    trunk = build_tiny_trunk(root / "trunk", layers=2, width=64, vocab_size=512, texts=texts)
    marker = f"worx-e2e-{uuid.uuid4().hex}"
    report_path = root / "report.json"
    env = {**os.environ, **SMALL_LOOP, "WORX_E2E_MARKER": marker}
    command = [
        sys.executable, "-m", "topology.commands", "demo",
        "--trunk", str(trunk),
        "--old-domains", "",
        "--new-domains", ",".join(NEW_DOMAINS),
        "--per-domain", "150",
        "--mixture-docs", "40",
        "--out", str(root / "runs"),
        "--report-json", str(report_path),
        "--timeout", "420",
        "--keep-serving",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output: list[str] = []
    found: list[re.Match] = []
    event = threading.Event()

    def drain() -> None:  # read every line, so the demo never blocks on a full pipe
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            match = SERVING.search(line)
            if match and not found:
                found.append(match)
                event.set()
        event.set()  # the demo ended

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 560
    while not event.wait(1.0) and time.monotonic() < deadline:
        pass
    try:
        assert found, "the demo never served its finished run:\n" + "\n".join(output[-80:])
        report = json.loads(report_path.read_text())
        run_dir = Path(report["run_dir"])
        yield FinishedDemo(process, marker, report, run_dir, *found[0].groups(), output)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """In-process `worx` commands see no WORX_* setting and no worx.toml."""
    for name in [k for k in os.environ if k.startswith("WORX_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_two_new_domains_become_two_experts_with_nothing_forgotten(demo):
    report = demo.report

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
    # the monitor's cost of each registration, and every expert verified again at the end
    cpu = report["monitor_cpu_s_per_registration"]
    assert cpu["registrations"] == 2 and all(c > 0 for c in cpu["first_ten"])
    history = json.loads((demo.run_dir / "monitor" / "history.json").read_text())
    assert history["verified"]["experts"] == 2 and history["verified"]["problems"] == 0
    assert report["documents"] + report["dead_letters"] == report["documents_fed"]
    assert report["dead_letters"] >= 1  # the malformed lines of the stream
    assert report["routed"] == report["documents"]
    assert Path(report["report"]["report.html"]).exists()
    assert report["finished"] and report["keep_serving"]
    assert report["explore_command"] == f"worx serve --run {demo.run_dir}"


def heldout_text(run_dir: Path, label: str) -> str:
    """A document of ``label`` the stream never carried."""
    streamed = set()
    for line in (run_dir / "stream.jsonl").read_text().splitlines():
        try:
            streamed.add(json.loads(line)["id"].removesuffix(".m"))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # the malformed lines mixed into the stream
    docs = Scenario.from_directory().domains[label]
    return next(d.text for d in docs if d.doc_id not in streamed and len(d.text) > 600)


def legal_row(demo) -> dict:
    """The run's table row of the legal domain (it has an expert)."""
    rows = [r for r in read_rows(demo.run_dir / "domains.json") if r.expert_ids]
    return next(r for r in rows if r.label_hint == "legal").to_dict()


def test_the_finished_run_is_served_from_its_files_and_a_heldout_doc_gets_its_expert(demo):
    # the broker and every stage are gone: `worx serve --run` has only the run's files
    legal, text = legal_row(demo), heldout_text(demo.run_dir, "legal")
    with urllib.request.urlopen(f"{demo.serve_url}/health", timeout=30) as response:
        health = json.loads(response.read())
    assert health["domains"] == len(read_rows(demo.run_dir / "domains.json"))
    assert health["experts"] == 2 and health["experts_without_domain"] == []
    assert health["followers"] == {}
    request = urllib.request.Request(
        f"{demo.serve_url}/score", data=json.dumps({"text": text, "explain": True}).encode()
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        scored = json.loads(response.read())
    assert scored["domain"] == legal["domain_id"]
    assert scored["experts"] and set(scored["experts"]) <= set(legal["expert_ids"])
    assert scored["explain"]["decision"]["name"] == "legal"
    with urllib.request.urlopen(demo.dashboard_url, timeout=30) as response:
        assert response.status == 200 and b"<html" in response.read().lower()


def test_explain_says_which_domain_cosine_threshold_and_experts(demo, clean_env, tmp_path, capsys):
    legal = legal_row(demo)
    document = tmp_path / "doc.txt"
    document.write_text(heldout_text(demo.run_dir, "legal"))
    assert main(["explain", str(document), "--run", str(demo.run_dir)]) == 0
    shown = capsys.readouterr().out
    assert f"legal ({legal['domain_id']})" in shown
    assert f"{legal['threshold']:.3f}" in shown and "cosine" in shown
    assert all(expert in shown for expert in legal["expert_ids"])
    assert "with the trunk alone" in shown

    assert main(["explain", str(document), "--run", str(demo.run_dir), "--json"]) == 0
    why = json.loads(capsys.readouterr().out)
    assert why["decision"]["domain_id"] == legal["domain_id"]
    top = why["nearest"][0]
    assert top["domain_id"] == legal["domain_id"] and top["name"] == "legal"
    assert top["threshold"] == pytest.approx(legal["threshold"], abs=1e-4)
    assert f"{top['cosine']:.3f}" in shown  # the table showed the same cosine
    assert set(why["experts"]) <= set(legal["expert_ids"]) and why["served_by"] == "experts"
    assert why["perplexity"]["with_experts"] < why["perplexity"]["trunk_alone"]


def test_domains_lists_the_runs_table(demo, clean_env, capsys):
    rows = read_rows(demo.run_dir / "domains.json")
    assert main(["domains", "--run", str(demo.run_dir), "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["domain_id"] for r in listed] == [r.domain_id for r in rows]
    assert {r["label_hint"] for r in listed} == set(demo.report["domain_labels"].values())
    assert main(["domains", "--run", str(demo.run_dir)]) == 0
    table = capsys.readouterr().out
    for row in rows:
        assert row.domain_id in table and (row.label_hint or "") in table
        assert all(expert in table for expert in row.expert_ids)


def test_ctrl_c_ends_keep_serving_cleanly_and_leaves_no_process(demo, processes_with):
    assert demo.stop() == 0, demo.tail()
    assert processes_with(demo.marker) == []
