"""Drift events told as a person asks about them: what fired, on which domain, what it led to.

Discover emits three kinds of :class:`router.records.DriftEvent`: ``promotion`` (a new
domain was found), ``novelty_rate`` (the share of novel documents rose, so it clustered
at once) and ``domain_distance`` (a known domain's documents moved away from its centroid,
which asks for a ``drift`` training job). A count alone ("drift events 6") says none of
that; :func:`explain` pairs each event with the job it started and that job's outcome, or
says why there was none.

Events, jobs and statuses may be records or their JSON dicts (``live.json``,
``jobs.json``), so a live view and a finished run directory tell the same story.

Example
-------
>>> events = [{"detector": "promotion", "domain_id": "dom-a", "created_ms": 5,
...            "window_end_offset": 9, "statistics": {"size": 40.0, "cohesion": 0.5}}]
>>> jobs = [{"job_id": "job-1", "domain_id": "dom-a", "reason": "new_domain", "created_ms": 7}]
>>> statuses = {"job-1": {"state": "finished", "expert_id": "exp-1"}}
>>> [(e.fired, e.domain, e.led_to) for e in explain(events, jobs, statuses, {"dom-a": "legal"})]
[('new domain', 'legal (dom-a)', 'job job-1 (new_domain): expert exp-1 registered')]
>>> tally(events)
'1 new domain, 0 novelty-rate rises, 0 domain drifts'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FIRED = {
    "promotion": "new domain",
    "novelty_rate": "novelty rate rose",
    "domain_distance": "domain drifted",
}


@dataclass(frozen=True)
class Explained:
    fired: str  # what fired, in words
    domain: str  # "name (id)", or "-" for an event about no one domain
    led_to: str  # the job it started and its outcome, or why nothing
    created_ms: int
    domain_id: str | None = None


def _get(item: Any, key: str, default: Any = None) -> Any:
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def outcome(status: Any, id_chars: int | None = None) -> str:
    """A job's state in words: registered expert (its id cut to ``id_chars`` where given),
    not worth it (why), failed (why), running."""
    if status is None:
        return "queued"
    state, reason = _get(status, "state"), _get(status, "reason") or ""
    if state == "finished":
        expert = _get(status, "expert_id")
        return f"expert {expert[:id_chars]} registered" if expert else "finished"
    if state in ("not_worth_it", "failed", "skipped"):
        return f"{state.replace('_', ' ')}: {reason}" if reason else state.replace("_", " ")
    step, total = _get(status, "step", 0), _get(status, "total_steps", 0)
    return f"training, step {step}/{total}" if total else "training"


def _named(domain_id: str | None, names: Mapping[str, str]) -> str:
    if not domain_id:
        return "-"
    name = names.get(domain_id)
    return f"{name} ({domain_id})" if name and name != domain_id else domain_id


def explain(
    events: Iterable[Any],
    jobs: Iterable[Any],
    statuses: Mapping[str, Any],
    names: Mapping[str, str],
) -> list[Explained]:
    """Every event in order with what it led to.

    ``jobs`` are :class:`router.records.TrainJob` (or dicts), ``statuses`` the latest
    :class:`trainer.records.TrainStatus` per job id, ``names`` domain id -> name.
    """
    events = sorted(
        events, key=lambda e: (_get(e, "created_ms", 0), _get(e, "window_end_offset", 0))
    )
    jobs = sorted(jobs, key=lambda j: _get(j, "created_ms", 0))
    out = []
    for i, event in enumerate(events):
        detector = _get(event, "detector", "")
        domain = _get(event, "domain_id")
        stats = _get(event, "statistics", {}) or {}
        if detector == "promotion":
            led_to = _promotion(domain, stats, jobs, statuses)
        elif detector == "novelty_rate":
            led_to = _novelty(events[i + 1 :], stats, names)
        else:
            led_to = _distance(event, stats, jobs, statuses)
        out.append(
            Explained(
                FIRED.get(detector, detector),
                _named(domain, names),
                led_to,
                int(_get(event, "created_ms", 0) or 0),
                domain,
            )
        )
    return out


def _job_text(job: Any, statuses: Mapping[str, Any]) -> str:
    job_id = _get(job, "job_id")
    return f"job {job_id} ({_get(job, 'reason')}): {outcome(statuses.get(job_id))}"


def _promotion(domain: str, stats: Mapping, jobs: list, statuses: Mapping[str, Any]) -> str:
    job = next(
        (j for j in jobs if _get(j, "domain_id") == domain and _get(j, "reason") == "new_domain"),
        None,
    )
    if job is not None:
        return _job_text(job, statuses)
    # a run directory's statuses may know a job whose TrainJob record is not at hand
    status = next((s for s in statuses.values() if _get(s, "domain_id") == domain), None)
    if status is not None:
        return f"job {_get(status, 'job_id')}: {outcome(status)}"
    size = int(stats.get("size", 0))
    return (
        f"no job yet: the domain ({size} documents at promotion) is gathering its job's documents"
    )


def _novelty(later: list, stats: Mapping, names: Mapping[str, str]) -> str:
    buffered = int(stats.get("buffered", 0))
    rate = stats.get("novelty_rate_before")
    was = f" (novel share was {rate:.0%})" if isinstance(rate, int | float) else ""
    head = f"clustered the {buffered} buffered novel documents at once{was}"
    for event in later:
        detector = _get(event, "detector")
        if detector == "novelty_rate":
            break
        if detector == "promotion":
            return f"{head}; then {_named(_get(event, 'domain_id'), names)} was promoted"
    return f"{head}; no new domain followed yet"


def _distance(event: Any, stats: Mapping, jobs: list, statuses: Mapping[str, Any]) -> str:
    domain, when = _get(event, "domain_id"), _get(event, "created_ms", 0)
    job = next(
        (
            j
            for j in jobs
            if _get(j, "reason") == "drift"
            and _get(j, "domain_id") == domain
            and _get(j, "created_ms", 0) == when
        ),
        None,
    )
    if job is not None:
        return _job_text(job, statuses)
    recent = int(stats.get("recent_docs", 0))
    return (
        f"no drift job: {recent} recent documents were too few to train on "
        "(router.promote_min_size), or the same job had run already"
    )


def tally(events: Iterable[Any]) -> str:
    """``"5 new domains, 1 novelty-rate rise, 0 domain drifts"``."""
    counts = {"promotion": 0, "novelty_rate": 0, "domain_distance": 0}
    for event in events:
        detector = _get(event, "detector", "")
        counts[detector] = counts.get(detector, 0) + 1

    def plural(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    return ", ".join(
        (
            plural(counts["promotion"], "new domain", "new domains"),
            plural(counts["novelty_rate"], "novelty-rate rise", "novelty-rate rises"),
            plural(counts["domain_distance"], "domain drift", "domain drifts"),
        )
    )
