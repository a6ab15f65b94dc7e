"""What the stages really produce is never refused: every record route and discover emit
on a real stream, an expert's registration from the store, a job's status and a dead
letter decode back to themselves under the checks (and through the domain table)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experts.expert import Expert, ExpertConfig
from experts.store import ExpertStore
from ingest.dead_letters import dead_letter
from ingest.records import Doc
from router.config import RouterConfig
from router.records import DomainRecord, DriftEvent, RoutedDoc, TrainJob
from router.table import DomainTable
from tests.support.experts import randomize
from tests.support.route_discover import Loop
from trainer.records import TrainStatus
from worx.scenario import Scenario
from worx.stage import Message


def _round_trips(record) -> bool:
    cls = type(record)
    return (
        cls.from_json(record.to_json(), strict=False) == record
        and cls.from_json(record.to_json()) == record.validated()
    )


@pytest.mark.slow
def test_every_record_route_and_discover_emit_round_trips() -> None:
    loop = Loop(RouterConfig(job_docs=80))
    routed: list[RoutedDoc] = []
    to_discover = loop._discover
    loop._discover = lambda record: (routed.append(record), to_discover(record))  # type: ignore
    for doc in Scenario.from_directory().phased(["news", "scripture"], per_domain=150, seed=2):
        loop.feed(doc)
    records = routed + [emit.record for _, emit in loop.emits]
    assert {RoutedDoc, DomainRecord, DriftEvent, TrainJob} <= {type(r) for r in records}
    refused = [r for r in records if not _round_trips(r)]
    assert refused == []
    rows = loop.discover.table.rows()
    table = DomainTable(dim=loop.route.embedder.dim)
    for row in rows:  # what followers do: decode, then apply
        table.apply(DomainRecord.from_json(row.to_json(), strict=False))
    assert table.rows() == rows
    for job in loop.jobs():
        job.check_docs_topic("t.docs").check_dim(loop.route.embedder.dim)


def test_a_stored_experts_registration_a_status_and_a_dead_letter_round_trip(
    tmp_path: Path,
) -> None:
    store = ExpertStore(tmp_path / "store", "f" * 64)
    expert = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), hidden_size=32), seed=1
    )
    centroid = [round(1 / math.sqrt(3), 7)] * 3
    summary = {"heldout_ppl_after": 12.5, "evals": [[0, math.inf], [5, 12.5]], "note": None}
    manifest = store.put("legal-e1", expert, "legal", centroid, summary=summary, job_id="job-1")
    assert store.manifest("legal-e1").summary["evals"][0] == [0, None]  # null on disk
    written = tmp_path / "store" / "legal-e1" / "manifest.json"  # as older writers left it
    body = json.loads(written.read_text())
    body["summary"]["evals"][0][1] = math.inf
    written.write_text(json.dumps(body))  # Python's json writes Infinity
    assert "Infinity" in written.read_text()
    assert ExpertStore(tmp_path / "store", "f" * 64).manifest("legal-e1").sha256 == manifest.sha256
    registration = manifest.registration()
    back = type(registration).from_json(registration.to_json(), strict=False)
    assert back.sha256 == manifest.sha256 and back.summary["evals"][0] == [0, None]
    assert _round_trips(back)
    for status in (
        TrainStatus("job-1", "legal", "step", 5, 10, 4.2, 1000.0),
        TrainStatus("job-1", "legal", "failed", loss=math.nan, reason="diverged"),
        TrainStatus("job-1", "legal", "finished", expert_id="legal-e1", figures=summary),
    ):
        decoded = TrainStatus.from_json(status.to_json())
        assert decoded.state == status.state and _round_trips(decoded)
    message = Message(b"\xff" * 100, topic="p.docs", partition=1, offset=7)
    letter = dead_letter(message, "not_json", "no JSON", "route", keep_bytes=10)
    assert _round_trips(letter)
    doc = Doc("news/ca04/0", "text of a document with a given id", "kafka:p.raw", "news")
    assert _round_trips(doc)
