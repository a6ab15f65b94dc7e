"""`worx demo --store-url s3://...`: the loop with its experts in a bucket of a real
S3-protocol server (moto's, on 127.0.0.1), the scenario of tests/e2e/test_loop.py.

The trainer writes the bucket; serve and the monitor read it through caches of their own
(``<run>/expert-cache/<role>``): the stages share only the broker and the bucket, and
nothing lands in the run's directory store.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experts.store import MANIFEST, WEIGHTS
from experts.testing import build_tiny_trunk
from tests.support.reduced_loop import NEW_DOMAINS, SMALL_LOOP
from tests.support.s3 import S3Server
from worx.scenario import Scenario

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_demo_keeps_its_experts_in_the_bucket_and_stages_share_nothing_else(tmp_path: Path):
    scenario = Scenario.from_directory()
    texts = [doc.text for name in NEW_DOMAINS for doc in scenario.domains[name][:80]]
    trunk = build_tiny_trunk(tmp_path / "trunk", layers=2, width=64, vocab_size=512, texts=texts)
    with S3Server() as s3:
        bucket = s3.new_bucket()
        url = f"s3://{bucket}/loop"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORX_", "AWS_"))}
        env.update({**SMALL_LOOP, **s3.env})
        report_path = tmp_path / "report.json"
        command = [
            sys.executable, "-m", "topology.commands", "demo",
            "--trunk", str(trunk),
            "--old-domains", "",
            "--new-domains", ",".join(NEW_DOMAINS),
            "--per-domain", "150",
            "--mixture-docs", "40",
            "--out", str(tmp_path / "runs"),
            "--report-json", str(report_path),
            "--timeout", "420",
            "--store-url", url,
        ]  # fmt: skip
        done = subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=560
        )
        output = (done.stdout + done.stderr)[-4000:]
        assert done.returncode == 0, output
        report = json.loads(report_path.read_text())
        client = s3.client()
        listed = client.list_objects_v2(Bucket=bucket, Prefix="loop/").get("Contents", [])
        keys = {item["Key"] for item in listed}
        manifests = {
            k.split("/")[1]: json.loads(client.get_object(Bucket=bucket, Key=k)["Body"].read())
            for k in keys
            if k.endswith("/" + MANIFEST) and k.count("/") == 2
        }
    run_dir = Path(report["run_dir"])
    assert report["finished"] and report["experts"] == 2, output
    assert report["new_domains_with_expert"] == 2 and report["weight_forgetting"] == 0
    assert len(manifests) == 2 and all(f"loop/{e}/{WEIGHTS}" in keys for e in manifests)
    assert not any("/.quarantine/" in k for k in keys)
    store_dir = run_dir / "experts"  # the directory store the stages would otherwise share
    assert not store_dir.exists() or not any(store_dir.iterdir())
    # serve and the monitor each fetched every expert into their own cache, verified
    for role in ("serve", "monitor"):
        for expert_id, manifest in manifests.items():
            copy = run_dir / "expert-cache" / role / expert_id / WEIGHTS
            assert copy.is_file(), (role, expert_id)
            assert hashlib.sha256(copy.read_bytes()).hexdigest() == manifest["sha256"]
