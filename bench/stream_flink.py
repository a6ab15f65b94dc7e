"""Route throughput of the Flink job: docs/s and CPU per document, at a given parallelism.

``flink_route_figures(messages, parallelism)`` produces ``messages`` (Doc records, or their
JSON bytes) to a fresh ``<prefix>.docs`` on an embedded broker (or ``bootstrap_servers``),
spread over ``parallelism`` partitions, runs the job route-only (docs -> route ->
worx.routed, no discover: the figure is the route stage's) on a local mini-cluster and
times it from the first routed record to the last, so the 12-15 s start-up is left out.
CPU is the job's processes' (the JVM and its Python workers) over that window: the job
runs its Python workers as processes (``topology.flink.job.create_environment``; PyFlink's
local default, "loopback", runs them as threads of this process, uncounted). The route
stage routes against ``domains`` (the standalone run: bench/stream.py's table, one row per
bundled label, and its documents).

Figures: ``route_docs_per_s`` (the whole job), ``route_docs_per_s_per_worker`` (that over
the parallelism), ``cpu_us_per_doc`` (JVM + Python workers), ``python_cpu_us_per_doc``,
``jvm_cpu_us_per_doc``. Needs the Flink venv (README "Flink"). Time it under the shared
lock::

    flock /tmp/worx-bench.lock python bench/stream_flink.py [--docs 20000]

which prints one JSON line with parallelism 1 and 2 on the same messages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

from ingest.records import Doc  # noqa: E402
from router.records import DomainRecord  # noqa: E402
from topology.composition.topics import Topics, ensure_topics  # noqa: E402


def _values(messages: Iterable[Doc | bytes]) -> list[tuple[bytes, bytes]]:
    out = []
    for i, message in enumerate(messages):
        if isinstance(message, Doc):
            out.append((message.doc_id.encode(), message.to_json()))
        else:
            out.append((f"m{i}".encode(), bytes(message)))
    return out


def _cpu(processes: list[psutil.Process]) -> tuple[float, float]:
    """(JVM, Python) CPU seconds of ``processes`` (the gone ones count 0)."""
    jvm = python = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
            seconds = times.user + times.system
            if "java" in proc.name():
                jvm += seconds
            else:
                python += seconds
        except psutil.Error:
            continue
    return jvm, python


def _job_processes() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def flink_route_figures(
    messages: Iterable[Doc | bytes],
    parallelism: int,
    bootstrap_servers: str | None = None,
    timeout_s: float = 600.0,
    domains: Iterable[DomainRecord] = (),
) -> dict:
    """Route docs/s and CPU us/doc of the Flink job at ``parallelism`` on ``messages``,
    routing against ``domains`` (published to ``<prefix>.domains`` before the job starts:
    the route instances take them as broadcast state)."""
    from router.config import RouterConfig
    from topology.composition.embedded_broker import EmbeddedBroker
    from topology.flink.checkpoints import as_uri
    from topology.flink.job import FlinkJobOptions, start

    values = _values(messages)
    broker = None
    if bootstrap_servers is None:
        broker = EmbeddedBroker().start()
        bootstrap_servers = broker.bootstrap_servers
    conf = {"bootstrap.servers": bootstrap_servers}
    workdir = Path(tempfile.mkdtemp(prefix="worx-bench-flink-"))
    os.environ.setdefault("TMPDIR", str(workdir))
    os.environ["JVM_ARGS"] = f"-Djava.io.tmpdir={workdir}"
    topics = Topics(f"bench-{uuid.uuid4().hex[:8]}")
    ensure_topics(conf, prefix=topics.prefix, partitions=parallelism)
    producer = Producer(conf)
    for row in domains:  # before the documents (the job reads both topics at once)
        producer.produce(topics.domains, row.to_json(), key=row.domain_id)
    for i, (key, value) in enumerate(values):
        producer.produce(topics.docs, value, key=key, partition=i % parallelism)
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False})
    consumer.assign(
        [TopicPartition(topics.routed, p, OFFSET_BEGINNING) for p in range(parallelism)]
    )
    options = FlinkJobOptions(
        bootstrap_servers=bootstrap_servers,
        checkpoint_dir=as_uri(workdir / "checkpoints"),
        topic_prefix=topics.prefix,
        parallelism=parallelism,
        checkpoint_interval_ms=10_000,
        route_only=True,
    )
    client = None
    try:
        client = start(options, RouterConfig())
        seen = 0
        first = cpu_first = None
        deadline = time.monotonic() + timeout_s
        while seen < len(values):
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {seen} of {len(values)} routed in {timeout_s} s")
            batch = consumer.consume(1000, timeout=0.5)
            got = sum(1 for m in batch if m.error() is None)
            if got and first is None:
                first, cpu_first, at_first = time.monotonic(), _cpu(_job_processes()), seen + got
            seen += got
        last = time.monotonic()
        jvm, python = _cpu(_job_processes())
    finally:
        consumer.close()
        if client is not None:
            client.cancel().result()
        if broker is not None:
            broker.stop()
    docs = seen - at_first  # routed between the first and the last observation
    wall = max(last - first, 1e-9)
    rate = docs / wall
    jvm_us = (jvm - cpu_first[0]) / docs * 1e6
    python_us = (python - cpu_first[1]) / docs * 1e6
    return {
        "parallelism": parallelism,
        "docs": len(values),
        "timed_docs": docs,
        "wall_s": round(wall, 2),
        "route_docs_per_s": round(rate, 1),
        "route_docs_per_s_per_worker": round(rate / parallelism, 1),
        "cpu_us_per_doc": round(jvm_us + python_us, 1),
        "python_cpu_us_per_doc": round(python_us, 1),
        "jvm_cpu_us_per_doc": round(jvm_us, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    args = parser.parse_args()
    from stream import corpus_messages  # bench/stream.py: its documents and its table

    docs, rows = corpus_messages(args.docs)
    load_before = os.getloadavg()
    figures = {f"flink_p{p}": flink_route_figures(docs, p, domains=rows) for p in (1, 2)}
    figures["note"] = {
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
