"""File ingest on the real embedded broker: exact counts, dead-letter reasons, SIGKILL resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from ingest.config import IngestConfig
from ingest.files import FileIngestor
from ingest.records import DeadLetter, Doc
from tests.support.ingest_testdata import BAD_LINES, MIXED_CONFIG, write_mixed_file
from topology.runtimes.publisher import publisher

pytestmark = pytest.mark.broker


def read_docs(drain_topic, topics):
    docs = [Doc.from_json(value) for _, value in drain_topic(topics.docs)]
    letters = [DeadLetter.from_json(value) for _, value in drain_topic(topics.dlq)]
    return docs, letters


def test_5000_good_and_1000_bad_records(tmp_path, kafka_conf, topics, drain_topic):
    path = tmp_path / "mixed.jsonl"
    good, expected = write_mixed_file(path)
    sink = publisher(kafka_conf, topics)
    report = FileIngestor(IngestConfig(**MIXED_CONFIG), sink).run([path])

    docs, letters = read_docs(drain_topic, topics)
    assert len(docs) == 5000 and {d.doc_id for d in docs} == good
    assert all(d.source == "file:mixed.jsonl" and d.label in {"d0", "d1", "d2"} for d in docs)
    assert len(letters) == 1000
    assert {letter.source_offset: letter.reason for letter in letters} == expected
    assert all(letter.source_topic == f"file:{path}" for letter in letters)
    by_line = {n: raw for n, raw in enumerate(path.read_bytes().split(b"\n"), start=1)}
    assert all(letter.original() == by_line[letter.source_offset] for letter in letters)
    assert Counter(letter.reason for letter in letters) == Counter(expected.values())
    assert {reason for reason, _ in BAD_LINES} == set(expected.values())
    assert report.docs == 5000 and sum(report.dead_letters.values()) == 1000


def test_sigkill_half_way_then_restart_loses_nothing(tmp_path, broker, topics, drain_topic):
    path = tmp_path / "mixed.jsonl"
    good, expected = write_mixed_file(path, seed=11)
    checkpoint = tmp_path / "ingest.ckpt.json"
    batch = 200
    env = {
        **os.environ,
        "WORX_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_INGEST__BATCH_SIZE": str(batch),
        "WORX_INGEST__STRICT": "true",
        "WORX_INGEST__DOMAIN_FIELD": "domain",
        "WORX_INGEST__MAX_DOC_CHARS": "1000",
    }
    env.pop("WORX_CONFIG", None)
    cmd = [sys.executable, "-m", "topology.commands", "ingest", str(path), "--no-progress"]
    cmd += ["--checkpoint", str(checkpoint)]
    worker = subprocess.Popen([*cmd, "--rate", "2000"], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        done = 0
        while done < 2400:  # wait for the checkpoint to pass 40 %, then kill
            assert worker.poll() is None, "the worker ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint progress within 60 s"
            time.sleep(0.05)  # polling another process's file; there is no event to await
            if checkpoint.exists():
                state = json.loads(checkpoint.read_text())
                done = next(iter(state["files"].values()))["done"]
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        if worker.poll() is None:
            worker.kill()
    state = json.loads(checkpoint.read_text())
    entry = next(iter(state["files"].values()))
    assert not entry["complete"] and entry["done"] < 6000

    restarted = subprocess.run(
        cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert restarted.returncode == 0, restarted.stderr
    assert next(iter(json.loads(checkpoint.read_text())["files"].values()))["complete"]

    docs, letters = read_docs(drain_topic, topics)
    ids = Counter(d.doc_id for d in docs)
    assert set(ids) == good  # every good id arrived, nothing else
    duplicates = sum(ids.values()) - len(ids)
    replayed_letters = len(letters) - len({letter.source_offset for letter in letters})
    assert duplicates + replayed_letters <= batch  # at most the one uncheckpointed batch
    assert {letter.source_offset: letter.reason for letter in letters} == expected


def test_rerun_with_a_complete_checkpoint_produces_nothing(tmp_path, kafka_conf, topics):
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": f"t {i}"}) + "\n" for i in range(30)))
    checkpoint = tmp_path / "ck.json"
    config = IngestConfig(batch_size=7)
    first = FileIngestor(config, publisher(kafka_conf, topics), checkpoint=checkpoint).run([path])
    assert first.docs == 30
    again = FileIngestor(config, publisher(kafka_conf, topics), checkpoint=checkpoint).run([path])
    assert (again.inputs, again.resumed_skipped, again.docs) == (0, 30, 0)
    other = FileIngestor(
        config, publisher(kafka_conf, topics), checkpoint=checkpoint, target="elsewhere"
    ).run([path])
    assert other.docs == 30  # a checkpoint for another cluster is not trusted


def test_a_stage_bug_dead_letters_the_input_and_the_ingest_goes_on(
    tmp_path, kafka_conf, topics, drain_topic
):
    path = tmp_path / "three.jsonl"
    path.write_text("".join(json.dumps({"id": f"i{i}", "text": f"t {i}"}) + "\n" for i in range(3)))
    ingestor = FileIngestor(IngestConfig(), publisher(kafka_conf, topics))
    real = ingestor.stage.process

    def buggy(message, record=None):
        if message.offset == 2:
            raise ZeroDivisionError("a bug")
        return real(message, record)

    ingestor.stage.process = buggy
    ingestor.run([path])
    docs, letters = read_docs(drain_topic, topics)
    assert sorted(d.doc_id for d in docs) == ["i0", "i2"]
    assert [(x.reason, x.source_offset) for x in letters] == [("stage_error", 2)]
    assert "ZeroDivisionError: a bug" in letters[0].detail
