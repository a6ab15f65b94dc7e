"""Disk that must not only grow: writers' leftovers cleaned on open, quarantine bounded."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from experts.config import ExpertsConfig
from experts.store import WEIGHTS, ExpertRefused, ExpertStore
from experts.store_housekeeping import WriterLock
from tests.support.experts import FP, tiny_expert


def test_leftovers_of_ended_writers_are_removed_live_ones_kept(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ExpertStore(root, FP)
    live = WriterLock(root, "busy")
    with live as busy:  # a writer still at work (its lock is held)
        busy.mkdir()
        (busy / WEIGHTS).write_bytes(b"partial")
        ended = root / ".tmp-0123456789ab-gone"  # a writer killed: lock file, lock free
        ended.mkdir()
        (root / ".tmp-0123456789ab.lock").touch()
        orphan_lock = root / ".tmp-ba9876543210.lock"  # killed after its rename
        orphan_lock.touch()
        old = root / ".tmp-legacy-1a2b3c4d"  # no lock file (older build): by age only
        old.mkdir()
        recent = root / ".tmp-legacy-5e6f7a8b"
        recent.mkdir()
        stale = time.time() - 7200
        os.utime(old, (stale, stale))
        ExpertStore(root, FP, stale_tmp_after_s=3600)
        assert busy.is_dir() and live.lock_path.exists()
        assert not ended.exists() and not (root / ".tmp-0123456789ab.lock").exists()
        assert not orphan_lock.exists() and not old.exists()
        assert recent.exists()
        # even past any age, a held lock protects its directory
        os.utime(busy, (stale, stale))
        os.utime(busy / WEIGHTS, (stale, stale))
        ExpertStore(root, FP, stale_tmp_after_s=60)
        assert busy.is_dir()
        (busy / WEIGHTS).unlink()
        busy.rmdir()
    assert not live.lock_path.exists()


def test_quarantine_keeps_the_newest_within_count_and_age(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = ExpertStore(root, FP, quarantine_keep=2, quarantine_max_age_s=86400)
    for i in range(4):
        store.put(f"e{i}", tiny_expert(i), "d", [1.0, 0.0])
        (root / f"e{i}" / WEIGHTS).write_bytes(b"\0" * 9)
        try:
            store.get(f"e{i}")
        except ExpertRefused as exc:
            assert exc.quarantined is not None
    assert sorted(q["expert_id"] for q in store.quarantined()) == ["e2", "e3"]
    newest = next((root / ".quarantine").glob("e3-*"))
    reason = json.loads((newest / "reason.json").read_text())
    reason["quarantined_ms"] -= 2 * 86400 * 1000  # two days ago
    (newest / "reason.json").write_text(json.dumps(reason))
    ExpertStore(root, FP, quarantine_keep=2, quarantine_max_age_s=86400)
    assert [q["expert_id"] for q in store.quarantined()] == ["e2"]


def test_retention_settings_come_from_the_experts_section() -> None:
    options = ExpertsConfig(quarantine_keep=5, quarantine_max_age_days=0.5).store_options()
    assert options["quarantine_keep"] == 5 and options["quarantine_max_age_s"] == 43200
