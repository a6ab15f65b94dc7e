"""The PyFlink runtime: route and discover as one Flink DataStream job.

::

    worx.docs ──► route (parallelism N) ──► worx.routed
                    ▲ broadcast state          │ (in the job)
    worx.domains ───┤                          ▼
                    └──────────────────► discover (parallelism 1) ──► worx.domains,
    worx.experts ──────────────────────────────▲                     worx.drift, worx.train

- route: :class:`router.route.RouteStage` in each parallel instance; the domain table
  comes from ``worx.domains`` as Flink broadcast state (checkpointed, so a restored
  instance routes by the table it had);
- discover: one :class:`router.discover.DiscoverStage`, keyed by one constant key so its
  state is Flink keyed state: the stage's own JSON snapshot plus a journal of the inputs
  since (:mod:`topology.flink.journal`); never a pickle of its objects;
- Kafka in and out through the connector's tables (:mod:`topology.flink.kafka_tables`), at least
  once: the sink flushes at every checkpoint, and every output carries the key the other
  runtimes give it (doc id, domain id, job id), so a replay after a restore re-sends the
  same records, which downstream effects treat as one.

Checkpoints go to ``--checkpoint-dir`` (a ``file://`` directory by default; any Flink
filesystem URI) every ``--checkpoint-interval-ms``; ``--restore`` names a completed
``chk-N`` to start from. Run it with ``worx flink run`` (local mini-cluster) or submit it to
a Flink cluster: ``flink run -py topology/flink/job.py -- --bootstrap-servers ...``
(docs/deployment.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.config import RouterConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass
class FlinkJobOptions:
    bootstrap_servers: str
    checkpoint_dir: str  # a URI (topology.flink.checkpoints.as_uri)
    topic_prefix: str = "worx"
    parallelism: int = 1  # of route (and the sources); discover always runs at 1
    checkpoint_interval_ms: int = 5_000
    restore: str | None = None  # a completed chk-N (or savepoint) to start from
    compact_every: int = 500  # discover journal entries between two snapshots
    # discover merges the decisions of the worx.docs partitions (topology.flink.ordering);
    # a partition silent this long is not waited for; None partitions: asked of the broker
    order_idle_ms: int = 5_000
    docs_partitions: int | None = None
    client: dict[str, str] = dataclasses.field(default_factory=dict)  # [kafka.client]
    max_parallelism: int = 128  # key groups: route can be rescaled up to this
    remote: str | None = None  # "host:port" of a JobManager's REST API; None: mini-cluster
    python_executable: str = sys.executable  # of the Python workers (on the TaskManagers)
    route_only: bool = False  # no discover: docs -> routed only (bench/stream_flink.py)

    @property
    def group_id(self) -> str:
        return f"{self.topic_prefix}-flink"


def flink_configuration(options: FlinkJobOptions) -> Any:
    """The Flink Configuration of the job (checkpoints, restore, Python, target)."""
    from pyflink.common import Configuration

    conf = Configuration()
    settings = {
        "pipeline.name": f"{options.topic_prefix}-route-discover",
        "parallelism.default": str(options.parallelism),
        "pipeline.max-parallelism": str(options.max_parallelism),
        "execution.checkpointing.interval": f"{options.checkpoint_interval_ms} ms",
        "execution.checkpointing.dir": options.checkpoint_dir,
        "execution.checkpointing.mode": "AT_LEAST_ONCE",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "python.executable": options.python_executable,
        "python.client.executable": sys.executable,
    }
    if options.restore:
        settings["execution.state-recovery.path"] = options.restore
    if options.remote:
        host, _, port = options.remote.rpartition(":")
        settings.update({"execution.target": "remote", "rest.address": host, "rest.port": port})
    tmp = os.environ.get("TMPDIR")
    if tmp:
        settings["io.tmp.dirs"] = tmp
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def docs_lanes(options: FlinkJobOptions, docs_topic: str) -> list[str]:
    """The lanes discover merges: one per partition of ``worx.docs``."""
    from topology.composition.kafka_clients import partition_count

    count = options.docs_partitions
    if count is None:
        conf = {**options.client, "bootstrap.servers": options.bootstrap_servers}
        count = partition_count(conf, docs_topic)
    if not count:
        log.warning(
            "flink job: %s has no partitions yet; discover merges the partitions as it "
            "meets them (their first documents may be taken in arrival order)",
            docs_topic,
        )
        return []
    return [f"{docs_topic}:{partition}" for partition in range(count)]


def build(env: Any, router_config: RouterConfig, options: FlinkJobOptions) -> Any:
    """Declare the job on ``env``; the statement set whose ``attach_as_datastream`` adds
    the sink."""
    from pyflink.common import Row, Types
    from pyflink.table import DataTypes, StreamTableEnvironment
    from pyflink.table.expressions import col
    from pyflink.table.udf import udf

    from topology.composition.topics import Topics
    from topology.flink import functions as fn
    from topology.flink import kafka_tables

    topics = Topics(options.topic_prefix)
    t_env = StreamTableEnvironment.create(env)
    props = kafka_tables.client_properties(options.bootstrap_servers, options.client)
    for name, topic, from_group in (
        ("docs", topics.docs, True),
        ("domains", topics.domains, False),
        ("experts", topics.experts, False),
    ):
        group = f"{options.group_id}-{name}"
        t_env.execute_sql(kafka_tables.source_ddl(name, topic, props, group, from_group))
    t_env.execute_sql(kafka_tables.sink_ddl("outputs", kafka_tables.output_topics(topics), props))

    embed = udf(fn.EmbedDocs(router_config), result_type=DataTypes.BYTES(), func_type="pandas")
    docs = t_env.to_data_stream(t_env.from_path("docs").add_columns(embed(col("v")).alias("vec")))
    domains = t_env.to_data_stream(t_env.from_path("domains"))
    experts = t_env.to_data_stream(t_env.from_path("experts"))

    routed_all = (
        docs.connect(domains.broadcast(fn.DOMAINS))
        .process(fn.RouteFunction(router_config, options.topic_prefix), output_type=fn.OUT_TYPE)
        .name("route")
        .uid("route")
    )
    if options.route_only:
        statements = t_env.create_statement_set()
        sink = routed_all.map(fn.to_sink, output_type=fn.SINK_TYPE).uid("to-sink")
        statements.add_insert("outputs", t_env.from_data_stream(sink))
        return statements
    routed_topic = topics.routed
    routed = routed_all.filter(lambda row: row[2] == routed_topic).name("routed").uid("routed")
    control_type = fn.CONTROL_TYPE
    control = (
        domains.map(lambda row: Row("domain", row[1]), output_type=control_type)
        .uid("domain-rows")
        .union(experts.map(lambda row: Row("expert", row[1]), output_type=control_type))
    )
    one = Types.INT()
    discover = (
        routed.key_by(lambda row: 0, key_type=one)
        .connect(control.key_by(lambda row: 0, key_type=one))
        .process(
            fn.DiscoverFunction(
                router_config,
                options.topic_prefix,
                options.compact_every,
                docs_lanes(options, topics.docs),
                options.order_idle_ms,
            ),
            output_type=fn.OUT_TYPE,
        )
        .name("discover")
        .uid("discover")
        .set_parallelism(1)
        .set_max_parallelism(1)
    )
    outputs = routed_all.union(discover).map(fn.to_sink, output_type=fn.SINK_TYPE).uid("to-sink")
    statements = t_env.create_statement_set()
    statements.add_insert("outputs", t_env.from_data_stream(outputs))
    return statements


def create_environment(options: FlinkJobOptions) -> Any:
    from pyflink.datastream import StreamExecutionEnvironment

    if options.remote is None:
        # PyFlink's default on a local mini-cluster is "loopback": every Python worker a
        # thread of this process, so N route instances share one interpreter lock (p2 ran
        # no faster than p1). "process": one Python worker process per task, as on a
        # cluster's TaskManagers.
        os.environ.setdefault("_python_worker_execution_mode", "process")
    env = StreamExecutionEnvironment.get_execution_environment(flink_configuration(options))
    env.set_python_executable(options.python_executable)
    env.set_parallelism(options.parallelism)
    return env


def start(options: FlinkJobOptions, router_config: RouterConfig) -> Any:
    """Build and submit the job; its JobClient (the job runs until cancelled)."""
    env = create_environment(options)
    build(env, router_config, options).attach_as_datastream()
    client = env.execute_async(f"{options.topic_prefix}-route-discover")
    log.info("flink job %s submitted", client.get_job_id())
    return client


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Arguments of ``flink run -py topology/flink/job.py -- ...`` (a cluster submission)."""
    parser = argparse.ArgumentParser(
        prog="topology/flink/job.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic-prefix", default="worx")
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--checkpoint-dir", required=True, help="any Flink filesystem URI")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=5_000)
    parser.add_argument("--router-config", help="JSON object of [router] settings")
    parser.add_argument(
        "--order-idle-ms",
        type=int,
        default=5_000,
        help="discover stops waiting for a worx.docs partition silent this long",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Entry of ``flink run -py``: the cluster's own client submits the job."""
    from router.config import RouterConfig

    args = parse_args(argv)
    router = RouterConfig(**json.loads(args.router_config)) if args.router_config else None
    options = FlinkJobOptions(
        bootstrap_servers=args.bootstrap_servers,
        checkpoint_dir=args.checkpoint_dir,
        topic_prefix=args.topic_prefix,
        parallelism=args.parallelism,
        checkpoint_interval_ms=args.checkpoint_interval_ms,
        order_idle_ms=args.order_idle_ms,
    )
    from pyflink.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()  # the cluster's settings
    env.set_parallelism(options.parallelism)
    env.enable_checkpointing(options.checkpoint_interval_ms)
    build(env, router or RouterConfig(), options).attach_as_datastream()
    env.execute(f"{options.topic_prefix}-route-discover")


if __name__ == "__main__":
    # run as a file (`flink run -py topology/flink/job.py`): the repository root on the path,
    # in place of this folder, whose module names must not shadow installed packages
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
