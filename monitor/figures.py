"""Every figure of the dashboard and the report, as one JSON-able dict (the single source).

The dashboard polls it from ``/api/state``; ``worx report`` draws the same numbers with
matplotlib and writes them to ``figures.json``; Prometheus exports them as gauges.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from monitor.compact import COMPACT_DOMAINS
from monitor.drift_explain import explain, tally
from monitor.history import RUNS, MatrixHistory

log = logging.getLogger(__name__)
LIVE_FILE = "live.json"  # the monitor's :class:`monitor.live.LiveState`, beside history.json
JOBS_FILE = "jobs.json"  # the training jobs the monitor saw (job id -> TrainJob), beside it


def display_names(domains: list[str], labels: dict[str, str] | None) -> dict[str, str]:
    """Domain id -> what a person reads: its label where known and unique, else the id."""
    labels = labels or {}
    named = [labels.get(d) for d in domains]
    return {
        d: name if name and named.count(name) == 1 else (f"{name} ({d})" if name else d)
        for d, name in zip(domains, named, strict=True)
    }


def _run_figures(
    history: MatrixHistory, run: str, labels: dict[str, str] | None = None
) -> dict[str, Any] | None:
    rows = history.rows(run)
    if not rows:
        return None
    m = history.matrix(run)
    summaries = history.summaries(run)
    domains = m["domains"]
    names = display_names(domains, labels)
    return {
        "domains": domains,
        "domain_names": [names[d] for d in domains],
        "steps": [r.step for r in rows],
        "step_labels": [
            "trunk"
            if r.step == 0
            else f"+{names.get(r.arrived_domain, r.arrived_domain) or r.arrived_expert}"
            for r in rows
        ],
        "loss": m["loss"],  # (steps, domains), None = not evaluated
        "perplexity": [
            [None if v is None else math.exp(min(v, 700.0)) for v in r] for r in m["loss"]
        ],
        "arrivals": m["arrivals"],  # per domain: step of its expert, None = never
        "experts": m["experts"],  # per step: the expert that arrived (None at step 0)
        "created_ms": [r.created_ms for r in rows],
        "forgetting_avg": [s["forgetting_avg"] for s in summaries],
        "forgetting_max": [s["forgetting_max"] for s in summaries],
        "forgetting_all_avg": [s["forgetting_all_avg"] for s in summaries],
        "relative_ppl_change_max": [s["relative_ppl_change_max"] for s in summaries],
        "backward_transfer": [s["backward_transfer"] for s in summaries],
        "forward_transfer": summaries[-1]["forward_transfer"],
        "forward_transfer_avg": summaries[-1]["forward_transfer_avg"],
        "forgetting_now": summaries[-1]["forgetting"],  # per domain, latest step
        # (steps, domains): loss now minus the best earlier loss (heatmap colours)
        "forgetting_matrix": [s["forgetting"] for s in summaries],
        "weight_changes": [r.weight_changes for r in rows],
        "routing_changed": [r.routing_changed for r in rows],
        "routing_loss_delta": [r.routing_loss_delta for r in rows],
        "heldout_size": rows[-1].heldout_size,
        # per step: the monitor's process CPU seconds, documents scored, experts verified
        "cpu_s": [r.cpu_s for r in rows],
        "docs_scored": [r.docs_scored for r in rows],
        "experts_verified": [r.experts_verified for r in rows],
    }


def build_state(
    history: MatrixHistory,
    live: dict[str, Any] | None = None,
    store: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    jobs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole picture: ``{"runs": {"ours", "dense_baseline"}, "live", "store", "headline",
    "names", "drift"}``.

    Parameters
    ----------
    live
        :meth:`monitor.live.LiveState.snapshot` (stream rates, jobs, drift...), if running;
        None: the ``live.json`` saved beside the history, if any (a finished run's report
        then shows its training spans and drift events too).
    store
        ``{"experts": n, "bytes": n, "quarantined": n}`` of the expert store, if known.
    labels
        Domain id -> its name (:func:`router.naming.display_name`), for display.
    jobs
        Job id -> :class:`router.records.TrainJob` fields (the monitor's ``jobs``), so each
        drift event can be paired with the job it started; None: the ``jobs.json`` saved
        beside the history, if any.
    """
    runs = {run: _run_figures(history, run, labels) for run in RUNS}
    ours = runs["ours"]
    base = runs["dense_baseline"]
    live = _saved(history, LIVE_FILE) if live is None else live
    jobs = _saved(history, JOBS_FILE) if jobs is None else jobs
    known = {d for fig in runs.values() if fig for d in fig["domains"]}
    known |= {str(j.get("domain_id")) for j in live.get("jobs", {}).values() if j.get("domain_id")}
    weight_total = sum(len(w) for w in ours["weight_changes"]) if ours else 0
    headline = {
        "steps": len(ours["steps"]) if ours else 0,
        "experts": len(ours["steps"]) - 1 if ours else 0,
        "domains": len(ours["domains"]) if ours else 0,
        "forgetting_avg": ours["forgetting_avg"][-1] if ours else None,
        "forgetting_max": ours["forgetting_max"][-1] if ours else None,
        "backward_transfer": ours["backward_transfer"][-1] if ours else None,
        "baseline_forgetting_avg": base["forgetting_avg"][-1] if base else None,
        "baseline_forgetting_max": base["forgetting_max"][-1] if base else None,
        "baseline_backward_transfer": base["backward_transfer"][-1] if base else None,
        "weight_changes": weight_total,
        "dead_letters": sum(live.get("dead_letters", {}).values()),
    }
    return {
        "generated_ms": int(time.time() * 1000),
        "headline": headline,
        "names": (names := display_names(sorted(known), labels)),  # domain id -> its name
        "drift": {  # each event: what fired, on which domain, what it led to
            "tally": tally(live.get("drift", [])),
            "events": [
                dataclasses.asdict(e)
                for e in explain(live.get("drift", []), jobs.values(), live.get("jobs", {}), names)
            ],
        },
        "runs": runs,
        "compact_domains": COMPACT_DOMAINS,  # beyond it the page draws its compact form
        "live": live,
        "store": store or {},
    }


def _saved(history: MatrixHistory, name: str) -> dict[str, Any]:
    """A JSON object the monitor keeps beside the history (``{}`` if absent or unreadable)."""
    path = history.path.parent / name
    if not path.exists():
        return {}
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("%s not read (%s): the figures go without it", path, exc)
        return {}
    return body if isinstance(body, dict) else {}
