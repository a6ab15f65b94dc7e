"""Ingest throughput beside the bare confluent-kafka passthrough of the same messages.

Prints ONE JSON line. All runtimes read the same N messages (the bundled corpus, repeated
with fresh ids, keyed by id as a company topic would be) from one source topic, in the
same run, on the same broker:

- ``passthrough``: confluent consume -> produce the bytes (and key) unchanged, with the
  same batch, flush and commit discipline as the ingest runner (the baseline);
- ``docs`` (ours, what ``worx connect`` runs): the same loop through the ingest stage
  (:class:`topology.runtimes.stage_runner.StageRunner` + :class:`ingest.stage.NormaliseStage`);
- ``faust``: the same stage as the Faust agent of ``worx stream --agents normalise``.

Throughput is measured on the output topic: (messages - 1) / (last - first producer
timestamp), so consumer-group joins and process start-up are not counted for anyone.
Passthrough and stage alternate for ``--repeat`` rounds, so load from elsewhere on a
shared machine hits both alike: rates are the medians over rounds, ``ratio`` the median
of the per-round ratios (each round measures both back to back). ``cpu_us_per_doc`` and
``passthrough_cpu_us_per_doc`` are the CPU time of this process (every thread) per
message in each runtime, medians over rounds: what the stage costs, whatever the load.

Usage: ``python bench/ingest.py [--n 20000] [--repeat 3] [--no-faust]
[--bootstrap-servers HOST:PORT]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

# this file is named like the `ingest` package: drop its folder from the import path
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: E402

from ingest.stage import NormaliseStage  # noqa: E402
from topology.composition.embedded_broker import bootstrap  # noqa: E402
from topology.composition.kafka_clients import (  # noqa: E402
    DeliveryTracker,
    make_consumer,
    make_producer,
    produce,
)
from topology.composition.topics import Topics, ensure_topics  # noqa: E402
from topology.composition.worx_config import WorxConfig  # noqa: E402
from topology.runtimes.stage_runner import StageRunner  # noqa: E402
from worx.bundled import read_lines  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BATCH = 500


def corpus_messages(n: int) -> list[tuple[str, bytes]]:
    """``n`` (key, value) messages as a company topic would hold them: keyed by the id."""
    rows = [line.body for line in read_lines()]
    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        doc_id = f"{row['id']}#{i}"
        out.append((doc_id, json.dumps({"id": doc_id, "text": row["text"]}).encode()))
    return out


def fill_source(conf: dict, topic: str, messages: list[tuple[str, bytes]]) -> None:
    producer = make_producer(conf)
    tracker = DeliveryTracker()
    for key, value in messages:
        produce(producer, topic, value, key, tracker)
    assert producer.flush(60) == 0
    tracker.check()


def output_window(conf: dict, topic: str, count: int, timeout_s: float = 300) -> float:
    """Seconds between the first and last producer timestamp of ``count`` messages on topic."""
    consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    stamps: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(stamps) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(stamps)} of {count} messages")
            for msg in consumer.consume(1000, timeout=0.5):
                if not msg.error():
                    stamps.append(msg.timestamp()[1])
    finally:
        consumer.close()
    return max(1e-3, (max(stamps) - min(stamps)) / 1000)


def passthrough(conf: dict, source: str, target: str, count: int) -> None:
    """The baseline: consume and produce the same bytes, batch by batch, committing after."""
    consumer = make_consumer(conf, f"bench-pass-{uuid.uuid4()}")
    producer = make_producer(conf)
    tracker = DeliveryTracker()
    consumer.subscribe([source])
    done = 0
    try:
        while done < count:
            batch = [m for m in consumer.consume(BATCH, timeout=0.5) if not m.error()]
            for msg in batch:
                produce(producer, target, msg.value(), msg.key(), tracker)
            assert producer.flush(30) == 0
            tracker.check()
            if batch:
                latest = {(m.topic(), m.partition()): m.offset() + 1 for m in batch}
                offsets = [TopicPartition(t, p, o) for (t, p), o in latest.items()]
                consumer.store_offsets(offsets=offsets)
                consumer.commit(offsets=offsets, asynchronous=False)
            done += len(batch)
    finally:
        consumer.close()


def stage_runner(conf: dict, source: str, prefix: str, count: int) -> None:
    config = WorxConfig().ingest
    stop = threading.Event()
    runner = StageRunner(
        NormaliseStage(config),
        conf,
        Topics(prefix),
        [source],
        group_id=f"bench-stage-{uuid.uuid4()}",
        stage_name="ingest",
        batch_size=BATCH,
        on_batch=lambda *_: stop.set() if runner.consumed >= count else None,
    )
    runner.run(stop)


def faust_stream(servers: str, source: str, prefix: str, count: int, conf: dict) -> float:
    env = {
        **os.environ,
        "WORX_KAFKA__BOOTSTRAP_SERVERS": servers,
        "WORX_KAFKA__TOPIC_PREFIX": prefix,
        "WORX_INGEST__SOURCE_TOPICS": source,
        "WORX_DATA_DIR": f"/tmp/worx-bench-{uuid.uuid4()}",
    }
    cmd = [sys.executable, "-m", "topology.commands", "stream", "--agents", "normalise"]
    worker = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return output_window(conf, f"{prefix}.docs", count)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:  # never leave a worker behind
            worker.kill()
            worker.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="messages per runtime")
    parser.add_argument("--no-faust", action="store_true", help="skip the Faust runtime")
    parser.add_argument("--bootstrap-servers", default="", help="default: an embedded broker")
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternating passthrough/stage rounds (median)"
    )
    args = parser.parse_args()
    messages = corpus_messages(args.n)
    megabytes = sum(len(v) for _, v in messages) / 1e6
    pass_runs: list[float] = []
    stage_runs: list[float] = []
    # CPU seconds of this process (all its threads, librdkafka's included) per runtime:
    # less sensitive to other load on the machine than the wall-clock windows
    pass_cpu: list[float] = []
    stage_cpu: list[float] = []
    with bootstrap(args.bootstrap_servers) as servers:
        conf = {"bootstrap.servers": servers}
        run = uuid.uuid4().hex[:6]
        source = f"bench-{run}.source"
        ensure_topics(conf, prefix=f"bench-{run}", partitions=4, extra={source: 4})
        fill_source(conf, source, messages)
        # alternate the two, so load from elsewhere on the machine hits both alike
        for round_ in range(args.repeat):
            prefix = f"bench-{run}-pass{round_}"
            ensure_topics(conf, prefix=prefix, partitions=4)
            cpu = time.process_time()
            passthrough(conf, source, f"{prefix}.docs", args.n)
            pass_cpu.append(time.process_time() - cpu)
            pass_runs.append(output_window(conf, f"{prefix}.docs", args.n))
            prefix = f"bench-{run}-stage{round_}"
            ensure_topics(conf, prefix=prefix, partitions=4)
            cpu = time.process_time()
            stage_runner(conf, source, prefix, args.n)
            stage_cpu.append(time.process_time() - cpu)
            stage_runs.append(output_window(conf, f"{prefix}.docs", args.n))
        faust_s = None
        if not args.no_faust:
            prefix = f"bench-{run}-faust"
            ensure_topics(conf, prefix=prefix, partitions=4)
            faust_s = faust_stream(servers, source, prefix, args.n, conf)

    stage_s = statistics.median(stage_runs)
    pass_s = statistics.median(pass_runs)
    ratios = [p / s for p, s in zip(pass_runs, stage_runs, strict=True)]  # windows: p/s
    docs_per_s = (args.n - 1) / stage_s
    pass_per_s = (args.n - 1) / pass_s
    line = {
        "bench": "ingest",
        "n": args.n,
        "repeat": args.repeat,
        "input_mb": round(megabytes, 2),
        "docs_per_s": round(docs_per_s),
        "mb_per_s": round(megabytes / stage_s, 2),
        "passthrough_docs_per_s": round(pass_per_s),
        "passthrough_mb_per_s": round(megabytes / pass_s, 2),
        # each round measures both back to back: the median of the paired ratios
        "ratio": round(statistics.median(ratios), 3),
        "ratio_per_round": [round(r, 3) for r in ratios],
        "cpu_us_per_doc": round(statistics.median(stage_cpu) / args.n * 1e6, 1),
        "passthrough_cpu_us_per_doc": round(statistics.median(pass_cpu) / args.n * 1e6, 1),
        "faust_docs_per_s": round((args.n - 1) / faust_s) if faust_s else None,
        "faust_ratio": round((args.n - 1) / faust_s / pass_per_s, 3) if faust_s else None,
        "connector_runtime": "confluent",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
