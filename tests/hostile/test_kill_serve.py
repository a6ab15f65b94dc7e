"""`worx serve` SIGKILLed in the middle of a hot registration, then restarted.

The killed process has verified and loaded the new expert and sits before its table swap
(a wrapper around that step, in the child only); it still answers requests. After the
restart every registered expert is served exactly once, the answers equal those before
the kill, and the store is as the trainer left it (nothing quarantined, nothing moved).
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from experts.store import ExpertStore
from experts.trunk import trunk_fingerprint
from router.embed import default_embedder
from tests.support.experts import (
    domain_record,
    domain_texts,
    make_domain_expert,
    trunk_dirs,  # noqa: F401 - the shared fixture
)
from tests.support.processes import read_line, start_worx

TEXTS = {
    "code": domain_texts("python_code", 1, skip=40)[0],
    "legal": domain_texts("legal", 1, skip=40)[0],
}

BLOCK_BEFORE_SWAP = r"""
def install(block):
    from experts.serving.registry import ExpertRegistry
    verify = ExpertRegistry.verify
    def verify_then_block(self, registration):
        manifest = verify(self, registration)  # verified and loaded; the swap comes next
        if registration.expert_id == "legal":
            block()
        return manifest
    ExpertRegistry.verify = verify_then_block
"""


class _Width:
    hidden_size = 32

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint


def _get(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(base + path, data=data), timeout=60) as r:
        return json.loads(r.read())


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)  # polling the HTTP API: the follower has no event to await


def test_sigkill_mid_registration_then_restart_serves_every_expert_once(
    trunk_dirs,  # noqa: F811 - the fixture imported above
    broker,
    kafka_conf,
    topics,
    tmp_path: Path,  # noqa: F811
) -> None:
    trunk_dir = trunk_dirs["gpt2"]
    store = ExpertStore(tmp_path / "store", trunk_fingerprint(trunk_dir))
    width, embedder = _Width(store.trunk_fingerprint), default_embedder()
    env = {
        "WORX_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__PARTITIONS": "2",
        "OMP_NUM_THREADS": "1",
    }
    args = ["serve", "--trunk", str(trunk_dir), "--store", str(store.root), "--port", "0"]
    producer = Producer(kafka_conf)
    for domain in ("python_code", "legal"):
        producer.produce(
            topics.domains, key=domain, value=domain_record(embedder, domain).to_json()
        )
    code = make_domain_expert(store, width, embedder, "code", "python_code", 1)
    producer.produce(topics.experts, key="code", value=code.registration().to_json())
    assert producer.flush(10) == 0
    log = tmp_path / "serve.log"

    killed = start_worx(args, env, log, block_at=BLOCK_BEFORE_SWAP)
    try:
        base = read_line(killed, "serving on", 120, log).split()[-1]
        _wait_for(
            lambda: _get(base, "/health")["experts"] == 1 and _get(base, "/health")["domains"] == 2
        )
        before = {name: _get(base, "/score", {"text": text}) for name, text in TEXTS.items()}
        assert before["code"]["experts"] == {"code": 1.0} and before["legal"]["experts"] == {}
        legal = make_domain_expert(store, width, embedder, "legal", "legal", 2)  # as the trainer
        producer.produce(topics.experts, key="legal", value=legal.registration().to_json())
        assert producer.flush(10) == 0
        read_line(killed, "blocked", 60, log)
        during = _get(base, "/score", {"text": TEXTS["code"]})  # still serving meanwhile
        assert during["mean_loss"] == before["code"]["mean_loss"]
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(30) == -signal.SIGKILL
    finally:
        if killed.poll() is None:
            killed.kill()

    restarted = start_worx(args, env, log)
    try:
        base = read_line(restarted, "serving on", 120, log).split()[-1]
        _wait_for(lambda: _get(base, "/health")["domains"] == 2)
        health = _get(base, "/health")
        assert health["experts"] == 2 and health["refusals"] == []
        after = {name: _get(base, "/score", {"text": text}) for name, text in TEXTS.items()}
        assert after["code"]["experts"] == {"code": 1.0}
        assert after["code"]["mean_loss"] == before["code"]["mean_loss"]  # nothing changed
        assert after["legal"]["experts"] == {"legal": 1.0}  # the interrupted one, now served
        listed = [e["expert_id"] for e in _get(base, "/experts")["experts"]]
        assert listed == ["code", "legal"]  # each once
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0, log.read_text()[-3000:]
    assert store.ids() == ["code", "legal"] and store.quarantined() == []
    assert store.verify().ok == ["code", "legal"]
    assert not [p for p in store.root.iterdir() if p.name.startswith(".tmp-")]
