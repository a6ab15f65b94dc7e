"""`worx serve`'s two followers under hostile input, on the real embedded broker.

The domain follower (``worx.domains`` into the server's domain table) and the
registration follower (``worx.experts`` into hot registration) each get the whole
catalogue of :mod:`tests.support.hostile_records` between good records. Both keep
running; the server ends with exactly the table and the experts of a clean run and
serves the same texts with the same experts; every hostile record is on ``worx.dlq``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from experts.serving import ExpertServer
from experts.store import ExpertStore
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import (  # noqa: F401 - fixtures
    domain_record,
    domain_texts,
    gpt2_trunk,
    make_domain_expert,
    trunk_dirs,
)
from tests.support.hostile_records import (
    Hostile,
    Shape,
    catalogue,
    check_dead_letters,
    dead_letters,
    reasons_by_kind,
    send,
    until,
)
from topology.composition.topics import Topics
from topology.runtimes.table_follower import TableFollower
from topology.serve.registration_follower import RegistrationFollower

pytestmark = pytest.mark.broker
DOMAINS = ("python_code", "legal")
PROBES = [domain_texts(d, 2, skip=30)[i] for d in (*DOMAINS, "biomedical") for i in (0, 1)]


def _server(trunk, root: Path) -> ExpertServer:
    embedder = default_embedder()
    return ExpertServer(trunk, ExpertStore(root, trunk.fingerprint), embedder, Gate(top_k=1))


def test_serve_followers_dead_letter_every_hostile_record_and_serve_as_a_clean_run(
    gpt2_trunk,  # noqa: F811 - the fixture imported above
    kafka_conf: dict,
    topics: Topics,
    tmp_path: Path,
):
    server = _server(gpt2_trunk, tmp_path / "store")
    rows = [domain_record(server.embedder, d) for d in DOMAINS]
    manifests = [
        make_domain_expert(server.store, gpt2_trunk, server.embedder, d.replace("_", "-"), d, i)
        for i, d in enumerate(DOMAINS)
    ]
    registrations = [m.registration() for m in manifests]
    dim = server.embedder.dim

    bad_rows = catalogue(
        rows[0],
        Shape("domain_id", "version", "threshold", "centroid", dim),
        changed=dataclasses.replace(rows[0], threshold=0.99),
    )
    good = registrations[0]
    bad_registrations = catalogue(
        good,
        Shape("expert_id", "num_params", None, "centroid", dim),
        changed=dataclasses.replace(good, sha256="0" * 64),  # another file under the same id
    )
    bad_registrations.append(  # a well-formed registration of an expert the store lacks
        Hostile("unknown_expert", "ghost", dataclasses.replace(good, expert_id="ghost").to_json())
    )
    sent_rows = send(
        kafka_conf, topics.domains, [(r.domain_id, r.to_json()) for r in rows] + bad_rows
    )
    sent_regs = send(
        kafka_conf,
        topics.experts,
        [(r.expert_id, r.to_json()) for r in registrations] + bad_registrations,
    )
    domains = TableFollower(kafka_conf, topics.domains, server.domains.apply).start()
    experts = RegistrationFollower(server, kafka_conf, topics.experts).start()
    try:
        until(lambda: domains.seen >= len(sent_rows), 60, "every domain event handled")
        until(lambda: experts.seen >= len(sent_regs), 60, "every registration event handled")
        hostile = [(topics.domains, o) for i, o in sent_rows if isinstance(i, Hostile)]
        hostile += [(topics.experts, o) for i, o in sent_regs if isinstance(i, Hostile)]
        found = dead_letters(kafka_conf, topics.dlq, hostile)
        assert domains.healthy() and experts.healthy()
    finally:
        domains.stop()
        experts.stop()
    check_dead_letters(found, sent_rows, topics.domains)
    check_dead_letters(found, sent_regs, topics.experts)
    reasons = reasons_by_kind(found, sent_regs, topics.experts)
    assert reasons["tombstone_unknown_key"] == "unknown_key"
    assert reasons["nan_in_vector"] == "not_finite"
    assert reasons_by_kind(found, sent_rows, topics.domains)["wrong_dimension"] == (
        "wrong_dimension"
    )

    # the clean run: the same server fed the good records only, with no broker in between
    clean = _server(gpt2_trunk, tmp_path / "store")
    for row in rows:
        clean.domains.apply(row)
    for registration in registrations:
        assert clean.register(registration).status == "registered"
    assert server.domains.rows() == clean.domains.rows() == sorted(rows, key=lambda r: r.domain_id)
    assert sorted(server.table) == sorted(clean.table) == sorted(r.expert_id for r in registrations)
    for text in PROBES:
        served, expected = server.score(text), clean.score(text)
        assert (served["domain"], served["experts"]) == (expected["domain"], expected["experts"])
    assert any(clean.score(t)["experts"] for t in PROBES)  # some probe reaches an expert
