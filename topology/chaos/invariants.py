"""What must hold over a whole run of the loop, faults or none: pure functions over what the
run left (the watcher's view of the topics, the store's verification, the monitor's
history). Each returns its violations as sentences; an empty list is a pass.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

from experts.records import ExpertRegistration


def lost_documents(
    fed: Iterable[str], ingested: Collection[str], routed: Collection[str]
) -> list[str]:
    """Fed document ids that never reached the docs topic, or were never routed.

    >>> lost_documents(["a", "b", "c"], {"a", "b", "c"}, {"a", "c"})
    ['b: ingested, never routed']
    """
    lost = []
    for doc_id in fed:
        if doc_id not in ingested:
            lost.append(f"{doc_id}: fed, never ingested")
        elif doc_id not in routed:
            lost.append(f"{doc_id}: ingested, never routed")
    return lost


def new_domains_without_expert(expert_labels: Collection[str], new: Sequence[str]) -> list[str]:
    """Every new kind of the stream got an expert (``expert_labels``: the label of each
    registered expert's domain).

    >>> new_domains_without_expert({"legal"}, ["legal", "python_code"])
    ['python_code: no expert']
    """
    return [f"{label}: no expert" for label in new if label not in expert_labels]


def jobs_with_several_experts(registrations: Iterable[ExpertRegistration]) -> list[str]:
    """A training job's id must name at most one expert (a job trains once, at least once
    delivered)."""
    experts: dict[str, set[str]] = defaultdict(set)
    for registration in registrations:
        if registration.job_id:
            experts[registration.job_id].add(registration.expert_id)
    return [
        f"job {job}: {len(ids)} experts ({', '.join(sorted(ids))})"
        for job, ids in sorted(experts.items())
        if len(ids) > 1
    ]


def experts_with_two_contents(contents: Mapping[str, Collection[str]]) -> list[str]:
    """An expert id registered with more than one sha256 (``contents``: id -> every sha256
    seen under it on the experts topic)."""
    return [
        f"expert {expert}: {len(shas)} contents"
        for expert, shas in sorted(contents.items())
        if len(shas) > 1
    ]


def registrations_not_stored(
    registrations: Iterable[ExpertRegistration],
    stored_sha: Mapping[str, str],
    refused: Mapping[str, str],
) -> list[str]:
    """Every registration on the topic has its files in the store (``stored_sha``: expert
    id -> the manifest's sha256 of the entries that passed the store's re-hash;
    ``refused``: expert id -> why the re-hash refused it) with the registered sha256."""
    problems = []
    for registration in registrations:
        expert = registration.expert_id
        if expert in refused:
            problems.append(f"expert {expert}: refused by the store ({refused[expert]})")
        elif expert not in stored_sha:
            problems.append(f"expert {expert}: registered, not in the store")
        elif stored_sha[expert] != registration.sha256:
            problems.append(f"expert {expert}: stored sha256 differs from the registration's")
    return problems


def weights_changed(
    trunk_before: str, trunk_after: str, weight_changes: int, verified: Mapping
) -> list[str]:
    """The trunk's fingerprint is the same at the end; the monitor saw no tensor change
    (``weight_changes``, summed over its rows) and its final check of every expert found
    no problem (``verified``: its history's ``verified``)."""
    problems = []
    if trunk_before != trunk_after:
        problems.append("the trunk's fingerprint changed")
    if weight_changes:
        problems.append(f"the monitor saw {weight_changes} tensor changes")
    if not verified:
        problems.append("the monitor never verified every expert at the end")
    elif verified.get("problems"):
        problems.append(f"the monitor's final check found {verified['problems']} problems")
    return problems


def monitor_steps_not_once(steps: Sequence[int], registrations: int) -> list[str]:
    """The monitor's history holds each step once, from 0 (the trunk alone) to one per
    registration.

    >>> monitor_steps_not_once([0, 1, 1, 3], 3)
    ['step 1 held 2 times', 'step 2 missing']
    """
    counts = Counter(steps)
    problems = [f"step {step} held {n} times" for step, n in sorted(counts.items()) if n > 1]
    problems += [f"step {step} missing" for step in range(registrations + 1) if step not in counts]
    return problems


def decisions_not_once(decisions: int | None, routed: int) -> list[str]:
    """Discover applied at most one decision per routed document (route's replays, a
    batch routed again after a crash, skipped: :mod:`router.replays`); fewer is a discover
    still behind when the loop stopped, which a restart resumes. ``None``: no state left.

    >>> decisions_not_once(10736, 7261)
    ['discover applied 10736 decisions for 7261 routed documents']
    >>> decisions_not_once(7261, 7261)
    []
    """
    if decisions is None:
        return ["discover left no state to count its decisions"]
    if decisions > routed:
        return [f"discover applied {decisions} decisions for {routed} routed documents"]
    return []


def domains_differ(ours: Sequence[str], fault_free: Sequence[str]) -> list[str]:
    """Discover found the same domains as a fault-free run of the same stream: each run's
    active domains named by their majority label (``label_hint``), compared as multisets
    (domain ids differ between runs; which documents form each domain depends on timing).

    >>> domains_differ(["legal", "python_code"], ["python_code", "legal", "legal"])
    ['1 more legal domain(s) in the fault-free run']
    """
    mine, theirs = Counter(ours), Counter(fault_free)
    problems = [f"{n} more {label} domain(s) in this run" for label, n in (mine - theirs).items()]
    problems += [
        f"{n} more {label} domain(s) in the fault-free run" for label, n in (theirs - mine).items()
    ]
    return sorted(problems)


def labels_differ(ours: Sequence[str], fault_free: Sequence[str]) -> list[str]:
    """Discover found a domain for the same labels as a fault-free run of the same stream
    (how many domains each label got is :func:`domains_differ`'s: it moves with the order
    discover reads documents in, faults or not).

    >>> labels_differ(["legal", "python_code"], ["python_code", "legal", "legal", "news"])
    ['news: a domain in the fault-free run only']
    """
    mine, theirs = set(ours), set(fault_free)
    problems = [f"{label}: a domain in this run only" for label in mine - theirs]
    problems += [f"{label}: a domain in the fault-free run only" for label in theirs - mine]
    return sorted(problems)
