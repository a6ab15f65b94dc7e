"""One run of the whole loop (the demo's supervisor, stages and feed on the embedded broker)
under a fault schedule, and what it must show: the invariants over the run, serve's
availability, the time from each new domain's first document to its expert, and the soak
figures. An empty schedule is the fault-free run the chaos run is compared with.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from experts.store import ExpertStore
from experts.trunk import trunk_fingerprint
from monitor import run_summary
from monitor.history import MatrixHistory
from topology.chaos import invariants
from topology.chaos.availability import after_own_faults, outages
from topology.chaos.injector import Injector
from topology.chaos.prober import ScoreProber
from topology.chaos.sampler import (
    Sample,
    TopicSizes,
    disk_sample,
    growth_per_10k,
    settled_docs,
    stage_samples,
    unbounded,
)
from topology.chaos.schedule import Fault, stage_kind
from topology.composition.embedded_broker import EmbeddedBroker
from topology.composition.topics import Topics, ensure_topics
from topology.loop.demo_run import DemoPlan, demo_documents, feed_spec, loop_is_done, write_stream
from topology.loop.orchestrate import (
    LoopOptions,
    RunningLoop,
    StageFailed,
    keep_loop_going,
    start_loop,
)
from topology.loop.watcher import LoopState
from worx.atomic import atomic_write_json

log = logging.getLogger(__name__)


@dataclass
class ChaosPlan:
    stream: DemoPlan  # the documents, the trunk, the run directory, the stages' settings
    faults: Sequence[Fault] = ()
    seed: int = 0  # the schedule's (reported beside it, for a replay)
    feed_seconds: float | None = None  # the feed's pace: all documents in about this long
    max_restarts: int = 1000
    sample_every_s: float = 5.0
    warmup_share: float = 0.25  # of the documents, before soak growth is measured
    probe_text: str = "def add(a, b):\n    return a + b\n"


@dataclass
class Evidence:
    """What a finished run left, read once the loop stopped."""

    fed_ids: list[str]
    state: LoopState
    labels: dict[str, str]  # active domain id -> its label hint
    samples: list[Sample] = field(default_factory=list)
    started: float = 0.0  # monotonic time the schedule's times count from
    decisions: int | None = None  # discover's, from its last snapshot (discover_decisions)


def run_chaos(plan: ChaosPlan) -> dict:
    """Run the loop under ``plan.faults``; returns the run's figures and violations (also
    in ``<run_dir>/chaos.json``, the soak samples in ``<run_dir>/samples.jsonl``)."""
    started = time.monotonic()
    stream_path, fed = write_stream(plan.stream)
    fed_ids = [doc.doc_id for doc in demo_documents(plan.stream)]
    trunk_before = trunk_fingerprint(plan.stream.trunk_dir)
    violations: list[str] = []
    with EmbeddedBroker() as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        topics = Topics("worx")
        ensure_topics(conf, prefix=topics.prefix, partitions=2)
        options = LoopOptions(
            bootstrap_servers=broker.bootstrap_servers,
            run_dir=plan.stream.run_dir,
            trunk_dir=plan.stream.trunk_dir,
            stage_env=plan.stream.stage_env,
            max_restarts=plan.max_restarts,
            serve_replicas=plan.stream.serve_replicas,
        )
        loop = start_loop(options, conf)
        prober = ScoreProber(loop.serve_url, plan.probe_text)
        injector = Injector(loop.supervisor, broker.process, _phases(loop, prober))
        sizes = TopicSizes(conf, [topics.docs, topics.routed, topics.experts, topics.metrics])
        try:
            prober.start()
            rate = fed / plan.feed_seconds if plan.feed_seconds else None
            checkpoint = plan.stream.run_dir / "ingest.checkpoint"
            loop.supervisor.start(feed_spec(stream_path, rate, checkpoint, plan.max_restarts))
            drive_started = time.monotonic()
            samples, finished = _drive(plan, loop, injector, sizes, fed, drive_started)
        except StageFailed as exc:
            violations.append(f"a stage used up its restarts: {exc}")
            samples, finished, drive_started = [], False, time.monotonic()
        finally:
            injector.resume_all()
            prober.stop()
            sizes.close()
            loop.stop()
        state = loop.watcher.state
    labels = {d: r.label_hint or "?" for d, r in state.domains.items() if r.status == "active"}
    decisions = discover_decisions(plan.stream.run_dir)
    evidence = Evidence(fed_ids, state, labels, samples, drive_started, decisions)
    violations += check(plan, evidence, trunk_before)
    report = figures(plan, evidence, injector, prober)
    report.update(
        finished=finished,
        invariant_violations=violations,
        wall_s=round(time.monotonic() - started, 1),
    )
    atomic_write_json(plan.stream.run_dir / "chaos.json", report)
    with open(plan.stream.run_dir / "samples.jsonl", "w", encoding="utf-8") as out:
        out.writelines(json.dumps(dataclasses.asdict(sample)) + "\n" for sample in samples)
    return report


def _drive(
    plan: ChaosPlan,
    loop: RunningLoop,
    injector: Injector,
    sizes: TopicSizes,
    fed: int,
    started: float,
) -> tuple[list[Sample], bool]:
    """Inject each fault when due (its time counted from ``started``), keep the loop going
    and sample it, until the schedule is spent and the loop is done, or the plan's timeout
    passes."""
    pending = sorted(plan.faults, key=lambda f: f.at_s)
    samples: list[Sample] = []
    next_sample = 0.0
    while True:
        now = time.monotonic() - started
        keep_loop_going(loop)
        while pending and pending[0].at_s <= now:
            injector.apply(pending.pop(0), now)
        injector.tick(now)
        with loop.watcher.lock:
            state = loop.watcher.state
            routed, experts = len(state.routed_ids), len(state.experts)
            feed_done = loop.supervisor.exit_code("ingest") == 0
            done = loop_is_done(state, fed, plan.stream.quiet_s, feed_done)
        if now >= next_sample:
            taken = stage_samples(loop.supervisor, routed)
            taken.append(disk_sample(plan.stream.run_dir, routed))
            topic_sizes = sizes.sample(routed)
            taken += [topic_sizes] if topic_sizes else []
            samples += [dataclasses.replace(sample, experts=experts) for sample in taken]
            next_sample = now + plan.sample_every_s
        if done and not pending and not injector.busy():
            return samples, True
        if now > plan.stream.timeout_s:
            log.warning("chaos run: not done after %.0fs", now)
            return samples, False
        loop.watcher.wait_change(timeout_s=0.5)


def _phases(loop: RunningLoop, prober: ScoreProber):
    """What a stage was doing when a fault hit it, as far as the topics tell."""

    def phase_of(name: str) -> str:
        with loop.watcher.lock:
            s = loop.watcher.state
            latest = s.latest_eval()
            busy = {
                "trainer": bool(s.pending_jobs()),
                "monitor": latest is None or latest.step < len(s.experts),
                "serve": prober.in_flight,
                "route": len(s.routed_ids) < len(s.doc_ids),
                "discover": len(s.routed_ids) < len(s.doc_ids),
                "ingest": True,
            }
        names = {
            "trainer": "mid-job",
            "monitor": "mid-evaluation",
            "serve": "mid-request",
            "ingest": "mid-feed",
        }
        kind = stage_kind(name)
        return names.get(kind, "mid-stream") if busy.get(kind) else "idle"

    return phase_of


def check(plan: ChaosPlan, evidence: Evidence, trunk_before: str) -> list[str]:
    """Every invariant of :mod:`topology.chaos.invariants` over the finished run (the
    comparison with a fault-free run is the caller's: it needs both)."""
    state = evidence.state
    registrations = list(state.experts.values())
    store_dir = plan.stream.store_dir or plan.stream.run_dir / "experts"
    store = ExpertStore(store_dir, trunk_fingerprint=None, quarantine=False, create=True)
    verified = store.verify(quarantine=False)
    stored = {expert: store.manifest(expert).sha256 for expert in verified.ok}
    refused = {r["expert_id"]: r["reason"] for r in verified.refused}
    history = MatrixHistory(plan.stream.run_dir / "monitor")
    rows = history.rows("ours")
    expert_labels = {evidence.labels.get(r.domain_id) for r in registrations}
    return [
        *invariants.lost_documents(evidence.fed_ids, state.doc_ids, state.routed_ids)[:20],
        *invariants.new_domains_without_expert(expert_labels, plan.stream.new_domains),
        *invariants.jobs_with_several_experts(registrations),
        *invariants.experts_with_two_contents(state.expert_shas),
        *invariants.registrations_not_stored(registrations, stored, refused),
        *invariants.weights_changed(
            trunk_before,
            trunk_fingerprint(plan.stream.trunk_dir),
            run_summary.weight_forgetting(rows),
            history.data.get("verified", {}),
        ),
        *invariants.monitor_steps_not_once([row.step for row in rows], len(registrations)),
        *invariants.decisions_not_once(evidence.decisions, len(state.routed_ids)),
    ]


def discover_decisions(run_dir: Path) -> int | None:
    """Decisions the discover stage applied, from the snapshot it wrote as it stopped."""
    try:
        body = json.loads((run_dir / "discover" / "state.json").read_text("utf-8"))
        return int(body["state"]["seen"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def figures(plan: ChaosPlan, evidence: Evidence, injector: Injector, prober: ScoreProber) -> dict:
    state, labels = evidence.state, evidence.labels
    new = list(plan.stream.new_domains)
    registered = {e: (r.domain_id, r.created_ms, r.job_id) for e, r in state.experts.items()}
    created = {job_id: job.created_ms for job_id, job in state.jobs.items()}
    waits = run_summary.time_to_expert(
        state.first_doc_ms, registered, labels, new, created, state.job_started_ms
    )
    counts = run_summary.expert_counts({e: d for e, (d, _, _) in registered.items()}, labels, new)
    lost = invariants.lost_documents(evidence.fed_ids, state.doc_ids, state.routed_ids)
    return {
        "seed": plan.seed,
        "faults_injected": injector.faults_injected(),
        "faults_by_kind": injector.by_kind(),
        "signals_sent": len(injector.injected()),
        "signals_skipped": len(injector.applied) - len(injector.injected()),
        "faults": [applied.to_dict() for applied in injector.applied],
        "docs_fed": len(evidence.fed_ids),
        "docs_ingested": len(state.doc_ids),
        "docs_routed": len(state.routed_ids),
        "discover_decisions": evidence.decisions,
        "docs_lost": len(lost),
        "duplicate_experts": len(invariants.jobs_with_several_experts(state.experts.values())),
        "spurious_experts": counts["spurious_experts"],
        "experts": counts["experts"],
        "new_domains": new,
        "new_domains_with_expert": counts["new_domains_with_expert"],
        "jobs_failed": {
            job: status.reason
            for job, status in state.job_status.items()
            if status.state == "failed"
        },
        "domain_labels": sorted(labels.values()),
        **serve_figures(evidence, injector, prober),
        "time_to_expert_s": waits["per_label"],
        "time_to_expert_p50_s": waits["p50_s"]["total_s"],
        "time_to_expert_p95_s": waits["p95_s"]["total_s"],
        **soak_figures(evidence.samples, int(plan.warmup_share * len(evidence.fed_ids))),
    }


def soak_figures(samples: Sequence[Sample], warmup: int) -> dict:
    """Growth per 10,000 documents from ``warmup`` documents on, and from the last
    registration on; ``unbounded``."""
    growth = growth_per_10k(samples, warmup)
    # past the last registration a stage's growth is its own per document; before it the
    # experts it loads add to it (bounded by experts.lru_budget_mb in each stage's store)
    settled = max(warmup, settled_docs(samples))
    growth_settled = growth_per_10k(samples, settled)
    return {
        "growth_per_10k_docs": growth,
        "growth_settled_from_docs": settled,
        "growth_per_10k_docs_settled": growth_settled,
        # a stage without a settled figure (too few documents after the last expert) is
        # judged by its warm-up one
        "unbounded": unbounded({**growth, **growth_settled}),
    }


def serve_figures(evidence: Evidence, injector: Injector, prober: ScoreProber) -> dict:
    """Availability over the run, and without the outages that followed a fault of serve
    itself (of any of its replicas: one process's restart is an outage it cannot avoid)."""
    own_faults = [
        evidence.started + a.at_s for a in injector.injected() if stage_kind(a.target) == "serve"
    ]
    found = outages(prober.outcomes)
    own, other = after_own_faults(found, own_faults, prober.timeout_s + 2 * prober.interval_s)
    asked = prober.answered + prober.failed
    without_own = asked - sum(o.failed for o in own)
    return {
        "serve_availability": round(prober.answered / asked, 4) if asked else None,
        "serve_availability_without_own_faults": (
            round(prober.answered / without_own, 4) if without_own else None
        ),
        "serve_requests": asked,
        "serve_failed_requests": prober.failed,
        "serve_failures": dict(prober.failures),
        "serve_outages": len(found),
        "serve_longest_outage_s": max((o.seconds for o in found), default=0.0),
        "serve_outages_after_other_faults": [
            {"at_s": round(o.start_s - evidence.started, 1), "s": o.seconds, "failed": o.failed}
            for o in other
        ],
        "serve_answering_at_end": bool(prober.outcomes) and prober.outcomes[-1][1],
    }
