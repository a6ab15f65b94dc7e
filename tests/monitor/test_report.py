"""`worx report` and `worx monitor --once` on the small run's state directory."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from tests.support.smallrun import ALL_DOMAINS, SmallRun
from topology.commands import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.mark.slow
def test_worx_report_writes_html_pngs_and_json(small_run: SmallRun, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["report", "--state-dir", str(small_run.root / "monitor"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    pngs = ["heatmap.png", "perplexity.png", "forgetting.png", "timeline.png"]
    for name in [*pngs, "report.html", "figures.json"]:
        assert (out / name).is_file() and name in printed
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 20_000
    figures = json.loads((out / "figures.json").read_text())
    ours = figures["runs"]["ours"]
    assert ours["domains"] == [*ALL_DOMAINS]
    rows = small_run.history.rows("ours")
    assert ours["loss"] == [[r.loss[d] for d in ALL_DOMAINS] for r in rows]
    assert len(figures["runs"]["dense_baseline"]["loss"]) == 4
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4  # self-contained
    assert "<script" not in page and "http://" not in page and "https://" not in page
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copytree(out, ARTIFACTS / "monitor-report", dirs_exist_ok=True)


def test_worx_report_without_history_says_what_to_do(tmp_path: Path, capsys) -> None:
    assert main(["report", "--state-dir", str(tmp_path)]) == 2
    assert "run `worx monitor` first" in capsys.readouterr().err


def test_monitor_once_prints_the_matrix_and_metrics(small_run: SmallRun, capsys) -> None:
    assert main(["monitor", "--once", "--state-dir", str(small_run.root / "monitor")]) == 0
    out = capsys.readouterr().out
    for domain in ALL_DOMAINS:
        assert domain in out
    assert "trunk alone" in out and "scripture-e1" in out
    assert "backward transfer" in out and "dense fine-tuning" in out
    assert "WEIGHT FORGETTING" not in out


@pytest.mark.parametrize("command", ["monitor", "report"])
def test_help_is_useful(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--state-dir" in capsys.readouterr().out


@pytest.mark.slow
def test_worx_monitor_serves_the_history_until_sigterm(small_run: SmallRun) -> None:
    import json
    import signal
    import subprocess
    import sys
    import urllib.request

    cmd = [
        sys.executable,
        "-m",
        "topology.commands",
        "monitor",
        "--no-stream",
        "--port",
        "0",
        "--state-dir",
        str(small_run.root / "monitor"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # "dashboard on http://127.0.0.1:PORT/ ..."
        assert line.startswith("dashboard on http://127.0.0.1:"), proc.stderr.read()
        url = line.split()[2]
        with urllib.request.urlopen(url + "api/state", timeout=10) as res:
            assert json.loads(res.read())["headline"]["experts"] == 3
        with urllib.request.urlopen(url + "metrics", timeout=10) as res:
            assert b"worx_domain_perplexity" in res.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_monitor_once_evaluate_loads_trunk_and_store(
    small_run: SmallRun, tmp_path: Path, capsys, monkeypatch
) -> None:
    """`--once --evaluate` on a fresh state dir: the trunk-alone row on every held-out set."""
    shutil.copytree(small_run.root / "heldout", tmp_path / "heldout")
    assert main(["monitor", "--once", "--state-dir", str(tmp_path)]) == 2
    assert "seed 1, not 0" in capsys.readouterr().err  # another sample: refused, with the fix
    monkeypatch.setenv("WORX_MONITOR__HELDOUT_SEED", "1")
    monkeypatch.setenv("WORX_MONITOR__HELDOUT_PER_DOMAIN", "6")
    monkeypatch.setenv("WORX_MONITOR__MAX_TOKENS", "64")
    args = [
        "monitor",
        "--once",
        "--evaluate",
        "--state-dir",
        str(tmp_path),
        "--trunk",
        str(small_run.trunk.path),
        "--store",
        str(small_run.root / "store"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trunk alone" in out and "news" in out
    from monitor.history import MatrixHistory

    [row] = MatrixHistory(tmp_path).rows("ours")
    assert row.step == 0 and sorted(row.loss) == sorted(ALL_DOMAINS)
    assert row.loss == small_run.history.rows("ours")[0].loss  # same trunk, same documents


@pytest.mark.slow
def test_once_and_report_show_the_domain_labels_kept_on_disk(
    small_run: SmallRun, tmp_path: Path, capsys
) -> None:
    """Labels from the domain table persist next to the history; --once and report read them."""
    from monitor.labels import FILE, DomainLabels
    from router.records import DomainRecord

    root = tmp_path / "monitor"
    shutil.copytree(small_run.root / "monitor", root)
    labels = DomainLabels(root)
    record = DomainRecord(domain_id="legal", centroid=[1.0], threshold=0.5, size=3, cohesion=0.9)
    labels.apply(dataclasses.replace(record, label_hint="Court rulings"))
    labels.apply(dataclasses.replace(record, domain_id="news", label_hint=None))  # no label
    assert json.loads((root / FILE).read_text()) == {"legal": "Court rulings"}
    assert DomainLabels(root).snapshot() == {"legal": "Court rulings"}  # after a restart

    assert main(["monitor", "--once", "--state-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "Court rulings" in out and "news" in out
    assert main(["report", "--state-dir", str(root), "--out", str(tmp_path / "r")]) == 0
    figures = json.loads((tmp_path / "r" / "figures.json").read_text())
    ours = figures["runs"]["ours"]
    names = dict(zip(ours["domains"], ours["domain_names"], strict=True))
    assert names["legal"] == "Court rulings" and names["news"] == "news"
    assert "Court rulings" in (tmp_path / "r" / "report.html").read_text()

    (root / FILE).write_text('["not", "an", "object"]')
    capsys.readouterr()
    assert main(["report", "--state-dir", str(root), "--out", str(tmp_path / "r2")]) == 2
    assert "domain_labels.json" in capsys.readouterr().err
    assert main(["monitor", "--once", "--state-dir", str(root)]) == 2
    assert "delete it" in capsys.readouterr().err
