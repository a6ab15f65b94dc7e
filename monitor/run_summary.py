"""Whole-run figures for the demo's report: forgetting of old domains, ours vs the dense
baseline, and perplexity of each new domain before and after its expert.

Columns are discovered domain ids; ``labels`` maps them to the stream's given labels (the
majority label of each domain's members), which is how a run on a labelled corpus is scored.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from monitor.cluster_agreement import nmi_purity
from monitor.records import EvalRow
from router.table import DomainTable


def max_old_domain_loss_rise(rows: Sequence[EvalRow]) -> float:
    """Largest relative rise of a domain's loss above its best earlier value, counted only
    once the domain is "old": after its own expert arrived, or from row 0 for a domain served
    by the trunk alone. ``(L[i,j] - min_{s_j <= k < i} L[k,j]) / min(...)``; 0.0 if no step
    has an earlier value to compare with. Negative values (improvements) are floored at 0.
    """
    return max(old_domain_loss_rises(rows).values(), default=0.0)


def old_domain_loss_rises(rows: Sequence[EvalRow]) -> dict[str, float]:
    """Per domain, the largest rise of :func:`max_old_domain_loss_rise` (floored at 0), for
    each domain with a step to compare with an earlier value."""
    return {domain: rise for domain, (rise, _, _) in _rises(rows).items()}


def _rises(rows: Sequence[EvalRow]) -> dict[str, tuple[float, int, int]]:
    """``domain -> (largest rise, its step, the step of the best value it rose from)``."""
    ordered = sorted(rows, key=lambda r: r.step)
    arrival: dict[str, int] = {}
    for row in ordered:
        if row.arrived_domain and row.arrived_domain not in arrival:
            arrival[row.arrived_domain] = row.step
    worst: dict[str, tuple[float, int, int]] = {}
    best: dict[str, tuple[float, int]] = {}
    for row in ordered:
        for domain, loss in row.loss.items():
            if not math.isfinite(loss):
                continue
            start = arrival.get(domain, 0)
            if row.step < start:
                continue
            if domain in best:
                low, low_step = best[domain]
                rise = (loss - low) / low
                if domain not in worst or rise > worst[domain][0]:
                    worst[domain] = (max(rise, 0.0), row.step, low_step)
                if loss < low:
                    best[domain] = (loss, row.step)
            else:
                best[domain] = (loss, row.step)
    return worst


def worst_old_domain_loss_rise(
    rows: Sequence[EvalRow], labels: Mapping[str, str]
) -> dict[str, object] | None:
    """What :func:`max_old_domain_loss_rise` was made of: the domain (by label), the step
    and the expert whose registration made it, the step it rose from, and where the
    domain's re-routed held-out documents went between the two (``{destination label:
    documents}``; ``/trunk``: to a domain without an expert, served by the trunk alone;
    ``novel``: to no domain). None when no domain rose."""
    rises = _rises(rows)
    if not rises:
        return None
    domain, (rise, step, from_step) = max(rises.items(), key=lambda kv: (kv[1][0], kv[0]))
    if rise <= 0:
        return None
    by_step = {r.step: r for r in rows}
    moved: Counter[str] = Counter()
    for k in range(from_step + 1, step + 1):
        row = by_step.get(k)
        if row is None:
            continue
        for where, (docs, _) in row.routing_moves.get(domain, {}).items():
            target, _, trunk = where.partition("/")
            name = labels.get(target, target)
            moved[f"{name}/{trunk}" if trunk else name] += int(docs)
    arrived = by_step[step].arrived_domain
    return {
        "domain": labels.get(domain, domain),
        "rise": round(rise, 4),
        "step": step,
        "from_step": from_step,
        "arrived": labels.get(arrived, arrived) if arrived else None,
        "heldout_docs": by_step[step].heldout_size.get(domain),
        "moved": dict(moved.most_common()),
    }


def final_against_baseline(
    ours: Sequence[EvalRow], dense: Sequence[EvalRow], labels: Mapping[str, str]
) -> dict[str, object]:
    """The end of the stream, ours against the dense baseline: the geometric mean of held-out
    perplexity over the domains both last rows have, and the domains (by label) where dense
    fine-tuning, forgetting and all, ends lower than the expert library."""
    if not ours or not dense:
        return {
            "ppl_geomean_final": None,
            "baseline_ppl_geomean_final": None,
            "domains_dense_better": None,
        }
    last = max(ours, key=lambda r: r.step).perplexity
    last_dense = max(dense, key=lambda r: r.step).perplexity
    shared = sorted(
        d
        for d in set(last) & set(last_dense)
        if math.isfinite(last[d]) and math.isfinite(last_dense[d])
    )

    def geomean(values: Mapping[str, float]) -> float | None:
        if not shared:
            return None
        return math.exp(sum(math.log(values[d]) for d in shared) / len(shared))

    ours_mean, dense_mean = geomean(last), geomean(last_dense)
    return {
        "ppl_geomean_final": ours_mean,
        "baseline_ppl_geomean_final": dense_mean,
        "ppl_geomean_final_over_baseline": (
            ours_mean / dense_mean if ours_mean and dense_mean else None
        ),
        "domains_dense_better": sorted(labels.get(d, d) for d in shared if last_dense[d] < last[d]),
        "ppl_final_by_domain": {
            labels.get(d, d): {"ours": last[d], "dense": last_dense[d]} for d in shared
        },
    }


def weight_forgetting(rows: Sequence[EvalRow]) -> int:
    """Number of tensors (trunk or earlier experts) whose hash changed, over the whole run."""
    return sum(len(row.weight_changes) for row in rows)


def new_domain_perplexities(
    rows: Sequence[EvalRow], labels: Mapping[str, str], new_labels: Sequence[str]
) -> dict[str, dict[str, float | None]]:
    """For each new label: perplexity of its domain under the trunk alone (row 0, or the first
    row that has the domain) and in the last row. With several domains for one label, the
    one that got an expert (else the largest held-out set) speaks for it."""
    ordered = sorted(rows, key=lambda r: r.step)
    if not ordered:
        return {label: {"ppl_trunk": None, "ppl_final": None} for label in new_labels}
    with_expert = {row.arrived_domain for row in ordered if row.arrived_domain}
    out: dict[str, dict[str, float | None]] = {}
    for label in new_labels:
        candidates = [d for d, lab in labels.items() if lab == label]
        candidates.sort(key=lambda d: (d not in with_expert, -ordered[-1].heldout_size.get(d, 0)))
        domain = next((d for d in candidates if any(d in row.perplexity for row in ordered)), None)
        if domain is None:
            out[label] = {"ppl_trunk": None, "ppl_final": None}
            continue
        first = next(row for row in ordered if domain in row.perplexity)
        last = next(row for row in reversed(ordered) if domain in row.perplexity)
        out[label] = {
            "domain_id": domain,
            "ppl_trunk": first.perplexity[domain],
            "ppl_final": last.perplexity[domain],
            "ppl_reduction": 1.0 - last.perplexity[domain] / first.perplexity[domain],
        }
    return out


def expert_counts(
    expert_domains: Mapping[str, str], labels: Mapping[str, str], new_labels: Sequence[str]
) -> dict[str, int]:
    """Experts per kind: one per new label is expected; any other is spurious (a second expert
    for the same label, or an expert for a domain with no new label), except experts for the
    trunk's own domains, which are counted apart (they passed the quality gate)."""
    per_label = Counter(labels.get(domain, "?") for domain in expert_domains.values())
    expected = sum(1 for label in new_labels if per_label[label] >= 1)
    duplicates = sum(per_label[label] - 1 for label in new_labels if per_label[label] > 1)
    old = sum(
        count for label, count in per_label.items() if label not in new_labels and label != "?"
    )
    unlabelled = per_label.get("?", 0)
    return {
        "experts": len(expert_domains),
        "new_domains_with_expert": expected,
        "spurious_experts": duplicates + unlabelled,
        "old_domain_experts": old,
    }


