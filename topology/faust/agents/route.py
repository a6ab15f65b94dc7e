"""The route stage as a Faust agent: <prefix>.docs -> <prefix>.routed.

Each worker follows the whole compacted <prefix>.domains table with its own
:class:`topology.runtimes.table_follower.TableFollower` (a thread, outside the consumer group),
so a new domain takes effect in every worker without a restart. If the follower stops,
the worker crashes (exits non-zero) rather than routing by a table that no longer moves.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from router.route import RouteStage
from topology.faust.agents import crash_when_dead, raw_topic, to_message
from topology.runtimes.stage_runner import apply_stage_batch

if TYPE_CHECKING:
    import faust

    from topology.composition.topics import Topics
    from topology.composition.worx_config import WorxConfig

log = logging.getLogger(__name__)

BATCH = 256  # most events routed in one RouteStage.process_batch call
BATCH_WAIT_S = 0.05  # longest wait for a batch to fill (the latency it may add)


def bootstrap_of(app: faust.App) -> str:
    """The app's brokers as a librdkafka ``bootstrap.servers`` string."""
    return ",".join(str(url).split("://", 1)[-1].rstrip("/") for url in app.conf.broker)


def register(app: faust.App, config: WorxConfig, topics: Topics) -> None:
    from topology.composition.kafka_clients import client_conf
    from topology.runtimes.table_follower import TableFollower

    stage = RouteStage(config.router)
    outputs: dict[str, Any] = {}

    def output(suffix: str) -> Any:
        if suffix not in outputs:
            outputs[suffix] = raw_topic(app, topics.name(suffix))
        return outputs[suffix]

    async def route(stream: Any) -> None:
        # events come in batches (the texts are embedded together); take_events
        # acknowledges a batch's events only after this body has sent (handed to the
        # producer) each of their outputs, and Faust flushes the producer before it
        # commits the offsets: at least once
        async for events in stream.take_events(BATCH, within=BATCH_WAIT_S):
            messages = [to_message(event) for event in events]
            for emits in apply_stage_batch(stage, messages, "route"):
                for emit in emits:
                    key = emit.key.encode() if emit.key is not None else None
                    await output(emit.topic).send(key=key, value=emit.record.to_json())

    app.agent(raw_topic(app, topics.docs), name="route")(route)

    @app.task
    async def follow_domains() -> None:
        conf = client_conf(config.kafka, bootstrap_of(app))
        follower = TableFollower(conf, topics.domains, stage.table.apply, name="route-domains")
        follower.start()
        log.info("route agent follows %s (embedder %s)", topics.domains, stage.embedder.fingerprint)
        stage.follower = follower  # a daemon thread: it ends with the worker process
        await crash_when_dead(follower)
