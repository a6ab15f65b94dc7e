"""Shared fixtures: one real embedded broker per test session, fresh topic prefixes per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from topology.composition.embedded_broker import EmbeddedBroker
from topology.composition.topics import Topics, ensure_topics

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the embedded broker (the ``broker`` fixture, or ``kafka_conf`` and
    ``topics`` above it) is a broker test and a slow one, marked or not: the quick loop
    (``-m "not slow"``) never starts a broker."""
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker)
            item.add_marker(pytest.mark.slow)


def _live_processes_with(marker: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def processes_with():
    """``processes_with(marker)``: processes left behind by a command started with the env
    variable WORX_E2E_MARKER=marker (every descendant inherits it)."""
    return _live_processes_with
