"""`worx ingest`, `worx broker`, `worx demo` as a new user runs them: output, exit, no leftovers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from worx.bundled import corpus_files

pytestmark = pytest.mark.slow  # every test starts a process

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [str(p) for p in corpus_files()]
WORX = [sys.executable, "-m", "topology.commands"]


def clean_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env["COLUMNS"] = "120"
    return env


def brokers_on(port: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "tansu" in cmdline and f"127.0.0.1:{port}" in cmdline:
            found.append(proc)
    return found


@pytest.mark.parametrize("command", ["ingest", "connect", "stream", "demo", "broker"])
def test_every_command_has_help(command):
    out = subprocess.run([*WORX, command, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "usage: worx" in out.stdout


def test_ingest_the_bundled_corpus_with_an_embedded_broker(tmp_path):
    assert len(CORPUS) == 7
    out = subprocess.run(
        [*WORX, "ingest", *CORPUS],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(tmp_path),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"docs -> worx\.docs\s*│\s*8,526", out.stderr), out.stderr[-2000:]
    assert "MB" in out.stderr  # the progress bar's byte counter
    port = re.search(r"embedded broker at 127\.0\.0\.1:(\d+)", out.stderr).group(1)
    assert brokers_on(port) == [], "the embedded broker outlived `worx ingest`"


def test_missing_file_is_a_clear_error(tmp_path):
    out = subprocess.run(
        [*WORX, "ingest", "nope.jsonl"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(tmp_path),
    )
    assert out.returncode == 2 and "no such file: nope.jsonl" in out.stderr


def test_worx_broker_then_ingest_into_it_then_ctrl_c(tmp_path):
    broker = subprocess.Popen(
        [*WORX, "broker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=clean_env(tmp_path),
    )
    try:
        address = broker.stdout.readline().strip()
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address), address
        out = subprocess.run(
            [*WORX, "ingest", "--bootstrap-servers", address, CORPUS[0]],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=clean_env(tmp_path),
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert "embedded broker" not in out.stderr
        assert brokers_on(address.split(":")[1]), "the standalone broker should still run"
    finally:
        broker.send_signal(signal.SIGINT)
        try:
            code = broker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            broker.kill()  # never leave it behind, but fail
            code = broker.wait()
    assert code == 0
    assert brokers_on(address.split(":")[1]) == []
