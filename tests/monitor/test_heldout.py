"""Held-out sets: bounded, seeded, order-independent, idempotent, restart-safe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.heldout import HeldoutSets
from worx.ids import UnsafeIdError


def docs(n: int) -> list[tuple[str, str]]:
    return [(f"doc-{i}", f"text number {i}") for i in range(n)]


def test_bounded_and_independent_of_arrival_order(tmp_path: Path) -> None:
    a = HeldoutSets(tmp_path / "a", capacity=5, seed=3)
    b = HeldoutSets(tmp_path / "b", capacity=5, seed=3)
    for doc_id, text in docs(50):
        a.offer("legal", doc_id, text)
    for doc_id, text in reversed(docs(50)):
        b.offer("legal", doc_id, text)
    assert len(a.docs("legal")) == 5
    assert a.docs("legal") == b.docs("legal")
    assert a.digest("legal") == b.digest("legal")


def test_another_seed_draws_another_sample(tmp_path: Path) -> None:
    a = HeldoutSets(tmp_path / "a", capacity=5, seed=1)
    b = HeldoutSets(tmp_path / "b", capacity=5, seed=2)
    a.offer_many("legal", docs(50))
    b.offer_many("legal", docs(50))
    assert a.digest("legal") != b.digest("legal")


def test_redelivery_is_a_no_op_and_restart_restores(tmp_path: Path) -> None:
    sets = HeldoutSets(tmp_path, capacity=3, seed=0)
    assert sets.offer_many("news", docs(10)) is True
    assert sets.offer_many("news", docs(10)) is False
    assert sets.offer("news", "doc-0", "text number 0") is False
    reopened = HeldoutSets(tmp_path, capacity=3, seed=0)
    assert reopened.docs("news") == sets.docs("news")
    assert reopened.domains() == ["news"]
    body = json.loads((tmp_path / "news.json").read_text())
    assert len(body["docs"]) == 3 and body["seed"] == 0


def test_bad_input_is_refused(tmp_path: Path) -> None:
    sets = HeldoutSets(tmp_path, capacity=3, seed=0)
    with pytest.raises(UnsafeIdError):
        sets.offer("../etc", "d", "text")
    with pytest.raises(ValueError, match="no text"):
        sets.offer("news", "d", "   ")
    with pytest.raises(ValueError, match="capacity"):
        HeldoutSets(tmp_path, capacity=0)
    sets.offer("news", "d", "text")
    with pytest.raises(ValueError, match="seed"):
        HeldoutSets(tmp_path, capacity=3, seed=5)
