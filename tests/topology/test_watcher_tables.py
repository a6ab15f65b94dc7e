"""What the loop watcher remembers for the demo's summary (topology/loop/watcher.py): when
each job first started, and each routed document's first decision by its label. No
broker: records are fed to the watcher directly."""

from __future__ import annotations

import pytest

from router.records import RoutedDoc
from topology.composition.topics import Topics
from topology.loop.watcher import MAX_ROWS, NOVEL, LoopWatcher
from trainer.records import TrainStatus

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}  # built, never used: no logs


@pytest.fixture
def watcher():
    watcher = LoopWatcher(NOWHERE, Topics("p"))
    yield watcher
    watcher._consumer.close()


def status(job_id: str, state: str, created_ms: int) -> bytes:
    return TrainStatus(job_id, "dom-a", state, created_ms=created_ms).to_json()


def routed(doc_id: str, domain_id: str | None, label: str | None) -> bytes:
    return RoutedDoc(doc_id, domain_id, 0.5, "p.docs", 0, 0, label=label).to_json()


def test_a_job_keeps_the_time_of_its_first_start(watcher) -> None:
    watcher._apply("train.status", status("job-1", "started", 5_000))
    watcher._apply("train.status", status("job-1", "step", 6_000))
    watcher._apply("train.status", status("job-1", "started", 9_000))  # resumed after a kill
    watcher._apply("train.status", status("job-1", "finished", 12_000))
    watcher._apply("train.status", status("job-2", "skipped", 13_000))  # never started
    state = watcher.state
    assert state.job_started_ms == {"job-1": 5_000}
    assert state.job_status["job-1"].state == "finished"  # the latest status, as before


def test_a_job_starts_when_a_trainer_takes_it_not_when_its_setup_ends(watcher) -> None:
    """The setup (documents fetched, the start chosen among stored experts, the current
    mixture measured) is the trainer's work, not the queue's."""
    watcher._apply("train.status", status("job-1", "taken", 5_000))
    watcher._apply("train.status", status("job-1", "started", 17_000))
    watcher._apply("train.status", status("job-1", "finished", 40_000))
    assert watcher.state.job_started_ms == {"job-1": 5_000}


def test_started_times_are_bounded(watcher) -> None:
    for i in range(MAX_ROWS + 5):
        watcher._apply("train.status", status(f"job-{i}", "started", 1_000 + i))
    started = watcher.state.job_started_ms
    assert len(started) == MAX_ROWS and "job-0" not in started
    assert started[f"job-{MAX_ROWS + 4}"] == 1_000 + MAX_ROWS + 4


def test_each_routed_document_counts_once_by_label_and_first_decision(watcher) -> None:
    watcher._apply("routed", routed("d1", None, "legal"))
    watcher._apply("routed", routed("d1", "dom-legal", "legal"))  # a replay: not counted
    watcher._apply("routed", routed("d2", "dom-legal", "legal"))
    watcher._apply("routed", routed("d3", "dom-legal", "news"))
    watcher._apply("routed", routed("d4", "dom-news", None))  # no label: nothing to score
    state = watcher.state
    assert dict(state.routed_by_label) == {
        ("legal", NOVEL): 1,
        ("legal", "dom-legal"): 1,
        ("news", "dom-legal"): 1,
    }
    assert len(state.routed_ids) == 4 and state.routed == 5  # the other counts as before


def test_label_and_domain_pairs_are_bounded(watcher) -> None:
    for i in range(MAX_ROWS + 3):
        watcher._apply("routed", routed(f"d{i}", f"dom-{i}", "legal"))
    pairs = watcher.state.routed_by_label
    assert len(pairs) == MAX_ROWS + 1  # the rest as one ("(other)", "(other)")
    assert pairs[("(other)", "(other)")] == 3 and sum(pairs.values()) == MAX_ROWS + 3
