"""A live `worx serve` subprocess under a steady request stream receives three registrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from experts.store import ExpertStore
from router.embed import default_embedder
from tests.support.experts import domain_record, domain_texts, make_domain_expert

DOMAINS = {"code": "python_code", "legal": "legal", "bio": "biomedical"}
TOKEN = "live-serve-token"  # given to the process through WORX_SERVE__API_TOKEN
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TEXTS = {name: domain_texts(domain, 1, skip=40)[0] for name, domain in DOMAINS.items()}


class Stream:
    """POST /score in a loop over the three domains' texts; remembers every answer."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.answers: list[tuple[str, int, dict]] = []  # (domain, status, body)
        self.failures: list[str] = []
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name = list(TEXTS)[i % len(TEXTS)]
            i += 1
            data = json.dumps({"text": TEXTS[name]}).encode()
            request = urllib.request.Request(f"{self.base}/score", data=data, headers=AUTH)
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, body = response.status, json.loads(response.read())
            except (urllib.error.URLError, OSError, ValueError) as exc:
                status, body = -1, {"error": repr(exc)}
            with self.changed:
                self.answers.append((name, status, body))
                if status != 200:
                    self.failures.append(f"{name}: {status} {body}")
                self.changed.notify_all()

    def used(self, name: str, expert_id: str) -> bool:
        return any(n == name and b.get("experts") == {expert_id: 1.0} for n, _, b in self.answers)


@pytest.mark.timeout(240)
def test_live_serve_registers_three_experts_without_a_failed_request(
    trunk_dirs, broker, kafka_conf, topics, tmp_path: Path
) -> None:
    trunk_dir = trunk_dirs["gpt2"]
    from experts.trunk import trunk_fingerprint

    store = ExpertStore(tmp_path / "store", trunk_fingerprint(trunk_dir))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env.update(
        WORX_KAFKA__BOOTSTRAP_SERVERS=broker.bootstrap_servers,
        WORX_KAFKA__TOPIC_PREFIX=topics.prefix,
        WORX_KAFKA__PARTITIONS="2",
        WORX_SERVE__API_TOKEN=TOKEN,
        OMP_NUM_THREADS="1",
    )
    argv = [sys.executable, "-m", "topology.commands", "serve", "--trunk", str(trunk_dir)]
    argv += ["--store", str(store.root), "--port", "0"]
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    stream = None
    try:
        line = proc.stdout.readline()  # blocks until ready (or '' if it died)
        assert line.startswith("serving on http://127.0.0.1:"), log_path.read_text()[-3000:]
        base = line.split()[-1]
        stream = Stream(base)
        stream.thread.start()
        with stream.changed:
            assert stream.changed.wait_for(lambda: len(stream.answers) >= 3, timeout=60)
        assert all(b["experts"] == {} for _, _, b in stream.answers[:3])  # no experts yet

        producer = Producer(kafka_conf)
        embedder = default_embedder()
        for domain in DOMAINS.values():  # what discover announces: the domains it routes by
            row = domain_record(embedder, domain)
            producer.produce(topics.domains, key=domain, value=row.to_json())
        first_use: dict[str, int] = {}
        for seed, (name, domain) in enumerate(DOMAINS.items(), start=1):
            if name == "bio":  # a corrupt expert announced in between is refused, alone
                bad = make_domain_expert(store, _TrunkInfo(store), embedder, "bad", domain, 9)
                weights = store.root / "bad" / "weights.safetensors"
                weights.write_bytes(weights.read_bytes()[:-5])
                producer.produce(topics.experts, key="bad", value=bad.registration().to_json())
            # what the trainer does: write the store, then announce on the topic
            manifest = make_domain_expert(store, _TrunkInfo(store), embedder, name, domain, seed)
            producer.produce(topics.experts, key=name, value=manifest.registration().to_json())
            assert producer.flush(10) == 0
            with stream.changed:
                assert stream.changed.wait_for(lambda n=name: stream.used(n, n), timeout=60), (
                    stream.answers[-3:]
                )
                first_use[name] = next(
                    i
                    for i, (n, _, b) in enumerate(stream.answers)
                    if n == name and b.get("experts") == {name: 1.0}
                )
        with stream.changed:  # a few more rounds with all three registered
            target = len(stream.answers) + 6
            assert stream.changed.wait_for(lambda: len(stream.answers) >= target, timeout=60)
        request = urllib.request.Request(f"{base}/health", headers=AUTH)
        with urllib.request.urlopen(request, timeout=30) as response:
            health = json.loads(response.read())
        assert health["experts"] == 3 and health["failed_requests"] == 0
        assert health["domains"] == 3 and health["experts_without_domain"] == []
        assert [(r["expert_id"], r["reason"]) for r in health["refusals"]] == [("bad", "truncated")]
        assert set(health["followers"]) == {topics.domains, topics.experts}
        with pytest.raises(urllib.error.HTTPError) as refused:  # the token is required
            urllib.request.urlopen(f"{base}/experts", timeout=30)
        assert refused.value.code == 401
    finally:
        if stream is not None:
            stream.stop.set()
            stream.thread.join(60)
        proc.terminate()
        proc.wait(30)

    assert stream.failures == []
    assert len(stream.answers) >= 12
    for name, start in first_use.items():  # once used, every later request for it uses it
        later = [b["experts"] for n, _, b in stream.answers[start:] if n == name]
        assert later and all(e == {name: 1.0} for e in later), (name, later)
    versions = [b["table_version"] for _, _, b in stream.answers]
    assert versions == sorted(versions)  # tables only move forward
    assert proc.returncode == 0, log_path.read_text()[-3000:]


class _TrunkInfo:
    """What make_domain_expert needs of a trunk (width), without loading a second model."""

    hidden_size = 32

    def __init__(self, store: ExpertStore) -> None:
        self.fingerprint = store.trunk_fingerprint
