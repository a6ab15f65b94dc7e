"""Each invariant of a chaos run, on hand-made records: one that holds, one that fails."""

from __future__ import annotations

from experts.records import ExpertRegistration
from topology.chaos import invariants


def registration(expert: str, job: str | None, sha: str = "a" * 64) -> ExpertRegistration:
    return ExpertRegistration(
        expert_id=expert,
        domain_id="legal",
        sha256=sha,
        trunk_fingerprint="f" * 64,
        centroid=[1.0, 0.0],
        job_id=job,
    )


def test_a_fed_document_missing_from_either_topic_is_lost():
    assert invariants.lost_documents(["a", "b"], {"a", "b"}, {"a", "b"}) == []
    lost = invariants.lost_documents(["a", "b", "c"], {"a", "c"}, {"a"})
    assert lost == ["b: fed, never ingested", "c: ingested, never routed"]


def test_every_new_domain_of_the_stream_needs_an_expert():
    assert invariants.new_domains_without_expert({"legal", "news"}, ["legal"]) == []
    assert invariants.new_domains_without_expert({None, "legal"}, ["python_code", "legal"]) == [
        "python_code: no expert"
    ]


def test_a_job_may_name_one_expert_however_often_it_is_registered():
    again = [registration("e1", "job-1"), registration("e1", "job-1"), registration("e2", None)]
    assert invariants.jobs_with_several_experts(again) == []
    twice = [registration("e1", "job-1"), registration("e2", "job-1")]
    assert invariants.jobs_with_several_experts(twice) == ["job job-1: 2 experts (e1, e2)"]


def test_an_expert_id_registered_with_two_contents_is_a_violation():
    assert invariants.experts_with_two_contents({"e1": {"a" * 64}}) == []
    problems = invariants.experts_with_two_contents({"e1": {"a" * 64, "b" * 64}, "e2": {"c"}})
    assert problems == ["expert e1: 2 contents"]


def test_every_registration_needs_its_files_with_the_registered_sha256():
    regs = [registration("e1", "j1"), registration("e2", "j2"), registration("e3", "j3")]
    stored = {"e1": "a" * 64, "e2": "b" * 64}
    assert invariants.registrations_not_stored(regs[:1], stored, {}) == []
    assert invariants.registrations_not_stored(regs, stored, {"e3": "sha256_mismatch"}) == [
        "expert e2: stored sha256 differs from the registration's",
        "expert e3: refused by the store (sha256_mismatch)",
    ]
    assert invariants.registrations_not_stored(regs[2:], {}, {}) == [
        "expert e3: registered, not in the store"
    ]


def test_weights_hold_when_the_trunk_matches_and_the_monitor_saw_no_change():
    verified = {"step": 2, "experts": 2, "problems": 0}
    assert invariants.weights_changed("t1", "t1", 0, verified) == []
    assert invariants.weights_changed("t1", "t2", 3, {}) == [
        "the trunk's fingerprint changed",
        "the monitor saw 3 tensor changes",
        "the monitor never verified every expert at the end",
    ]
    assert invariants.weights_changed("t1", "t1", 0, {**verified, "problems": 1}) == [
        "the monitor's final check found 1 problems"
    ]


def test_the_monitor_history_holds_every_step_once():
    assert invariants.monitor_steps_not_once([0, 1, 2], registrations=2) == []
    assert invariants.monitor_steps_not_once([0, 2, 2], registrations=3) == [
        "step 2 held 2 times",
        "step 1 missing",
        "step 3 missing",
    ]


def test_domains_match_a_fault_free_run_by_label_whatever_their_order():
    assert invariants.domains_differ(["legal", "python_code"], ["python_code", "legal"]) == []
    assert invariants.domains_differ(["legal", "legal"], ["python_code", "legal"]) == [
        "1 more legal domain(s) in this run",
        "1 more python_code domain(s) in the fault-free run",
    ]


def test_discover_applies_one_decision_per_routed_document():
    assert invariants.decisions_not_once(7261, routed=7261) == []
    assert invariants.decisions_not_once(7000, routed=7261) == []  # behind at the stop
    assert invariants.decisions_not_once(10736, routed=7261) == [
        "discover applied 10736 decisions for 7261 routed documents"
    ]
    assert invariants.decisions_not_once(None, routed=5) == [
        "discover left no state to count its decisions"
    ]


def test_the_same_labels_found_whatever_the_number_of_domains_each_got():
    assert invariants.labels_differ(["legal", "legal"], ["legal", "python_code"]) == [
        "python_code: a domain in the fault-free run only"
    ]
    assert invariants.labels_differ(["legal", "legal", "news"], ["news", "legal"]) == []
