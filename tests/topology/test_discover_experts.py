"""`worx discover` follows worx.experts: domain rows list their experts, drift jobs branch."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from experts.records import ExpertRegistration
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord, RoutedDoc, TrainJob
from tests.support.kafka import TopicReader, publish_with_partitions
from topology.runtimes.discover_runner import DiscoverRunner

pytestmark = pytest.mark.broker

CONFIG = RouterConfig(job_docs=60, detector_min_docs=20)
DOMAIN = "dom-a"


def _registration(expert_id: str, domain_id: str = DOMAIN) -> tuple[str, bytes, int]:
    record = ExpertRegistration(
        expert_id=expert_id,
        domain_id=domain_id,
        sha256="0" * 64,
        trunk_fingerprint="test",
        centroid=[1.0, 0.0],
    )
    return expert_id, record.to_json(), 0


def _routed(start: int, count: int, similarity: float, topics) -> list[tuple[str, bytes, int]]:
    items = []
    for i in range(start, start + count):
        doc = RoutedDoc(f"d{i}", DOMAIN, similarity, topics.docs, 0, i, domain_version=1)
        items.append((doc.doc_id, doc.to_json(), 0))
    return items


class Running:
    """A DiscoverRunner on its own thread, stopped on exit."""

    def __init__(self, kafka_conf: dict, topics, snapshot: Path) -> None:
        self.runner = DiscoverRunner(
            DiscoverStage(CONFIG), kafka_conf, topics, snapshot, batch_size=50
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.runner.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> DiscoverRunner:
        self.thread.start()
        return self.runner

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


def test_registrations_reach_domain_rows_once_and_drift_jobs_branch(kafka_conf, topics, tmp_path):
    snapshot = tmp_path / "discover" / "state.json"
    row = DomainRecord(
        DOMAIN,
        [1.0] + [0.0] * (CONFIG.embed_dim - 1),
        threshold=0.5,
        size=100,
        cohesion=0.8,
        core_threshold=0.7,
        distance_mean=0.2,
        distance_std=0.05,
    )
    publish_with_partitions(kafka_conf, topics.domains, [(DOMAIN, row.to_json(), 0)])
    # an expert of a domain this discover does not know waits, and breaks nothing
    publish_with_partitions(
        kafka_conf, topics.experts, [_registration("dom-a-e1"), _registration("x-e1", "x")]
    )
    domains = TopicReader(kafka_conf, topics.domains, DomainRecord)

    def rows_with(expert_ids: list[str]) -> list[DomainRecord]:
        return [r for r in domains.records if r.expert_ids == expert_ids]

    try:
        with Running(kafka_conf, topics, snapshot):
            domains.until(lambda _: rows_with(["dom-a-e1"]), timeout=60)
        # a restart replays every registration: only the new one changes the row
        with Running(kafka_conf, topics, snapshot) as runner:
            publish_with_partitions(kafka_conf, topics.experts, [_registration("dom-a-e2")])
            domains.until(lambda _: rows_with(["dom-a-e1", "dom-a-e2"]), timeout=60)
            # the domain's documents: ordinary at first, then much farther (a drift)
            publish_with_partitions(kafka_conf, topics.routed, _routed(0, 60, 0.8, topics))
            publish_with_partitions(kafka_conf, topics.routed, _routed(60, 100, 0.5, topics))
            jobs = TopicReader(kafka_conf, topics.train, TrainJob)
            try:
                jobs.until(lambda records: any(j.reason == "drift" for j in records), timeout=60)
            finally:
                jobs.close()
            assert "x-e1" in runner.registrations.waiting
    finally:
        domains.close()
    assert len(rows_with(["dom-a-e1"])) == 1  # not re-emitted by the replay
    assert [r.version for r in rows_with(["dom-a-e1", "dom-a-e2"])] == [3]
    by_reason = {j.reason: j for j in jobs.records}
    assert by_reason["new_domain"].parent_expert_id is None
    assert by_reason["drift"].parent_expert_id == "dom-a-e2"  # branches from the latest
