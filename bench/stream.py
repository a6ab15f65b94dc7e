"""Route stage speed per worker in each runtime, on one broker; prints ONE JSON line.

The same ``--docs`` documents (a seeded mixture of the bundled corpus, seed 99 as
``bench/discovery.py``'s ``route_docs_per_s``) go through one route worker of each runtime,
against a table of one domain per bundled label (centroid of 60 of its documents), on the
embedded broker (one partition, topics fresh per run):

- ``plain``: ``worx route``'s worker (:class:`topology.runtimes.stage_runner.StageRunner` feeding
  :class:`router.route.RouteStage`, whose ``process_batch`` embeds each consumed batch in
  one call: :mod:`router.embed_hashing`);
- ``plain_legacy``: the same worker with today's code path before that change kept
  runnable: one document at a time, ``HashedTfidfEmbedder(legacy=True)`` (``embed_one``,
  bit for bit the same vectors), no ``process_batch``, no allocator setting
  (:mod:`router.allocator`: the batch embedder's); the record codecs (decoding the
  ``Doc``, encoding the ``RoutedDoc``) are shared: both paths use the current ones;
- ``faust``: ``worx stream --agents route`` (the route agent, batches of ``take_events``);
- ``flink``: ``bench/stream_flink.py``'s ``flink_route_figures(messages, parallelism,
  domains=rows)`` for parallelism 1 and 2 when PyFlink is installed (the same
  :class:`ingest.records.Doc` list and the same table; the job route-only, its Python
  workers as processes), its keys merged as ``flink_p<N>_<key>``: run the bench with the
  Flink venv's python to get them (README "Flink").

Each worker is its own process, measured from outside: the bench reads ``<prefix>.routed``
as it fills (the embedded broker's watermarks are not message counts) and samples the
worker's CPU time every ~20 ms (``/proc/<pid>/stat`` utime + stime: every thread,
librdkafka's too). The window runs from the decision of the document at 10 % (start-up and
the group join are outside it) to the last one, timed by the records' own timestamps (set
by the worker's producer; the documents in the window are those whose decision was
produced after its start): ``<runtime>_route_docs_per_s`` = documents in the window / its
seconds and ``<runtime>_cpu_us_per_doc`` = worker CPU in it (interpolated between samples)
/ its documents. Medians over
``--repeats`` runs (the runtimes interleaved in each), with each run's figures beside them.
Run it alone on the machine: ``flock /tmp/worx-bench.lock python bench/stream.py``; the
``uptime`` load averages before and after are in the line.

Usage::

    python bench/stream.py [--docs 6000] [--repeats 3] [--runtimes plain_legacy,plain,faust]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

from ingest.records import Doc  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.embed import default_embedder  # noqa: E402
from router.records import DomainRecord  # noqa: E402
from topology.composition.embedded_broker import EmbeddedBroker  # noqa: E402
from topology.composition.topics import Topics, ensure_topics  # noqa: E402
from worx.scenario import Scenario  # noqa: E402

log = logging.getLogger("bench.stream")
RUNTIMES = ("plain_legacy", "plain", "faust")
START_SHARE = 0.1  # the window opens once this share of the documents is routed
POLL_S = 0.02
TICKS = os.sysconf("SC_CLK_TCK")


def corpus_messages(n: int) -> tuple[list[Doc], list[DomainRecord]]:
    """``n`` documents of a seeded mixture and a domain row per label."""
    scenario = Scenario.from_directory()
    docs = [
        Doc(doc_id=f"s{i}-{d.doc_id}"[:200], text=d.text, label=d.domain)
        for i, d in enumerate(scenario.mixture(n, seed=99))
    ]
    config = RouterConfig()
    embedder = default_embedder(config)
    rows = []
    for label in scenario.names:
        vectors = embedder.embed([d.text for d in scenario.domains[label][:60]])  # (60, dim)
        centroid = vectors.mean(axis=0)
        centroid /= np.linalg.norm(centroid)
        cohesion = float((vectors @ centroid).mean())
        rows.append(
            DomainRecord(
                f"dom-{label}".replace("_", "-"),
                centroid.tolist(),
                threshold=0.15,
                size=60,
                cohesion=cohesion,
                core_threshold=0.3,
                embedder=embedder.fingerprint,
            )
        )
    return docs, rows


def publish(conf: dict, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = Producer({**conf, "linger.ms": 20})
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key=key, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not deliver every message to {topic}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def worker_command(runtime: str) -> list[str]:
    if runtime == "faust":
        return [sys.executable, "-m", "topology.commands", "stream", "--agents", "route"]
    return [sys.executable, str(Path(__file__).resolve()), "--worker", runtime]


def measure(runtime: str, servers: str, docs: list[Doc], rows: list[DomainRecord]) -> dict:
    """One run of one runtime's worker over ``docs``; its figures."""
    conf = {"bootstrap.servers": servers}
    topics = Topics(f"bench-stream-{runtime.replace('_', '-')}-{os.getpid()}-{time.time_ns()}")
    ensure_topics(conf, prefix=topics.prefix, partitions=1)
    publish(conf, topics.domains, [(r.domain_id, r.to_json()) for r in rows])
    publish(conf, topics.docs, [(d.doc_id, d.to_json()) for d in docs])
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    data_dir = tempfile.mkdtemp(prefix="worx-bench-stream-")
    env |= {
        "WORX_KAFKA__BOOTSTRAP_SERVERS": servers,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "WORX_DATA_DIR": data_dir,
        "PYTHONPATH": str(ROOT),
    }
    # the embedded broker's watermarks are not message counts: read the outputs instead
    watch = Consumer({**conf, "group.id": f"{topics.prefix}-watch", "enable.auto.commit": False})
    watch.assign([TopicPartition(topics.routed, 0, OFFSET_BEGINNING)])
    worker = subprocess.Popen(
        worker_command(runtime),
        cwd=data_dir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    n = len(docs)
    seen: set[bytes] = set()
    stamps: list[int] = []  # ms: when the worker produced each first decision
    samples: list[tuple[float, float]] = []  # (wall s, worker CPU s)
    deadline = time.monotonic() + 600
    try:
        while len(seen) < n:
            if worker.poll() is not None:
                raise RuntimeError(
                    f"{runtime} worker exited {worker.returncode}: "
                    f"{worker.stderr.read().decode(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{runtime} worker routed {len(seen)} of {n} in 600 s")
            for msg in watch.consume(1000, timeout=POLL_S):
                if msg.error() is None and msg.key() not in seen:
                    seen.add(msg.key())
                    stamps.append(msg.timestamp()[1])
            samples.append((time.time(), cpu_seconds(worker.pid)))
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        watch.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    # a batch's decisions are produced together: the window holds those produced after t0
    t0, t1 = stamps[int(START_SHARE * n)] / 1000, max(stamps) / 1000
    docs_in_window = sum(1 for stamp in stamps if stamp / 1000 > t0)
    wall, cpu = np.array(samples).T  # (polls,), (polls,)
    return {
        "route_docs_per_s": docs_in_window / (t1 - t0),
        "cpu_us_per_doc": float(np.interp(t1, wall, cpu) - np.interp(t0, wall, cpu))
        / docs_in_window
        * 1e6,
    }


def run_worker(runtime: str) -> int:
    """The plain runtime's route worker (``worx route``'s), or today's code path."""
    import threading

    from topology.commands._shared import stop_on_sigterm
    from topology.composition.worx_config import load_config
    from topology.runtimes.stage_runner import StageRunner
    from topology.runtimes.table_follower import TableFollower

    config = load_config(None)
    conf = {"bootstrap.servers": config.kafka.bootstrap_servers}
    topics = Topics(config.kafka.topic_prefix)
    stage = todays_route_stage(config.router) if runtime == "plain_legacy" else None
    if stage is None:
        from router.route import RouteStage

        stage = RouteStage(config.router)
    follower = TableFollower(conf, topics.domains, stage.table.apply).start()
    runner = StageRunner(
        stage,
        conf,
        topics,
        [topics.docs],
        group_id=f"{topics.prefix}-route",
        stage_name="route",
        batch_size=500,
        session_timeout_ms=config.kafka.session_timeout_ms,
        followers=[follower],
    )
    stop_on_sigterm()
    try:
        runner.run(threading.Event())
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
    return 0


class TodaysRoute:
    """The route stage as it ran before batching: one document per ``process`` call,
    embedded by ``embed_one`` (same vectors), and no ``process_batch``, so the runner
    takes its one-message-at-a-time path."""

    def __init__(self, config: RouterConfig) -> None:
        from router.embedders import hashed_tfidf_embedder
        from router.route import RouteStage

        embedder = hashed_tfidf_embedder(config)
        embedder.legacy = True
        self._stage = RouteStage(config, embedder=embedder)
        self.input_record = self._stage.input_record
        self.table = self._stage.table
        self.process = self._stage.process
        self.snapshot = self._stage.snapshot
        self.restore = self._stage.restore


def todays_route_stage(config: RouterConfig) -> TodaysRoute:
    return TodaysRoute(config)


def uptime() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=6000, help="documents per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each runtime (median)")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated")
    parser.add_argument("--no-flink", action="store_true", help="skip the Flink columns")
    parser.add_argument("--worker", choices=("plain", "plain_legacy"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.worker:
        return run_worker(args.worker)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    unknown = set(runtimes) - set(RUNTIMES)
    if unknown:
        parser.error(f"unknown runtimes {sorted(unknown)}; choose from {', '.join(RUNTIMES)}")
    load_before = uptime()
    docs, rows = corpus_messages(args.docs)
    runs: dict[str, list[dict]] = {r: [] for r in runtimes}
    with EmbeddedBroker() as broker:
        for repeat in range(args.repeats):
            order = runtimes[repeat % len(runtimes) :] + runtimes[: repeat % len(runtimes)]
            for runtime in order:
                runs[runtime].append(measure(runtime, broker.bootstrap_servers, docs, rows))
    result: dict = {
        "docs": len(docs),
        "repeats": args.repeats,
        "domains": len(rows),
        "mean_chars": round(sum(len(d.text) for d in docs) / len(docs), 1),
    }
    for runtime, figures in runs.items():
        for key in ("route_docs_per_s", "cpu_us_per_doc"):
            values = [f[key] for f in figures]
            result[f"{runtime}_{key}"] = round(statistics.median(values), 1)
            result[f"{runtime}_{key}_runs"] = [round(v, 1) for v in values]
    if "plain" in runs and "plain_legacy" in runs:
        result["plain_speedup"] = round(
            result["plain_route_docs_per_s"] / result["plain_legacy_route_docs_per_s"], 2
        )
        result["plain_cpu_ratio"] = round(
            result["plain_legacy_cpu_us_per_doc"] / result["plain_cpu_us_per_doc"], 2
        )
    result.update(flink_figures(docs, rows, args.no_flink))
    result["uptime_before"] = load_before
    result["uptime_after"] = uptime()
    print(json.dumps(result))
    return 0


def flink_figures(docs: list[Doc], rows: list[DomainRecord], skip: bool) -> dict:
    """``flink_p1_*`` and ``flink_p2_*`` from ``bench/stream_flink.py``, or why not."""
    if skip:
        return {"flink": None, "flink_reason": "--no-flink"}
    if not (Path(__file__).with_name("stream_flink.py")).exists():
        return {"flink": None, "flink_reason": "bench/stream_flink.py does not exist"}
    if importlib.util.find_spec("pyflink") is None:
        return {
            "flink": None,
            "flink_reason": "PyFlink is not installed in this environment (run the bench "
            "with the Flink environment's python, README 'Flink')",
        }
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from stream_flink import flink_route_figures

    out: dict = {}
    for parallelism in (1, 2):
        try:
            figures = flink_route_figures(docs, parallelism, domains=rows)
        except Exception as exc:  # the other columns are still worth printing
            log.exception("Flink at parallelism %d failed", parallelism)
            return {**out, "flink": None, "flink_reason": f"{type(exc).__name__}: {exc}"[:300]}
        for key, value in figures.items():
            out[f"flink_p{parallelism}_{key}"] = value
    return out


if __name__ == "__main__":
    raise SystemExit(main())
