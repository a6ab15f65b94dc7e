"""Prometheus ``/metrics``: a collector that reads the current figures at every scrape.

Reading the state on scrape (instead of setting gauges as events arrive) means a domain
or a job that disappears never leaves a stale series behind.

Per-domain series are keyed by ``domain`` (the id) and carry the domain's ``name`` as a
second label (the id where it has none), so a graph's legend can read ``{{name}}``;
``worx_domain_info{domain, name}`` (always 1) lists them all for joins. The client library
escapes label values (quotes, backslashes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ingest.dead_letters import reason_class
from trainer.records import STATES


class WorxCollector(Collector):
    """Exports :func:`monitor.figures.build_state` as ``worx_*`` metrics."""

    def __init__(self, get_state: Callable[[], dict[str, Any]]) -> None:
        self.get_state = get_state

    def collect(self) -> Iterator[Metric]:
        state = self.get_state()
        names: dict[str, str] = state.get("names") or {}

        def name(domain: str) -> str:
            return names.get(domain) or domain

        info = GaugeMetricFamily(
            "worx_domain_info", "A known domain: its id and its name (always 1)",
            labels=["domain", "name"],
        )  # fmt: skip
        for domain in sorted(names):
            info.add_metric([domain, name(domain)], 1.0)
        yield info
        loss = GaugeMetricFamily(
            "worx_domain_loss",
            "Held-out loss (nats/token) at the latest step",
            labels=["run", "domain", "name"],
        )
        ppl = GaugeMetricFamily(
            "worx_domain_perplexity",
            "Held-out perplexity at the latest step",
            labels=["run", "domain", "name"],
        )
        forg = GaugeMetricFamily(
            "worx_domain_forgetting",
            "Loss rise above the best earlier value",
            labels=["run", "domain", "name"],
        )
        favg = GaugeMetricFamily(
            "worx_forgetting_avg", "Average forgetting over learned domains", labels=["run"]
        )
        fmax = GaugeMetricFamily(
            "worx_forgetting_max", "Maximum forgetting over learned domains", labels=["run"]
        )
        bwt = GaugeMetricFamily(
            "worx_backward_transfer",
            "GEM backward transfer with loss (>= 0: nothing lost)",
            labels=["run"],
        )
        steps = GaugeMetricFamily(
            "worx_eval_steps", "Rows of the evaluation matrix", labels=["run"]
        )
        cpu = GaugeMetricFamily(
            "worx_eval_cpu_seconds",
            "Process CPU seconds the latest step's evaluation took (ours: flat in N)",
            labels=["run"],
        )
        scored = GaugeMetricFamily(
            "worx_eval_docs_scored",
            "Held-out documents scored at the latest step (the others' losses were known)",
            labels=["run"],
        )
        for run, fig in state["runs"].items():
            if not fig:
                continue
            steps.add_metric([run], len(fig["steps"]))
            cpu.add_metric([run], fig["cpu_s"][-1])
            scored.add_metric([run], fig["docs_scored"][-1])
            last = fig["loss"][-1]
            for j, domain in enumerate(fig["domains"]):
                if last[j] is not None:
                    loss.add_metric([run, domain, name(domain)], last[j])
                    ppl.add_metric([run, domain, name(domain)], fig["perplexity"][-1][j])
                if fig["forgetting_now"][j] is not None:
                    forg.add_metric([run, domain, name(domain)], fig["forgetting_now"][j])
            for family, key in (
                (favg, "forgetting_avg"),
                (fmax, "forgetting_max"),
                (bwt, "backward_transfer"),
            ):
                if fig[key][-1] is not None:
                    family.add_metric([run], fig[key][-1])
        yield from (loss, ppl, forg, favg, fmax, bwt, steps, cpu, scored)

        ours = state["runs"].get("ours")
        share = GaugeMetricFamily(
            "worx_routing_changed_share",
            "Share of held-out docs re-routed by the latest step",
            labels=["domain", "name"],
        )
        delta = GaugeMetricFamily(
            "worx_routing_loss_delta",
            "Loss change caused by re-routed docs at the latest step",
            labels=["domain", "name"],
        )
        weights = GaugeMetricFamily(
            "worx_weight_changes",
            "Trunk/expert tensors changed or refused at the latest step (must be 0)",
        )
        experts = GaugeMetricFamily("worx_experts", "Experts registered (evaluated)")
        if ours:
            for domain, v in ours["routing_changed"][-1].items():
                share.add_metric([domain, name(domain)], v)
            for domain, v in ours["routing_loss_delta"][-1].items():
                delta.add_metric([domain, name(domain)], v)
            weights.add_metric([], len(ours["weight_changes"][-1]))
        experts.add_metric([], state["headline"]["experts"])
        yield from (share, delta, weights, experts)

        store = state.get("store", {})
        sbytes = GaugeMetricFamily("worx_store_bytes", "Bytes of expert weights in the store")
        scount = GaugeMetricFamily("worx_store_experts", "Experts in the store")
        squar = GaugeMetricFamily("worx_store_quarantined", "Store entries quarantined (refused)")
        if store:
            sbytes.add_metric([], store.get("bytes", 0))
            scount.add_metric([], store.get("experts", 0))
            squar.add_metric([], store.get("quarantined", 0))
        yield from (sbytes, scount, squar)

        live = state.get("live", {})
        # per domain, the job updated last (no job_id label: one series per job would
        # grow without bound); the state label holds one of TrainStatus's states
        progress = GaugeMetricFamily(
            "worx_train_progress",
            "Training progress (0..1) of the latest job of a domain",
            labels=["domain", "name", "state"],
        )
        tloss = GaugeMetricFamily(
            "worx_train_loss",
            "Latest training loss of the latest job of a domain",
            labels=["domain", "name"],
        )
        latest: dict[str, dict[str, Any]] = {}
        for job in live.get("jobs", {}).values():
            domain = str(job.get("domain_id", ""))
            if job.get("updated_ms", 0) >= latest.get(domain, {}).get("updated_ms", -1):
                latest[domain] = job
        for domain, job in sorted(latest.items()):
            total = job.get("total_steps") or 0
            done = (
                1.0
                if job.get("state") == "finished"
                else (job.get("step", 0) / total if total else 0.0)
            )
            state = job.get("state", "")
            progress.add_metric([domain, name(domain), state if state in STATES else "other"], done)
            if job.get("loss") is not None:
                tloss.add_metric([domain, name(domain)], job["loss"])
        rate = GaugeMetricFamily(
            "worx_stream_rate", "Messages per second over the last minute", labels=["topic"]
        )
        total = CounterMetricFamily(
            "worx_stream_messages", "Messages seen by the monitor", labels=["topic"]
        )
        for topic, v in live.get("rates", {}).items():
            rate.add_metric([topic], v)
        for topic, v in live.get("totals", {}).items():
            total.add_metric([topic], v)
        dlq = CounterMetricFamily(
            "worx_dead_letters", "Dead letters seen, by reason", labels=["reason"]
        )
        for reason, v in live.get("dead_letters", {}).items():
            dlq.add_metric([reason_class(reason)], v)
        drift = CounterMetricFamily("worx_drift_events", "Drift events seen (recent window)")
        drift.add_metric([], len(live.get("drift", [])))
        yield from (progress, tloss, rate, total, dlq, drift)


def make_registry(get_state: Callable[[], dict[str, Any]]) -> CollectorRegistry:
    """A registry of its own (not the global one) holding the :class:`WorxCollector`."""
    registry = CollectorRegistry()
    registry.register(WorxCollector(get_state))
    return registry
