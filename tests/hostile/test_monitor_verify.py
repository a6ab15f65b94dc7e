"""A tampered expert file against the monitor's verification schedule (monitor/verify.py).

The monitor no longer re-hashes every expert at every registration: the trunk and the new
expert are checked at each one, every expert every ``verify_every`` registrations, after
``verify_every_s`` seconds, on demand and at the end of a run; an expert the store refuses
when a step needs to load it again is found at that step. A flipped byte in an earlier
expert's weights is found at the first of these that comes, reported as weight
forgetting, the expert is quarantined by the store and no longer served, and that step's
losses are measured afresh (the cache is emptied).
"""

from __future__ import annotations

import numpy as np

from experts.store import ExpertStore
from monitor.evaluator import Evaluator
from monitor.history import MatrixHistory
from tests.support.smallrun import (  # noqa: F401 - fixtures
    SmallRun,
    corpus_docs,
    run_copy,
    small_run,
    train_expert,
)

CENTROID = np.full(128, 128**-0.5).tolist()


def _evaluator(run: SmallRun, store: ExpertStore | None = None, **schedule) -> Evaluator:
    return Evaluator(
        run.trunk,
        store or run.store,
        run.heldout,
        run.history,
        run.evaluator.router,
        max_tokens=64,
        **schedule,
    )


def _register(run: SmallRun, evaluator: Evaluator, n: int):
    """Train and register the ``n``-th news expert; the row of its step."""
    news = [t for _, t in corpus_docs("news", 40)[6:]]
    eid = f"news-e{n}"
    run.store.put(eid, train_expert(run.trunk, news, seed=10 + n, steps=3), "news", CENTROID)
    return evaluator.on_registration(eid, "news", CENTROID)[-1]


def _flip(run: SmallRun, expert_id: str) -> None:
    victim = run.root / "store" / expert_id / "weights.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01  # last byte of the last tensor's data
    victim.write_bytes(bytes(data))


def _found(row, expert_id: str) -> bool:
    changed = [c for c in row.weight_changes if c.startswith(f"file/{expert_id}/")]
    refused = [c for c in row.weight_changes if c.startswith(f"store/{expert_id}: refused")]
    return bool(changed) and all(c.endswith(": changed") for c in changed) and bool(refused)


def test_a_tampered_expert_is_found_at_the_next_scheduled_check(
    run_copy: SmallRun,  # noqa: F811 - the fixture imported above
) -> None:
    evaluator = _evaluator(run_copy, verify_every=2, verify_every_s=0)
    first = _register(run_copy, evaluator, 1)  # a process's first step checks everything
    assert first.step == 4 and first.experts_verified == 4 and first.weight_changes == []
    _flip(run_copy, "python_code-e1")
    between = _register(run_copy, evaluator, 2)  # the trunk and news-e2 only
    assert between.experts_verified == 1 and between.weight_changes == []
    scheduled = _register(run_copy, evaluator, 3)  # every second step: all six
    assert scheduled.experts_verified == 6 and _found(scheduled, "python_code-e1")
    assert not [c for c in scheduled.weight_changes if "legal" in c or "trunk" in c]
    assert [q["expert_id"] for q in run_copy.store.quarantined()] == ["python_code-e1"]
    assert "python_code-e1" not in evaluator.loaded  # the server cannot load it either
    # no document is routed to it any more, and the column lost what the expert gave
    detail = run_copy.history.data["detail"]["ours"]
    assert not [
        v for docs in detail.values() for v in docs.values() if "python_code-e1" in v["routing"]
    ]
    assert scheduled.loss["python_code"] > first.loss["python_code"]
    # the next step checks only its own expert, and still reports what is open
    after = _register(run_copy, evaluator, 4)
    assert after.experts_verified == 1 and _found(after, "python_code-e1")


def test_a_time_schedule_checks_every_expert_after_verify_every_s(
    run_copy: SmallRun,  # noqa: F811 - the fixture imported above
) -> None:
    now = [1000.0]
    evaluator = _evaluator(run_copy, verify_every=100, verify_every_s=60)
    evaluator.verifier.clock = lambda: now[0]
    assert _register(run_copy, evaluator, 1).experts_verified == 4
    _flip(run_copy, "legal-e1")
    now[0] += 30
    assert _register(run_copy, evaluator, 2).weight_changes == []  # 30 s: not yet
    now[0] += 31
    late = _register(run_copy, evaluator, 3)
    assert late.experts_verified == 6 and _found(late, "legal-e1")


def test_the_end_of_a_run_checks_every_expert_again(
    run_copy: SmallRun,  # noqa: F811 - the fixture imported above
) -> None:
    evaluator = _evaluator(run_copy, verify_every=100, verify_every_s=0)
    last = _register(run_copy, evaluator, 1)
    assert last.weight_changes == []
    _flip(run_copy, "scripture-e1")
    problems = evaluator.verify_all()  # MonitorStage.finish at SIGTERM
    assert problems and all("scripture-e1" in p for p in problems)
    saved = MatrixHistory(run_copy.root / "monitor")  # on disk, for the run's summary
    row = saved.rows("ours")[-1]
    assert row.step == last.step and _found(row, "scripture-e1")
    assert saved.data["verified"]["experts"] == 4 and saved.data["verified"]["problems"] > 0


def test_an_expert_a_step_must_reload_is_found_at_that_step(
    run_copy: SmallRun,  # noqa: F811 - the fixture imported above
) -> None:
    """With a store budget of one expert, a step that needs an evicted expert loads it
    again, and the store refuses the tampered bytes: the step checks every expert then."""
    size = max(
        (run_copy.root / "store" / e / "weights.safetensors").stat().st_size
        for e in run_copy.experts
    )
    small = ExpertStore(run_copy.root / "store", run_copy.trunk.fingerprint, lru_budget_bytes=size)
    evaluator = _evaluator(run_copy, small, verify_every=100, verify_every_s=0)
    assert _register(run_copy, evaluator, 1).weight_changes == []
    _flip(run_copy, "python_code-e1")
    # python_code's held-out set changes: its new documents must be scored under its expert
    extra = corpus_docs("python_code", 80)[40:]
    assert any(run_copy.heldout.offer_many("python_code", [doc]) for doc in extra)
    row = _register(run_copy, evaluator, 2)
    assert row.experts_verified == 5  # the refusal made it check every expert
    refused = [c for c in row.weight_changes if c.startswith("store/python_code-e1: refused")]
    assert any("[corrupt]" in c for c in refused), row.weight_changes
    assert not [c for c in row.weight_changes if "legal" in c or "scripture" in c]
    assert [q["expert_id"] for q in run_copy.store.quarantined()] == ["python_code-e1"]
    assert "python_code-e1" not in evaluator.loaded
