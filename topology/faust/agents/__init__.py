"""Faust agents of the stream, one module per stage; each exposes ``register``.

- ``normalise``: the ingest stage, company topic(s) -> Docs on <prefix>.docs;
- ``route``: the route stage, <prefix>.docs -> <prefix>.routed, following the domain table;
- ``discover``: the discover stage, <prefix>.routed -> domains, drift events, jobs.

The contract (kept stable: the route and discover agents use it too)::

    # topology/faust/agents/<name>.py
    def register(app: faust.App, config: WorxConfig, topics: Topics) -> None:
        '''Declare this stage's topics and agent(s) on ``app``.'''

``create_app(config, bootstrap_servers, agents=["normalise", "route", ...])`` in
:mod:`topology.faust.app` imports ``topology.faust.agents.<name>`` for each requested
name and calls its ``register``. A module should build its stage object (from
``ingest/``, ``router/``...; stages know nothing of Faust) and wire it with
:func:`stage_agent`, which turns any :class:`worx.stage.Stage` into an agent with the
project's delivery rules:

- at least once: an input event is acknowledged only after its outputs are handed to
  the producer; Faust flushes the producer before it commits offsets;
- a record the stage cannot decode or fails on is dead-lettered **on purpose** (Faust
  acknowledges an event whose handler raised, so an exception would lose it silently);
- a stateful stage may pass ``on_processed`` to snapshot its state with its offsets;
- a table follower an agent depends on is watched by :func:`crash_when_dead` from the
  task that started it: if it stops, the task raises, which crashes the app, and the
  worker exits non-zero for its supervisor to restart it.

A module whose stage needs configuration that is missing raises
:class:`AgentNotConfigured` with a message that says what to set.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from topology.runtimes.stage_runner import FollowerDied, apply_stage
from worx.stage import Message, Stage

if TYPE_CHECKING:
    import faust

    from topology.composition.topics import Topics

log = logging.getLogger(__name__)

# the order `worx stream` runs them in when --agents is not given
DEFAULT_ORDER = ("normalise", "route", "discover")


class AgentNotConfigured(ValueError):
    """The agent cannot run with this configuration (the message says what to set)."""


def available() -> list[str]:
    """Names of the agent modules in this package, in DEFAULT_ORDER first."""
    names = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return [n for n in DEFAULT_ORDER if n in names] + sorted(names - set(DEFAULT_ORDER))


def load(name: str) -> Callable[..., None]:
    """The ``register`` function of agent module ``name``."""
    if name not in available():
        raise AgentNotConfigured(f"no Faust agent {name!r}; available: {', '.join(available())}")
    return importlib.import_module(f"{__name__}.{name}").register


async def crash_when_dead(follower: Any, every_s: float = 1.0) -> None:
    """Return never while ``follower`` is healthy; raise :class:`FollowerDied` once not."""
    while follower.healthy():
        await asyncio.sleep(every_s)
    raise FollowerDied(f"{follower.describe()}; crashing the worker so it is restarted")


def raw_topic(app: faust.App, *names: str) -> Any:
    """A Faust topic carrying raw bytes (records are serialised at the edge, as JSON)."""
    return app.topic(
        *names, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )


def to_message(event: Any) -> Message:
    """The stage-facing view of a Faust event with raw bytes (see :func:`raw_topic`)."""
    msg = event.message
    return Message(
        value=event.value,
        key=event.key,
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        timestamp_ms=int((msg.timestamp or 0) * 1000),
    )


def stage_agent(
    app: faust.App,
    stage: Stage,
    stage_name: str,
    source: Any,
    topics: Topics,
    on_processed: Callable[[Message], None] | None = None,
    concurrency: int = 1,
) -> Any:
    """Register an agent named ``stage_name`` that feeds ``source`` events to ``stage``.

    Each :class:`worx.stage.Emit` is sent to ``topics.name(emit.topic)`` keyed by
    ``emit.key``; decode failures and exceptions become dead letters (see
    :func:`topology.runtimes.stage_runner.apply_stage`).
    """
    outputs: dict[str, Any] = {}

    def output(suffix: str) -> Any:
        if suffix not in outputs:
            outputs[suffix] = raw_topic(app, topics.name(suffix))
        return outputs[suffix]

    async def run(stream: Any) -> None:
        async for event in stream.events():
            message = to_message(event)
            for emit in apply_stage(stage, message, stage_name):
                key = emit.key.encode() if emit.key is not None else None
                await output(emit.topic).send(key=key, value=emit.record.to_json())
            if on_processed is not None:
                on_processed(message)

    run.__name__ = run.__qualname__ = stage_name
    return app.agent(source, name=stage_name, concurrency=concurrency)(run)
