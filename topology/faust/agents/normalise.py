"""The ingest stage as a Faust agent: company topic(s) -> Docs on <prefix>.docs, rejects to dlq."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingest.stage import NormaliseStage
from topology.faust.agents import AgentNotConfigured, raw_topic, stage_agent

if TYPE_CHECKING:
    import faust

    from topology.composition.topics import Topics
    from topology.composition.worx_config import WorxConfig


def register(app: faust.App, config: WorxConfig, topics: Topics) -> None:
    section = config.ingest
    if not section.source_topics:
        raise AgentNotConfigured(
            "the normalise agent needs source topics: set [ingest] source_topics in worx.toml "
            "or WORX_INGEST__SOURCE_TOPICS=topic1,topic2"
        )
    source = raw_topic(app, *section.source_topics)
    stage_agent(app, NormaliseStage(section), "normalise", source, topics)
