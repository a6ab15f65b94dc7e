"""Serve's outages from the prober's outcomes, split by whether serve's own fault began them."""

from __future__ import annotations

from topology.chaos.availability import Outage, after_own_faults, outages


def probes(pattern: str, every_s: float = 0.5) -> list[tuple[float, bool]]:
    """``"++--+"``: answered, answered, failed, failed, answered, one probe per ``every_s``."""
    return [(i * every_s, mark == "+") for i, mark in enumerate(pattern)]


def test_an_outage_runs_from_the_first_failed_probe_to_the_next_answer():
    assert outages(probes("++++")) == []
    assert outages(probes("+---++--")) == [Outage(0.5, 2.0, 3), Outage(3.0, 3.5, 2)]
    assert Outage(0.5, 2.0, 3).seconds == 1.5


def test_an_outage_that_no_fault_of_serve_began_is_told_apart():
    found = outages(probes("+---+++++++---+"))  # outages from 0.5 s and from 5.5 s
    own, other = after_own_faults(found, fault_times=[0.2], within_s=2.0)
    assert [o.start_s for o in own] == [0.5] and [o.start_s for o in other] == [5.5]
    own, other = after_own_faults(found, fault_times=[], within_s=6.0)
    assert own == [] and len(other) == 2
