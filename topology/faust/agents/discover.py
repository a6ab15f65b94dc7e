"""The discover stage as a Faust agent: <prefix>.routed -> domains, drift events, jobs.

Delivery, as in `worx discover`: the state and the offsets it covers are written to a
JSON snapshot (``<data_dir>/discover/state.json``) *before* an event's outputs are sent;
on start the snapshot is restored and the consumer is sought to the saved offsets when
partitions are assigned, and events the snapshot already covers are skipped. Run one
worker with this agent (discover is one logical instance). Like `worx discover` it
follows worx.experts, adding each expert to its domain's row, but it applies
registrations only when a routed event arrives.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from router.discover import DiscoverStage
from topology.composition.kafka_clients import client_conf
from topology.composition.paths import discover_snapshot
from topology.faust.agents import crash_when_dead, raw_topic, to_message
from topology.faust.agents.route import bootstrap_of
from topology.runtimes.expert_registrations import ExpertRegistrations
from topology.runtimes.stage_runner import apply_stage
from worx.atomic import atomic_write_bytes

if TYPE_CHECKING:
    import faust

    from topology.composition.topics import Topics
    from topology.composition.worx_config import WorxConfig

log = logging.getLogger(__name__)


def register(app: faust.App, config: WorxConfig, topics: Topics) -> None:
    stage = DiscoverStage(config.router)
    path = discover_snapshot(config)
    if path.exists():
        stage.restore(json.loads(path.read_text())["state"])
        log.info("discover agent restored %s (%d decisions)", path, stage.seen)
    outputs: dict[str, Any] = {}
    last = {"snapshot": time.monotonic()}

    def output(suffix: str) -> Any:
        if suffix not in outputs:
            outputs[suffix] = raw_topic(app, topics.name(suffix))
        return outputs[suffix]

    def save() -> None:
        body = {"state": stage.snapshot(), "outbox": [], "outbox_id": 0}
        atomic_write_bytes(path, json.dumps(body, separators=(",", ":")).encode())
        last["snapshot"] = time.monotonic()

    @app.on_partitions_assigned.connect
    async def seek_to_snapshot(sender: Any, assigned: Any, **_: Any) -> None:
        for tp in assigned:
            offset = stage.offsets.get(f"{tp.topic}:{tp.partition}")
            if tp.topic == topics.routed and offset is not None:
                await app.consumer.seek(tp, offset)

    followers: dict[str, ExpertRegistrations] = {}

    @app.task
    async def follow_experts() -> None:
        conf = client_conf(config.kafka, bootstrap_of(app))
        followers["experts"] = ExpertRegistrations(conf, topics.experts).start()
        log.info("discover agent follows %s", topics.experts)  # (a daemon thread)
        await crash_when_dead(followers["experts"])

    async def run(stream: Any) -> None:
        async for event in stream.events():
            # registrations are applied as routed events arrive (the agent has no timer)
            experts = followers.get("experts")
            emits = experts.apply(stage) if experts is not None else []
            msg = event.message
            covered = stage.offsets.get(f"{msg.topic}:{msg.partition}", 0)
            if msg.offset >= covered:  # (below: already in the restored state)
                emits.extend(apply_stage(stage, to_message(event), "discover"))
                stage.offsets[f"{msg.topic}:{msg.partition}"] = msg.offset + 1
            if emits or time.monotonic() - last["snapshot"] > config.router.snapshot_every_s:
                save()  # before anything leaves: a replay re-creates the same ids
            for emit in emits:
                key = emit.key.encode() if emit.key is not None else None
                await output(emit.topic).send(key=key, value=emit.record.to_json())

    run.__name__ = "discover"
    app.agent(raw_topic(app, topics.routed), name="discover")(run)
