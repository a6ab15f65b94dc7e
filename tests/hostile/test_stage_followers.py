"""A table follower never dies silently: what stops it is kept and reported, and the stage
that depends on it stops with :class:`~topology.runtimes.stage_runner.FollowerDied` (its
command exits non-zero, so its supervisor restarts it). On the real embedded broker."""

from __future__ import annotations

import threading

import pytest

from router.records import DomainRecord
from router.route import RouteStage
from tests.support.hostile_records import send, until
from topology.composition.topics import Topics
from topology.runtimes.stage_runner import FollowerDied, StageRunner
from topology.runtimes.table_follower import TableFollower

pytestmark = pytest.mark.broker


class Escaped(BaseException):
    """Something no per-event handler may swallow (as KeyboardInterrupt or SystemExit)."""


def test_a_dead_follower_is_reported_and_stops_the_stage_that_needs_it(
    kafka_conf: dict, topics: Topics
):
    stage = RouteStage()
    row = DomainRecord("dom-a", [1.0] + [0.0] * (stage.embedder.dim - 1), 0.5, 10, 0.8)

    def apply(record: DomainRecord) -> bool:
        if record.domain_id == "dom-poison":
            raise Escaped("the follower's thread ends here")
        return stage.table.apply(record)

    died = threading.Event()
    follower = TableFollower(kafka_conf, topics.domains, apply, on_death=died.set).start()
    runner = StageRunner(
        stage, kafka_conf, topics, [topics.docs], f"{topics.prefix}-route", "route",
        session_timeout_ms=6000, followers=[follower],
    )  # fmt: skip
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except FollowerDied as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        send(kafka_conf, topics.domains, [(row.domain_id, row.to_json())])
        until(lambda: stage.table.version == 1, 30, "the good row applied")
        assert follower.healthy() and thread.is_alive()
        poison = DomainRecord("dom-poison", row.centroid, 0.5, 10, 0.8)
        send(kafka_conf, topics.domains, [(poison.domain_id, poison.to_json())])
        assert died.wait(30)
        assert not follower.healthy() and isinstance(follower.error, Escaped)
        assert "stopped" in follower.describe() and "thread ends here" in follower.describe()
        thread.join(timeout=30)  # the runner notices within one poll
        assert not thread.is_alive()
    finally:
        follower.stop()
    [stopped] = outcome
    assert "follow-" in str(stopped) and "restarts" in str(stopped)


def test_a_follower_stopped_on_purpose_is_healthy(kafka_conf: dict, topics: Topics):
    follower = TableFollower(kafka_conf, topics.domains, lambda row: True).start()
    assert follower.healthy()
    follower.stop()
    assert follower.healthy() and not follower.alive and follower.error is None
