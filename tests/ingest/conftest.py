"""Fixtures of the ingest tests."""

from __future__ import annotations

import pytest

from tests.support.kafka import drain


@pytest.fixture
def drain_topic(kafka_conf):
    return lambda topic, **kw: drain(kafka_conf, topic, **kw)
