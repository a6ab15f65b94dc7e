"""Discovery and drift figures on a labelled corpus; prints ONE JSON line.

Runs the route and discover stage objects in-process (the domain table a route worker
follows is fed straight from discover's output, as ``worx.domains`` would), on:

1. a phased stream: every domain in turn (seeded order, at most ``--per-domain`` docs
   each), then a mixture of all of them (``--mixture`` docs);
2. a stationary stream: ``--stationary`` more docs drawn i.i.d. from the same domains,
   continuing from the state the phased stream left (nothing new happens in it);
3. a mixture of every domain from an empty table (``--scratch`` docs): domains found.

Figures: ``nmi`` / ``purity`` of the discovered domains against the labels: every phased
document goes to its nearest final domain centroid (as the inference gate routes); also
``nmi_routed`` (with the thresholds: novel documents form one extra cluster) and
``nmi_online`` (the decision when each document was routed); ``max_detection_delay_docs`` (documents
from the start of a domain's phase to the promotion of a domain whose majority label it
is; a domain never promoted counts its whole phase); ``jobs_per_new_domain``;
``spurious_domains_stationary`` (promotions in the stationary stream),
``false_drift_stationary`` (novelty-rate and distance drift events in it); and
``route_docs_per_s`` of one route worker (``process_batch`` on batches of 500, as the
plain runner calls it; one document per call before it existed). The baseline, side by
side, is the same pipeline with the plain hashed TF embedder (IDF off): ``baseline_*``
keys.

Usage::

    python bench/discovery.py [--corpus DIR] [--seed N] [--stationary 20000] [--quick]
                               [--interleave W] [--lag L]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import sys
import time
import zlib
from collections import Counter, deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from ingest.records import Doc  # noqa: E402
from monitor.cluster_agreement import nmi_purity  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.discover import DiscoverStage  # noqa: E402
from router.embed import HashedTfidfEmbedder, default_embedder  # noqa: E402
from router.idf import IdfTable  # noqa: E402
from router.records import DomainRecord, DriftEvent, RoutedDoc, TrainJob  # noqa: E402
from router.route import RouteStage  # noqa: E402
from worx.scenario import LabelledDoc, Scenario  # noqa: E402
from worx.stage import Message  # noqa: E402

log = logging.getLogger("bench.discovery")


class Pipeline:
    """Route stage + discover stage wired in-process.

    By default discover gets each decision as soon as it is made. To emulate one discover
    reading several partitions of ``worx.routed``: with ``lag`` > 0 the decisions go to two
    partitions (by a hash of the doc id) and the second reaches discover ``lag`` documents
    after the first (its route worker lags); with ``interleave`` > 1 they are delivered in
    windows of that many, shuffled within each window (seeded: batches interleave). Route
    meanwhile decides with the table it has (a new domain reaches it on delivery).
    """

    def __init__(
        self, config: RouterConfig, embedder, interleave: int = 0, lag: int = 0, seed: int = 0
    ) -> None:
        self.route = RouteStage(config, embedder=embedder)
        self.interleave = interleave
        self.lag = lag
        self.shuffle = random.Random(seed)
        self.lagging: deque[tuple[int, RoutedDoc]] = deque()  # (due seq, decision)
        self.pending: list[RoutedDoc] = []
        self.discover = DiscoverStage(config, embedder=embedder)
        self.events: list[tuple[int, DriftEvent]] = []
        self.jobs: list[tuple[int, TrainJob]] = []
        self.online: list[str] = []
        self.seq = 0

    def feed(self, doc: LabelledDoc) -> None:
        # the document enters at time seq + 1 (monotone, as ingest stamps Doc.created_ms)
        msg = Message(b"", topic="bench.docs", partition=0, offset=self.seq, timestamp_ms=self.seq)
        entered = Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain, created_ms=self.seq + 1)
        [routed] = self.route.process(msg, entered)
        record: RoutedDoc = routed.record
        self.online.append(record.domain_id or "novel")
        if self.lag and zlib.crc32(record.doc_id.encode()) % 2:
            self.lagging.append((self.seq + self.lag, record))
        else:
            self.pending.append(record)
        self.seq += 1
        while self.lagging and self.lagging[0][0] <= self.seq:
            self.pending.append(self.lagging.popleft()[1])
        if len(self.pending) >= self.interleave:
            self.deliver()

    def flush(self) -> None:
        """Deliver every decision not yet delivered to discover."""
        self.pending.extend(record for _, record in self.lagging)
        self.lagging.clear()
        self.deliver()

    def deliver(self) -> None:
        batch, self.pending = self.pending, []
        if len(batch) > 1:
            self.shuffle.shuffle(batch)
        for record in batch:
            self._discover(record)

    def _discover(self, record: RoutedDoc) -> None:
        rmsg = Message(
            b"", topic="bench.routed", partition=0, offset=self.seq, timestamp_ms=self.seq
        )
        for emit in self.discover.process(rmsg, record):
            if isinstance(emit.record, DomainRecord):
                self.route.table.apply(emit.record)
            elif isinstance(emit.record, DriftEvent):
                self.events.append((self.seq, emit.record))
            elif isinstance(emit.record, TrainJob):
                self.jobs.append((self.seq, emit.record))

    def final_assignment(self, vectors: np.ndarray, thresholds: bool) -> list[str]:
        """Each document's domain by the final table: nearest centroid (as the inference
        gate picks experts), or with ``thresholds`` as route would (novel: one cluster)."""
        table = self.route.table
        if thresholds:
            return [table.route(v)[0] or "novel" for v in vectors]
        return [table.nearest(v)[0] or "novel" for v in vectors]


def run_phased(
    scenario: Scenario,
    config: RouterConfig,
    embedder,
    per_domain: int,
    mixture: int,
    seed: int,
    progress: bool,
    interleave: int = 0,
    lag: int = 0,
) -> dict:
    order = scenario.names
    random.Random(seed).shuffle(order)
    stream = list(scenario.phases_then_mixture(order, per_domain, mixture, seed=seed))
    pipe = Pipeline(config, embedder, interleave=interleave, lag=lag, seed=seed)
    for doc in tqdm(stream, desc="phased", disable=not progress, mininterval=2):
        pipe.feed(doc)
    pipe.flush()
    labels = [d.domain for d in stream]
    vectors = embedder.embed([d.text for d in stream])  # (N, dim)
    nearest = pipe.final_assignment(vectors, thresholds=False)
    nmi, purity = nmi_purity(labels, nearest)
    nmi_routed, purity_routed = nmi_purity(labels, pipe.final_assignment(vectors, thresholds=True))
    nmi_online, purity_online = nmi_purity(labels, pipe.online)
    # detection delay per phase
    starts, pos = {}, 0
    for name in order:
        starts[name] = pos
        pos += min(len(scenario.domains[name]), per_domain)
    hints = domain_labels(pipe)
    delays = {}
    for name in order:
        end = starts[name] + min(len(scenario.domains[name]), per_domain)
        hit = [
            seq
            for seq, ev in pipe.events
            if ev.detector == "promotion"
            and hints.get(ev.domain_id) == name
            and seq >= starts[name]
        ]
        delays[name] = (min(hit) - starts[name]) if hit else end - starts[name]
    new_jobs = Counter(job.domain_id for _, job in pipe.jobs if job.reason == "new_domain")
    taken, takers = taken_by_later_neighbours(pipe, labels, nearest)
    return {
        "taken_by_later_neighbour": taken,
        "taken_by_later_neighbour_top": takers,
        "nmi": nmi,
        "purity": purity,
        "nmi_routed": nmi_routed,
        "purity_routed": purity_routed,
        "nmi_online": nmi_online,
        "purity_online": purity_online,
        "max_detection_delay_docs": max(delays.values()),
        "detection_delay_docs": delays,
        "domains_found": len(hints),
        "labels": len(order),
        "jobs_per_new_domain": sorted(new_jobs.values()),
        "drift_jobs": sum(1 for _, job in pipe.jobs if job.reason == "drift"),
        "phased_docs": len(stream),
        "pipeline": pipe,
    }


def domain_labels(pipe: Pipeline) -> dict[str, str | None]:
    """Each active domain of discover's table and its majority label (a retired row routes
    nothing)."""
    return {
        row.domain_id: row.label_hint
        for row in pipe.discover.table.rows()
        if row.status == "active"
    }


def taken_by_later_neighbours(
    pipe: Pipeline, labels: list[str], nearest: list[str]
) -> tuple[float, list[tuple[str, str, int]]]:
    """Forgetting through routing, in the embedding: the share of the documents of labels
    that got a domain whose nearest final domain is another label's, promoted *after*
    their own label's first domain (a newer neighbour took them), and the largest such
    flows as ``(label, taker's label, documents)``."""
    hints = domain_labels(pipe)
    promoted = {ev.domain_id: seq for seq, ev in pipe.events if ev.detector == "promotion"}
    first: dict[str, int] = {}
    for domain_id, seq in promoted.items():
        label = hints.get(domain_id)
        if label is not None:
            first[label] = min(seq, first.get(label, seq))
    flows: Counter = Counter()
    counted = 0
    for label, domain_id in zip(labels, nearest, strict=True):
        if label not in first:
            continue
        counted += 1
        taker = hints.get(domain_id)
        if taker != label and promoted.get(domain_id, -1) > first[label]:
            flows[(label, taker)] += 1
    top = [(a, b, n) for (a, b), n in flows.most_common(5)]
    return sum(flows.values()) / max(1, counted), top


def run_stationary(scenario: Scenario, pipe: Pipeline, n: int, seed: int, progress: bool) -> dict:
    """Continue ``pipe`` (its domains learned on the phased stream) on ``n`` documents of
    the same mixture: nothing new happens, so every promotion is spurious and every
    novelty-rate or distance event is a false drift."""
    first_event, first_job, first_seq = len(pipe.events), len(pipe.jobs), pipe.seq
    for doc in tqdm(
        scenario.mixture(n, seed=seed + 7),
        total=n,
        desc="stationary",
        disable=not progress,
        mininterval=2,
    ):
        pipe.feed(doc)
    pipe.flush()
    events = [ev for _, ev in pipe.events[first_event:]]
    online = pipe.online[first_seq:]
    return {
        "spurious_domains_stationary": sum(1 for ev in events if ev.detector == "promotion"),
        "false_drift_stationary": sum(1 for ev in events if ev.detector != "promotion"),
        "jobs_stationary": len(pipe.jobs) - first_job,
        "jobs_stationary_detail": stationary_jobs(pipe, first_job, first_event),
        "stationary_docs": n,
        "novel_rate_stationary": online.count("novel") / max(1, n),
    }


def stationary_jobs(pipe: Pipeline, first_job: int, first_event: int) -> list[dict]:
    """What each job of the stationary stream was: its reason, its domain's majority
    label, whether that domain was promoted before the stationary stream began, and
    whether its label already had an older domain (then it is a second mode's job)."""
    hints = domain_labels(pipe)
    promoted = [
        (k, ev.domain_id) for k, (_, ev) in enumerate(pipe.events) if ev.detector == "promotion"
    ]
    order = {domain_id: k for k, domain_id in promoted}
    first_of_label: dict[str | None, int] = {}
    for k, domain_id in promoted:
        first_of_label.setdefault(hints.get(domain_id), k)
    detail = []
    for _, job in pipe.jobs[first_job:]:
        at = order.get(job.domain_id, -1)
        label = hints.get(job.domain_id)
        detail.append(
            {
                "reason": job.reason,
                "label": label,
                "domain_promoted": "before" if at < first_event else "during",
                "second_domain_of_label": at > first_of_label.get(label, at),
            }
        )
    return detail


def from_empty_table(
    stream: list[LabelledDoc],
    config: RouterConfig,
    embedder,
    desc: str,
    seed: int,
    progress: bool,
    interleave: int,
    lag: int,
) -> tuple[Pipeline, list[str], float, float]:
    """Run ``stream`` through a pipeline that starts with no domain; returns the pipeline,
    the labels and the NMI and purity of each document's nearest final centroid."""
    pipe = Pipeline(config, embedder, interleave=interleave, lag=lag, seed=seed)
    for doc in tqdm(stream, desc=desc, disable=not progress, mininterval=2):
        pipe.feed(doc)
    pipe.flush()
    labels = [d.domain for d in stream]
    vectors = embedder.embed([d.text for d in stream])
    nmi, purity = nmi_purity(labels, pipe.final_assignment(vectors, thresholds=False))
    return pipe, labels, nmi, purity


def run_from_scratch(
    scenario: Scenario,
    config: RouterConfig,
    embedder,
    n: int,
    seed: int,
    progress: bool,
    interleave: int = 0,
    lag: int = 0,
) -> dict:
    """A mixture of every domain from an empty table: how many domains it finds."""
    stream = list(scenario.mixture(n, seed=seed + 13))
    pipe, _, nmi, _ = from_empty_table(
        stream, config, embedder, "mixture from scratch", seed, progress, interleave, lag
    )
    hints = list(domain_labels(pipe).values())
    return {
        "scratch_domains": len(hints),
        "scratch_distinct_labels": len(set(hints)),
        "scratch_nmi": nmi,
    }


def run_mixed(
    scenario: Scenario,
    config: RouterConfig,
    embedder,
    n: int,
    seed: int,
    progress: bool,
    interleave: int = 0,
    lag: int = 0,
) -> dict:
    """A company-shaped stream (:meth:`Scenario.company`: Zipf-like frequencies, many kinds
    from the start, some joining later, some fading and coming back) from an empty table."""
    stream = list(scenario.company(n, seed=seed))
    pipe, labels, nmi, purity = from_empty_table(
        stream, config, embedder, "company mixture", seed, progress, interleave, lag
    )
    counts = Counter(labels)
    hints = domain_labels(pipe)
    promoted_at: dict[str, int] = {}  # label -> position of its first domain's promotion
    spurious = 0
    for seq, ev in pipe.events:
        if ev.detector != "promotion":
            continue
        label = hints.get(ev.domain_id)
        if label is None:
            continue  # a domain retired since
        if label in promoted_at:
            spurious += 1
        else:
            promoted_at[label] = seq
    delays = {}
    for label in counts:
        until = promoted_at.get(label, len(stream))
        delays[label] = sum(1 for d in stream[:until] if d.domain == label)
    rare = [label for label, c in counts.items() if c < 0.02 * len(stream)]
    job_labels = Counter(
        hints.get(job.domain_id) for _, job in pipe.jobs if job.reason == "new_domain"
    )
    return {
        "mixed_docs": len(stream),
        "mixed_nmi": nmi,
        "mixed_purity": purity,
        "mixed_domains_found": len(hints),
        "mixed_labels": len(counts),
        "mixed_spurious": spurious,
        "mixed_max_delay_docs": max(delays.values()),
        "mixed_delay_docs": dict(sorted(delays.items())),
        "mixed_missing": sorted(set(counts) - set(promoted_at)),
        "mixed_split": sorted(k for k, c in Counter(hints.values()).items() if c > 1),
        "mixed_rare_labels": len(rare),
        "mixed_rare_found": sum(1 for r in rare if r in promoted_at) / max(1, len(rare)),
        "mixed_jobs": len(pipe.jobs),
        # labels that got a domain but no expert (its job never gathered enough texts), and
        # new-domain jobs for a label that had one already (a second expert for one kind)
        "mixed_found_without_job": sorted(set(promoted_at) - set(job_labels)),
        "mixed_second_jobs": sum(c - 1 for label, c in job_labels.items() if label and c > 1),
        # labels of the stream that no first job is for: no expert would serve them
        "mixed_labels_without_job": len(set(counts) - set(job_labels)),
    }


def route_throughput(
    scenario: Scenario, config: RouterConfig, embedder, table, n: int = 2000, batch: int = 500
) -> float:
    """Documents per second of one route worker: ``RouteStage.process_batch`` on batches of
    ``batch`` (the plain runner's batch size), as a worker runs it."""
    stage = RouteStage(config, table=table, embedder=embedder)
    docs = [Doc(doc_id=d.doc_id, text=d.text) for d in scenario.mixture(n, seed=99)]
    start = time.perf_counter()
    route_in_batches(stage, docs, batch)
    return n / (time.perf_counter() - start)


def route_in_batches(stage: RouteStage, docs: list[Doc], batch: int = 500) -> None:
    """``stage.process_batch`` over ``docs`` in batches of ``batch``, as a worker calls it."""
    msg = Message(b"", topic="bench.docs", partition=0, offset=0)
    for first in range(0, len(docs), batch):
        chunk = docs[first : first + batch]
        stage.process_batch([msg] * len(chunk), chunk)


def route_cost_by_table_size(
    scenario: Scenario, config: RouterConfig, embedder, table, small: int = 7, repeats: int = 3
) -> dict:
    """Route CPU per document with the whole final table beside the same documents routed
    against its first ``small`` domains (by id), in one run: does the cost grow with N?
    Medians of ``repeats`` alternating runs of ``process_batch`` (process CPU time)."""
    from router.table import DomainTable

    rows = [row for row in table.rows() if row.status == "active"]
    few = DomainTable(dim=embedder.dim)
    for row in rows[:small]:
        few.apply(row)
    docs = [Doc(doc_id=d.doc_id, text=d.text) for d in scenario.mixture(1500, seed=98)]
    runs: dict[int, list[float]] = {len(rows): [], min(small, len(rows)): []}
    for _ in range(repeats):
        for size, held in ((len(rows), table), (min(small, len(rows)), few)):
            stage = RouteStage(config, table=held, embedder=embedder)
            start = time.process_time()
            route_in_batches(stage, docs)
            runs[size].append(1e6 * (time.process_time() - start) / len(docs))
    out = {f"route_cpu_us_per_doc_n{size}": float(np.median(v)) for size, v in runs.items()}
    out["route_cpu_ratio_n_all_over_n_small"] = (
        out[f"route_cpu_us_per_doc_n{len(rows)}"]
        / out[f"route_cpu_us_per_doc_n{min(small, len(rows))}"]
    )
    return out


def compare_river_clusterers(scenario: Scenario, embedder, seed: int) -> dict:
    """NMI of river's online clusterers on the embeddings of a phased stream (200/domain)."""
    from river import cluster

    order = scenario.names
    random.Random(seed).shuffle(order)
    stream = list(scenario.phased(order, per_domain=200, seed=seed))
    vectors = embedder.embed([d.text for d in stream])  # (N, dim)
    labels = [d.domain for d in stream]
    out = {}
    models = {
        f"dbstream_{t}": lambda t=t: cluster.DBSTREAM(
            clustering_threshold=t,
            fading_factor=0.001,
            cleanup_interval=50,
            intersection_factor=0.3,
            minimum_weight=2.0,
        )
        for t in (0.9, 1.1, 1.25)
    }
    models["denstream_0.9"] = lambda: cluster.DenStream(
        epsilon=0.9, beta=0.5, mu=2.5, n_samples_init=100
    )
    for name, make in models.items():
        model = make()
        rows = [dict(enumerate(v.tolist())) for v in vectors]
        for row in rows:
            model.learn_one(row)
        out[f"compare_river_{name}_nmi"] = nmi_purity(
            labels, [str(model.predict_one(r)) for r in rows]
        )[0]
    return out


def compare_detectors(config: RouterConfig, seeds: int = 3) -> dict:
    """False alarms on 20,000 stationary values and delay after a shift, per detector."""
    from river import drift

    from router.detectors import Detector

    class Ours:
        def __init__(self, delta: float, threshold: float) -> None:
            self.det = Detector(delta, threshold, config.detector_min_docs)
            self.drift_detected = False

        def update(self, x: float) -> None:
            self.drift_detected = self.det.update(x)

    signals = {
        "novelty": (
            lambda r: float(r.random() < 0.09),
            lambda r: float(r.random() < 0.6),
            (config.novelty_delta, config.novelty_threshold),
        ),
        "distance": (
            lambda r: r.gauss(0, 1),
            lambda r: r.gauss(1.5, 1),
            (config.distance_delta, config.distance_threshold),
        ),
    }
    out = {}
    for signal, (calm, shifted, ph) in signals.items():
        makers = {
            "page_hinkley": lambda ph=ph: Ours(*ph),
            "adwin": drift.ADWIN,
            "kswin": lambda: drift.KSWIN(seed=1),
        }
        for name, make in makers.items():
            alarms, delays = 0, []
            for s in range(seeds):
                rng = random.Random(s)
                det = make()
                for _ in range(20_000):
                    det.update(calm(rng))
                    alarms += bool(det.drift_detected)
                det = make()
                for _ in range(2000):
                    det.update(calm(rng))
                delay = 1000
                for i in range(1000):
                    det.update(shifted(rng))
                    if det.drift_detected:
                        delay = i
                        break
                delays.append(delay)
            out[f"compare_{signal}_{name}_false_alarms"] = alarms
            out[f"compare_{signal}_{name}_max_delay"] = max(delays)
    return out


def plain_embedder(config: RouterConfig) -> HashedTfidfEmbedder:
    """The baseline: the same hashed embedder with IDF (and the form block) off."""
    return HashedTfidfEmbedder(
        dim=config.embed_dim,
        char_ngrams=config.embed_char_ngrams,
        word_weight=config.embed_word_weight,
        tf_cap=config.embed_tf_cap,
        max_chars=config.embed_max_chars,
        idf=IdfTable.empty(),
    )


def measure(scenario: Scenario, config: RouterConfig, embedder, args) -> dict:
    progress = not args.no_progress
    out: dict = {}
    if args.only in (None, "phased"):
        phased = run_phased(
            scenario,
            config,
            embedder,
            args.per_domain,
            args.mixture,
            args.seed,
            progress,
            args.interleave,
            args.lag,
        )
        pipe = phased.pop("pipeline")
        out.update(phased)
        out.update(run_stationary(scenario, pipe, args.stationary, args.seed, progress))
        out["route_docs_per_s"] = route_throughput(scenario, config, embedder, pipe.route.table)
        out.update(route_cost_by_table_size(scenario, config, embedder, pipe.route.table))
    if args.scratch and args.only in (None, "scratch"):
        out.update(
            run_from_scratch(
                scenario,
                config,
                embedder,
                args.scratch,
                args.seed,
                progress,
                args.interleave,
                args.lag,
            )
        )
    if args.mixed and args.only in (None, "mixed"):
        out.update(
            run_mixed(
                scenario,
                config,
                embedder,
                args.mixed,
                args.seed,
                progress,
                args.interleave,
                args.lag,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus",
        default=None,
        help="directory of labelled *.jsonl[.gz], or a preset: 'many' (the trunk's two "
        "domains and data/corpus_many's 40) (default: data/corpus)",
    )
    parser.add_argument("--per-domain", type=int, default=600, help="docs per phase (cap)")
    parser.add_argument("--mixture", type=int, default=2000, help="docs of the final mixture")
    parser.add_argument("--stationary", type=int, default=20000, help="stationary stream docs")
    parser.add_argument(
        "--scratch", type=int, default=3000, help="docs of a mixture from an empty table (0: skip)"
    )
    parser.add_argument(
        "--mixed",
        type=int,
        default=0,
        metavar="N",
        help="N docs of a company-shaped stream from an empty table (mixed_* keys; 0: skip)",
    )
    parser.add_argument(
        "--only",
        choices=["phased", "mixed", "scratch"],
        default=None,
        help="run one scenario alone (iterating on it); phased includes the stationary stream",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="W",
        help="deliver routed decisions to discover shuffled within windows of W (several "
        "partitions of worx.routed read by one discover); 0: in order",
    )
    parser.add_argument(
        "--lag",
        type=int,
        default=0,
        metavar="L",
        help="two partitions of worx.routed, the second L documents behind the first",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the IDF-off baseline")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also measure river's clusterers and drift detectors (compare_*)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="iterate faster: 5,000 stationary docs, no scratch mixture, no baseline",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a [router] setting, e.g. --set threshold_quantile=0.05",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.stationary, args.scratch, args.no_baseline = min(args.stationary, 5000), 0, True
    logging.basicConfig(level=logging.WARNING)
    overrides = {}
    for item in args.set:
        field, _, value = item.partition("=")
        kind = type(getattr(RouterConfig(), field))
        overrides[field] = kind(value)
    config = RouterConfig(**overrides)
    config.validate()
    scenario = Scenario.from_directory(args.corpus)
    result = {
        "corpus": str(args.corpus or "data/corpus"),
        "embedder": config.embedder,
        "embed_dim": config.embed_dim,
        "seed": args.seed,
        "interleave": args.interleave,
        "lag": args.lag,
    }
    result.update(measure(scenario, config, default_embedder(config), args))
    if not args.no_baseline:
        base = measure(scenario, config, plain_embedder(config), args)
        for key in (
            "nmi",
            "scratch_nmi",
            "mixed_nmi",
            "purity",
            "max_detection_delay_docs",
            "spurious_domains_stationary",
            "false_drift_stationary",
            "route_docs_per_s",
        ):
            if key in base:
                result[f"baseline_{key}"] = base[key]
    if args.compare:
        result.update(compare_river_clusterers(scenario, default_embedder(config), args.seed))
        result.update(compare_detectors(config))
    result["config"] = {k: v for k, v in dataclasses.asdict(config).items() if k in overrides}
    print(json.dumps(result, default=lambda o: list(o) if isinstance(o, tuple) else str(o)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
