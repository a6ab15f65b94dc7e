"""The discover journal (Flink's managed state for discover) restores to the same stage.

Pure Python: runs in the core venv too (no pyflink needed).
"""

from __future__ import annotations

import json

import pytest

from experts.records import ExpertRegistration
from ingest.records import Doc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord, TrainJob
from router.route import RouteStage
from topology.flink.journal import DiscoverJournal
from worx.scenario import Scenario
from worx.stage import Message


def _entries(config: RouterConfig) -> list[dict]:
    stream = Scenario.from_directory().phased(["legal", "news"], per_domain=130, seed=2)
    route = RouteStage(config)
    entries = []
    for offset, doc in enumerate(stream):
        message = Message(b"", topic="t.docs", partition=0, offset=offset, timestamp_ms=offset + 1)
        [emit] = route.process(message, Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain))
        entries.append(DiscoverJournal.entry("routed", emit.record.to_json(), offset + 1))
    return entries


@pytest.mark.slow
def test_snapshot_plus_journal_restores_the_uninterrupted_state():
    config = RouterConfig(job_docs=60)
    entries = _entries(config)
    whole = DiscoverJournal(DiscoverStage(config), "t", compact_every=40)
    whole.restore(None, [])
    jobs = []
    # what the Flink function keeps in its keyed state, as it does it
    snapshot, held = None, []
    cut = 170  # a checkpoint after 170 inputs: a snapshot from input 160 plus 10 journalled
    for i, entry in enumerate(entries):
        jobs += [e.record for e in whole.apply(entry) if isinstance(e.record, TrainJob)]
        if whole.due:
            snapshot, held = whole.snapshot(), []
        else:
            held.append(json.dumps(entry))
        if i + 1 == cut:
            stored, journal = snapshot, list(held)
    assert jobs, "the stream should produce a training job"
    assert stored is not None and len(journal) == cut % 40

    resumed = DiscoverJournal(DiscoverStage(config), "t", compact_every=40)
    resumed.restore(stored, journal)
    assert resumed.stage.seen == cut
    later = []
    for entry in entries[cut:]:
        later += [e.record for e in resumed.apply(entry) if isinstance(e.record, TrainJob)]
    assert later, "the second domain's job should come after the cut"
    assert resumed.stage.snapshot() == whole.stage.snapshot()
    assert {j.job_id for j in later} == {j.job_id for j in jobs[len(jobs) - len(later) :]}


def test_bad_rows_and_registrations_become_dead_letters_and_waiting_ones_wait():
    journal = DiscoverJournal(DiscoverStage(), "t")
    journal.restore(None, [])
    [bad] = journal.apply(DiscoverJournal.entry("domain", b"{not json"))
    assert bad.topic == "dlq" and bad.record.source_topic == "t.domains"
    [bad] = journal.apply(DiscoverJournal.entry("expert", b'{"expert_id": 3}'))
    assert bad.topic == "dlq"
    dim = journal.stage.embedder.dim
    centroid = [1.0] + [0.0] * (dim - 1)
    raw = ExpertRegistration("exp-1", "dom-a", "0" * 64, "f", centroid).to_json()
    assert journal.apply(DiscoverJournal.entry("expert", raw)) == []  # its row is unknown yet
    assert "exp-1" in journal.waiting
    restored = DiscoverJournal(DiscoverStage(), "t")
    restored.restore(journal.snapshot(), [])
    assert "exp-1" in restored.waiting  # the waiting registration is part of the state
    row = DomainRecord("dom-a", centroid, threshold=0.5, size=10, cohesion=0.8)
    emits = restored.apply(DiscoverJournal.entry("domain", row.to_json()))
    assert [e.record.expert_ids for e in emits if e.topic == "domains"] == [["exp-1"]]
    assert not restored.waiting
