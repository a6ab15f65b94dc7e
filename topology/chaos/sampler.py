"""Soak figures: each stage's resident memory, open descriptors and threads, the disk used
under the run directory and the topics' sizes, sampled while the loop runs; and their
growth per 10,000 documents after warm-up (:func:`growth_per_10k`).

A stage restarted by the supervisor starts again from a fresh process, so growth is
measured per process (pid), from the first sample after its own warm-up (its model
loaded, its buffers filled), and the largest over a stage's processes is its figure.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaException, TopicPartition

from topology.loop.supervisor import Supervisor

METRICS = ("rss_mb", "fds", "threads")
# growth per 10,000 documents past which a figure is called unbounded
LIMITS = {"rss_mb": 64.0, "fds": 16.0, "threads": 8.0}
PER = 10_000


@dataclass(frozen=True)
class Sample:
    stage: str  # a stage name, or "disk" / "topics" (their pid is 0)
    pid: int
    docs: int  # documents routed when it was taken
    values: Mapping[str, float]
    age_s: float = 0.0  # of the process (0 for "disk" and "topics")
    experts: int = 0  # experts registered when it was taken


def stage_samples(supervisor: Supervisor, docs: int) -> list[Sample]:
    """One sample of every running child (a child that ends meanwhile is left out)."""
    samples = []
    for name, child in supervisor.children.items():
        try:
            process = psutil.Process(child.process.pid)
            with process.oneshot():
                values = {
                    "rss_mb": process.memory_info().rss / 2**20,
                    "fds": process.num_fds(),
                    "threads": process.num_threads(),
                }
                age_s = time.time() - process.create_time()
        except psutil.Error:
            continue
        samples.append(Sample(name, child.process.pid, docs, values, age_s))
    return samples


def disk_sample(root: Path, docs: int) -> Sample:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue  # removed meanwhile (a temporary file)
    return Sample("disk", 0, docs, {"disk_mb": total / 2**20})


class TopicSizes:
    """Messages on each topic (the sum of its partitions' high watermarks)."""

    def __init__(self, conf: dict, topics: Iterable[str]) -> None:
        self.topics = list(topics)
        group = f"worx-chaos-sizes-{uuid.uuid4().hex[:8]}"
        self._consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})

    def sample(self, docs: int, timeout_s: float = 2.0) -> Sample | None:
        """None while the broker does not answer (it may be paused)."""
        sizes = {}
        try:
            metadata = self._consumer.list_topics(timeout=timeout_s)
            for name in self.topics:
                partitions = metadata.topics[name].partitions
                sizes[name] = sum(
                    self._consumer.get_watermark_offsets(
                        TopicPartition(name, p), timeout=timeout_s
                    )[1]
                    for p in partitions
                )
        except (KafkaException, KeyError):
            return None
        return Sample("topics", 0, docs, sizes)

    def close(self) -> None:
        self._consumer.close()


def growth_per_10k(
    samples: Iterable[Sample],
    warmup_docs: int,
    warmup_age_s: float = 60.0,
    min_span_docs: int = 2000,
    min_samples: int = 6,
) -> dict[str, dict[str, float]]:
    """Per stage and metric: the rise of its floor per 10,000 documents, over each
    process's samples taken after ``warmup_docs`` of the stream and ``warmup_age_s`` of its
    own life; the largest over a stage's processes. A process that saw fewer than
    ``min_span_docs`` documents or gave fewer than ``min_samples`` samples after its
    warm-up gives nothing.

    The floor: the lowest value in each half of a process's samples (by documents), the
    rise the second's minus the first's, over the documents between them (at least half
    the process's span). A leak raises the floor; work in progress (the monitor's
    memory, descriptors and threads while it evaluates, a sample taken as a killed
    process exits) only lifts single samples, which the ends of a short span would have
    turned into thousands of MB per 10,000 documents.

    >>> s = [Sample("route", 7, d, {"rss_mb": 100 + d / 1000}, 90.0) for d in range(0, 7001, 1000)]
    >>> growth_per_10k(s, warmup_docs=1000)
    {'route': {'rss_mb': 10.0}}
    >>> busy = [Sample("monitor", 8, d, {"rss_mb": 900 if d == 4000 else 440}, 90.0)
    ...         for d in range(1000, 4001, 500)]
    >>> growth_per_10k(busy, warmup_docs=1000)
    {'monitor': {'rss_mb': 0.0}}
    """
    runs: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for sample in samples:
        warm = sample.pid == 0 or sample.age_s >= warmup_age_s
        exiting = sample.values.get("rss_mb", 1.0) <= 0  # its memory already released
        if sample.docs >= warmup_docs and warm and not exiting:
            runs[(sample.stage, sample.pid)].append(sample)
    growth: dict[str, dict[str, float]] = {}
    for (stage, _), run in runs.items():
        run.sort(key=lambda s: s.docs)
        span = run[-1].docs - run[0].docs
        if span < min_span_docs or len(run) < min_samples:
            continue
        halves = (run[: len(run) // 2], run[len(run) // 2 :])
        figures = growth.setdefault(stage, {})
        for metric in set.intersection(*(set(s.values) for s in run)):
            low, high = (min(half, key=lambda s: s.values[metric]) for half in halves)
            between = max(high.docs - low.docs, span / 2)
            rate = round((high.values[metric] - low.values[metric]) / between * PER, 3)
            figures[metric] = max(rate, figures.get(metric, rate))
    return dict(sorted(growth.items()))


def settled_docs(samples: Iterable[Sample]) -> int:
    """Documents routed when the run's last expert had registered (the first sample that saw
    them all): from there on a stage's growth is its own per document, not the experts'.

    >>> settled_docs([Sample("disk", 0, d, {}, experts=n) for d, n in ((0, 0), (500, 2), (900, 2))])
    500
    """
    samples = list(samples)
    final = max((s.experts for s in samples), default=0)
    return min((s.docs for s in samples if s.experts == final), default=0)


def unbounded(growth: Mapping[str, Mapping[str, float]]) -> list[str]:
    """``stage.metric`` for every stage figure past its :data:`LIMITS`.

    >>> unbounded({"serve": {"rss_mb": 80.0, "fds": 1.0}, "disk": {"disk_mb": 500.0}})
    ['serve.rss_mb']
    """
    return [
        f"{stage}.{metric}"
        for stage, figures in growth.items()
        for metric, rate in sorted(figures.items())
        if metric in LIMITS and rate > LIMITS[metric]
    ]
