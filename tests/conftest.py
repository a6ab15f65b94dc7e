"""Shared fixtures: one real embedded broker per test session, fresh topic prefixes per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from topology.broker import EmbeddedBroker
from topology.topics import Topics, ensure_topics

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def kafka_conf(broker: EmbeddedBroker) -> dict:
    return {"bootstrap.servers": broker.bootstrap_servers}


@pytest.fixture
def topics(kafka_conf: dict, request: pytest.FixtureRequest) -> Topics:
    """All worx topics under a prefix unique to this test, created up front."""
    safe = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    prefix = f"t{next(_prefixes)}-{safe}"
    ensure_topics(kafka_conf, prefix=prefix, partitions=2)
    return Topics(prefix)