WAIT_PARTS = ("detect_s", "queue_s", "train_s")  # a wait's parts, in order; they add up
PERCENTILE_METHOD = (
    "nearest rank over the labels served: the value of rank ceil(p/100 * n) among the n "
    "sorted; below 20 labels p95 is the longest"
)


def nearest_rank(values: Sequence[float], percent: float) -> float | None:
    """The ``percent``-th percentile by nearest rank: the sorted value of rank
    ``ceil(percent / 100 * n)`` (1-based; rank 1 at 0), always one of ``values``; None
    when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent / 100 * len(ordered))) - 1]


def _seconds(start_ms: int | None, end_ms: int | None) -> float | None:
    return round((end_ms - start_ms) / 1000, 1) if start_ms and end_ms else None


def time_to_expert(
    first_doc_ms: Mapping[str, int],
    registrations: Mapping[str, tuple[str, int, str | None]],
    labels: Mapping[str, str],
    new_labels: Sequence[str],
    job_created_ms: Mapping[str, int],
    job_started_ms: Mapping[str, int],
) -> dict[str, object]:
    """How long a user waits for a new kind of text to be served by an expert of its own,
    per new label, and where the time went.

    ``first_doc_ms``: label -> its first document's ``created_ms``; ``registrations``:
    expert id -> (domain id, the registration's ``created_ms``, its job id); the label's
    first expert is the earliest registration of a domain with that label.
    ``job_created_ms``: job id -> the ``TrainJob``'s ``created_ms`` (discover asked for
    it); ``job_started_ms``: job id -> the ``created_ms`` of its first ``started`` status.

    Each served label gets ``total_s`` (first document -> first registration) and its
    parts ``detect_s`` (-> the job created), ``queue_s`` (-> the job started) and
    ``train_s`` (-> the registration); a part whose timestamps are missing is None, and a
    label never served is None. ``p50_s`` and ``p95_s`` hold the percentiles
    (:func:`nearest_rank`) of the total and of each part over the labels that have it.
    """
    first: dict[str, tuple[int, str | None]] = {}
    for domain_id, created_ms, job_id in registrations.values():
        label = labels.get(domain_id)
        if label is None or not created_ms:
            continue
        if label not in first or created_ms < first[label][0]:
            first[label] = (created_ms, job_id)
    per_label: dict[str, dict[str, float | None] | None] = {}
    for label in new_labels:
        start, (end, job_id) = first_doc_ms.get(label), first.get(label, (None, None))
        total = _seconds(start, end)
        if total is None:
            per_label[label] = None
            continue
        created = job_created_ms.get(job_id) if job_id else None
        started = job_started_ms.get(job_id) if job_id else None
        per_label[label] = {
            "total_s": total,
            "detect_s": _seconds(start, created),
            "queue_s": _seconds(created, started),
            "train_s": _seconds(started, end),
            "job_id": job_id,
        }
    served = [w for w in per_label.values() if w is not None]

    def percentiles(percent: float) -> dict[str, float | None]:
        return {
            key: nearest_rank([w[key] for w in served if w[key] is not None], percent)
            for key in ("total_s", *WAIT_PARTS)
        }

    return {
        "per_label": per_label,
        "p50_s": percentiles(50),
        "p95_s": percentiles(95),
        "percentile": PERCENTILE_METHOD,
        "never": sorted(label for label, w in per_label.items() if w is None),
    }


def nearest_domain_nmi(
    labels: Sequence[str], vectors: np.ndarray, table: DomainTable
) -> float | None:
    """NMI of the discovered domains against the labels at the end of a run: document i
    (given label ``labels[i]``, embedded as ``vectors[i]``) goes to the nearest active
    domain of ``table`` regardless of thresholds, as the inference gate picks experts
    ("novel" when the table is empty). bench/discovery.py's ``nmi``. None for no document."""
    if not labels:
        return None
    domains = [table.nearest(vector)[0] or "novel" for vector in vectors]
    return nmi_purity(labels, domains)[0]


def cpu_per_registration(rows: Sequence[EvalRow], count: int = 10) -> dict[str, object] | None:
    """The monitor's process CPU seconds per registration (``EvalRow.cpu_s`` of each row an
    expert's arrival made), for the first and the last ``count`` registrations and their
    means: flat in N when the evaluation's cost does not grow with the library. None when
    no row carries a cost (a history written before rows had one)."""
    steps = sorted((r for r in rows if r.arrived_expert), key=lambda r: r.step)
    costs = [r.cpu_s for r in steps]
    if not costs or not any(costs):
        return None
    first, last = costs[:count], costs[-count:]
    first_mean, last_mean = sum(first) / len(first), sum(last) / len(last)
    return {
        "registrations": len(costs),
        "first_ten": first,
        "last_ten": last,
        "first_ten_mean": round(first_mean, 4),
        "last_ten_mean": round(last_mean, 4),
        "last_over_first": round(last_mean / first_mean, 3) if first_mean > 0 else None,
    }
