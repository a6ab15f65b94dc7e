"""The fault schedule: a function of its seed, within its shape, read back from its print."""

from __future__ import annotations

from collections import Counter

import pytest

from topology.chaos.schedule import (
    BROKER,
    KINDS,
    STAGES,
    Fault,
    ScheduleShape,
    chaos_schedule,
    read_schedule,
    schedule_json,
)

SHAPE = ScheduleShape(duration_s=3600, per_minute=6, session_timeout_s=10, broker_pause_max_s=60)


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    assert chaos_schedule(7, SHAPE) == chaos_schedule(7, SHAPE)
    assert chaos_schedule(7, SHAPE) != chaos_schedule(8, SHAPE)


def test_faults_stay_within_the_shape():
    faults = chaos_schedule(3, SHAPE)
    assert 300 <= len(faults) <= 420  # about 6 a minute for an hour
    assert set(Counter(f.kind for f in faults)) == set(KINDS)
    times = [f.at_s for f in faults]
    assert times == sorted(times) and times[0] >= SHAPE.start_s and times[-1] <= 3600
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) >= SHAPE.min_gap_s - 0.1 and max(gaps) <= SHAPE.max_gap_s + 0.1
    for fault in faults:
        if fault.kind == "pause":  # past the session timeout: the group evicts the stage
            assert fault.hold_s > SHAPE.session_timeout_s
        if fault.kind == "pause_broker":
            assert fault.targets == (BROKER,) and 0 < fault.hold_s <= 60
        else:
            assert set(fault.targets) <= set(STAGES)
        if fault.kind == "kill_two":
            assert len(set(fault.targets)) == 2


def test_a_printed_schedule_replays_as_it_was():
    faults = chaos_schedule(11, SHAPE)
    assert read_schedule(schedule_json(faults)) == faults


def test_a_schedule_with_an_unknown_kind_is_refused():
    text = schedule_json([Fault(1.0, "kill", ("route",))]).replace('"kill"', '"explode"')
    with pytest.raises(ValueError, match="unknown fault kind 'explode'"):
        read_schedule(text)


def test_no_faults_per_minute_is_the_fault_free_schedule():
    assert chaos_schedule(1, ScheduleShape(duration_s=600, per_minute=0)) == []
