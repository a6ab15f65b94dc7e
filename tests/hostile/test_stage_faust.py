"""The Faust agents (`worx stream --agents route,discover`) under hostile input, real broker.

One worker runs the route and discover agents. The hostile catalogue of
:mod:`tests.support.hostile_records` goes to ``docs`` (the route agent), ``domains`` (its
table follower), ``routed`` (the discover agent) and ``experts`` (its registrations
follower). The worker keeps running and stops cleanly; the route agent's decisions equal a
clean in-process route stage's; discover's outputs equal a clean discover stage's over
the same decisions; every hostile record is on ``worx.dlq`` with its reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experts.records import ExpertRegistration
from ingest.records import Doc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.embed import default_embedder
from router.records import DomainRecord, DriftEvent, RoutedDoc
from router.route import RouteStage
from tests.support.hostile_records import (
    Hostile,
    Shape,
    catalogue,
    check_dead_letters,
    dead_letters,
    interleave,
    send,
)
from tests.support.kafka import drain, read_messages
from topology.composition.topics import Topics, ensure_topics
from worx.scenario import Scenario
from worx.stage import Message

pytestmark = pytest.mark.broker
ROOT = Path(__file__).resolve().parents[2]
# discover promotes nothing from this small stream, so the route agent's table stays the
# test's row and every decision is deterministic
ENV = {"WORX_ROUTER__PROMOTE_MIN_SIZE": "500"}


def _decision(routed: RoutedDoc) -> tuple:
    return (routed.doc_id, routed.domain_id, routed.similarity, routed.uncertain)


def test_faust_route_and_discover_agents_dead_letter_hostile_records_and_keep_going(
    broker, kafka_conf: dict, tmp_path: Path
):
    topics = Topics(f"faust-hostile-{os.getpid()}")
    ensure_topics(kafka_conf, prefix=topics.prefix, partitions=1)  # one order everywhere
    config = RouterConfig(promote_min_size=500)
    embedder = default_embedder(config)
    scenario = Scenario.from_directory()
    legal = scenario.domains["legal"][:30]
    centroid = embedder.embed([d.text for d in legal]).mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    row = DomainRecord("dom-legal", centroid.tolist(), 0.15, 30, 0.4, core_threshold=0.3)
    bad_rows = catalogue(row, Shape("domain_id", "version", "threshold", "centroid", embedder.dim))
    sent_rows = send(kafka_conf, topics.domains, [(row.domain_id, row.to_json()), *bad_rows])
    registration = ExpertRegistration(
        expert_id="legal-e1",
        domain_id="dom-legal",
        sha256="0" * 64,
        trunk_fingerprint="f" * 64,
        centroid=row.centroid,
    )
    bad_regs = catalogue(registration, Shape("expert_id", "num_params", None, "centroid", 0))
    bad_regs = [h for h in bad_regs if h.kind != "wrong_dimension"]  # (no centroid is used)
    sent_regs = send(kafka_conf, topics.experts, [("legal-e1", registration.to_json()), *bad_regs])

    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env |= {
        "WORX_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "WORX_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
        **ENV,
    }
    log = tmp_path / "stream.log"
    command = [sys.executable, "-m", "topology.commands", "stream", "--agents", "route,discover"]
    worker = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    try:
        # probes until one is decided by the table with the row in it
        probes = 0
        while True:
            probe = Doc(doc_id=f"probe-{probes}", text=legal[0].text)
            send(kafka_conf, topics.docs, [(probe.doc_id, probe.to_json())])
            probes += 1
            got = read_messages(
                kafka_conf,
                topics.routed,
                lambda ms, n=probes: len(ms) >= n,
                timeout_s=120,
            )
            if RoutedDoc.from_json(got[-1].value()).domain_version >= 1:
                break
        mixed = scenario.mixture(40, ["legal", "news"], seed=5)
        docs = [Doc(doc_id=d.doc_id, text=d.text, label=d.domain) for d in mixed]
        changed = Doc(doc_id=docs[0].doc_id, text=docs[1].text)
        bad_docs = catalogue(
            docs[0], Shape("doc_id", "part", path_safe_id=False), changed, "accepted"
        )
        sent_docs = send(
            kafka_conf, topics.docs, interleave([(d.doc_id, d.to_json()) for d in docs], bad_docs)
        )
        routable = [(i, o) for i, o in sent_docs if not isinstance(i, Hostile) or i.expect != "dlq"]
        routed = read_messages(
            kafka_conf, topics.routed, lambda ms: len(ms) >= probes + len(routable), 120
        )
        sample = RoutedDoc.from_json(routed[-1].value())
        bad_routed = [  # (a ".." doc id is a valid id: see test_stage_discover.py)
            h
            for h in catalogue(sample, Shape("doc_id", "docs_offset", "similarity"))
            if h.kind != "unsafe_id_dotdot"
        ]
        sent_routed = send(kafka_conf, topics.routed, bad_routed)
        hostile = [(topics.domains, o) for i, o in sent_rows if isinstance(i, Hostile)]
        hostile += [(topics.experts, o) for i, o in sent_regs if isinstance(i, Hostile)]
        hostile += [(topics.routed, o) for _, o in sent_routed]
        hostile += [
            (topics.docs, o) for i, o in sent_docs if isinstance(i, Hostile) and i.expect == "dlq"
        ]
        found = dead_letters(kafka_conf, topics.dlq, hostile, timeout_s=120)
        assert worker.poll() is None, log.read_text()[-3000:]  # still running
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, log.read_text()[-3000:]
    check_dead_letters(found, sent_rows, topics.domains)
    check_dead_letters(found, sent_regs, topics.experts)
    check_dead_letters(found, sent_docs, topics.docs)
    check_dead_letters(found, [(h, o) for h, o in sent_routed], topics.routed)

    # the clean route run: the stage with the good row, over the good and accepted documents
    clean = RouteStage(config, embedder=embedder)
    clean.table.apply(row)
    expected = []
    for item, offset in routable:
        value = item.value if isinstance(item, Hostile) else item[1]
        message = Message(b"", topic=topics.docs, partition=0, offset=offset)
        [emit] = clean.process(message, Doc.from_json(value))
        expected.append(_decision(emit.record))
    decisions = [RoutedDoc.from_json(m.value()) for m in routed[probes:]]
    assert [_decision(r) for r in decisions] == expected
    assert all(r.domain_version == 1 for r in decisions)

    # the clean discover run: the same stage over the same decisions, in the topic's order
    discover = DiscoverStage(config)
    outputs = []
    for m in routed:
        message = Message(m.value(), topic=m.topic(), partition=0, offset=m.offset())
        outputs += [e.record for e in discover.process(message, RoutedDoc.from_json(m.value()))]
    events = {e.event_id for e in outputs if isinstance(e, DriftEvent)}
    emitted = {DriftEvent.from_json(v).event_id for _, v in drain(kafka_conf, topics.drift)}
    assert emitted == events
    assert not any(isinstance(e, DomainRecord) for e in outputs)  # (nothing promoted)
