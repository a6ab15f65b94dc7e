"""RouteStage.process_embedded: the decision of a text embedded elsewhere (Flink's
vectorised embedding) is the decision process() makes."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.records import Doc
from router.config import RouterConfig
from router.records import DomainRecord
from router.route import RouteStage
from topology.runtimes.stage_runner import apply_stage
from worx.scenario import Scenario
from worx.stage import Message


def _stage_with_a_domain(texts: list[str]) -> RouteStage:
    stage = RouteStage(RouterConfig())
    centroid = stage.embedder.embed(texts).mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    stage.table.apply(
        DomainRecord(
            domain_id="dom-a", name="a", centroid=centroid.tolist(), threshold=0.2,
            core_threshold=0.3, embedder=stage.embedder.fingerprint, version=1, size=10,
            cohesion=0.5,
        )
    )  # fmt: skip
    return stage


def test_process_embedded_decides_as_process():
    docs = [
        Doc(doc_id=d.doc_id, text=d.text)
        for d in Scenario.from_directory().phased(["legal", "news"], per_domain=20, seed=1)
    ]
    stage = _stage_with_a_domain([d.text for d in docs[:10]])
    vectors = stage.embedder.embed([d.text for d in docs])
    decided = set()
    for i, (doc, vector) in enumerate(zip(docs, vectors, strict=True)):
        message = Message(doc.to_json(), doc.doc_id.encode(), "w.docs", 0, i, 5)
        [emit] = stage.process_embedded(message, doc, vector)
        assert [emit] == stage.process(message, doc)
        decided.add(emit.record.domain_id)
    assert decided == {"dom-a", None}  # assigned and novel documents both compared


def test_process_embedded_refuses_what_process_refuses():
    stage = RouteStage(RouterConfig())
    message = Message(b"{}", None, "w.docs", 0, 0, 0)
    with pytest.raises(TypeError):
        stage.process_embedded(message, None, np.zeros(stage.embedder.dim, np.float32))
    doc = Doc(doc_id="d1", text="some text")
    with pytest.raises(ValueError, match="shape"):
        stage.process_embedded(message, doc, np.zeros(3, np.float32))
    # through apply_stage, a bad record becomes a dead letter with its reason
    [emit] = apply_stage(
        stage,
        Message(b'{"doc_id": 5}', None, "w.docs", 0, 1, 0),
        "route",
        process=lambda m, r: stage.process_embedded(m, r, np.zeros(3, np.float32)),
    )
    assert emit.topic == "dlq"
