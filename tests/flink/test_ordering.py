"""The merge that gives Flink's discover one input order at any parallelism (no PyFlink
needed: runs in both venvs)."""

from __future__ import annotations

import json
import random

import pytest

from topology.flink.ordering import Held, LaneMerge

LANES = ["d:0", "d:1", "d:2"]


def _lanes(n: int, seed: int) -> dict[str, list[Held]]:
    """``n`` documents spread over the lanes; created_ms rising in each lane (as a
    partition's producer stamps them), equal stamps across lanes common."""
    rng = random.Random(seed)
    out: dict[str, list[Held]] = {lane: [] for lane in LANES}
    for i in range(n):
        lane = rng.choice(LANES)
        partition = int(lane[-1])
        offset = len(out[lane])
        created = i // 3  # three documents per millisecond
        out[lane].append(Held(lane, offset, (created, partition, offset), {"i": i}))
    return out


def _arrivals(lanes: dict[str, list[Held]], seed: int) -> list[Held]:
    """One interleaving of the lanes (each lane in its own order: FIFO through the job)."""
    rng = random.Random(seed)
    cursors = {lane: 0 for lane in lanes}
    out = []
    while any(cursors[lane] < len(items) for lane, items in lanes.items()):
        lane = rng.choice([lane for lane, items in lanes.items() if cursors[lane] < len(items)])
        out.append(lanes[lane][cursors[lane]])
        cursors[lane] += 1
    return out


def _run(arrivals: list[Held], merge: LaneMerge | None = None) -> list[int]:
    merge = merge or LaneMerge(LANES, idle_ms=1_000, now_ms=0)
    order = []
    for held in arrivals:
        merge.add(held, now_ms=0)
        order += [h.entry["i"] for h in merge.ready(now_ms=0)]
    # the stream ends: once every lane has been silent for idle_ms, all of it goes
    return order + [h.entry["i"] for h in merge.ready(now_ms=merge.idle_ms)]


def test_every_interleaving_of_the_partitions_gives_one_order():
    lanes = _lanes(300, seed=1)
    expected = [h.entry["i"] for h in sorted(_arrivals(lanes, 0), key=lambda h: h.key)]
    for seed in range(8):
        assert _run(_arrivals(lanes, seed)) == expected


def test_replays_after_a_restore_are_dropped_and_the_order_kept():
    lanes = _lanes(200, seed=2)
    arrivals = _arrivals(lanes, seed=3)
    whole = _run(arrivals)

    first = LaneMerge(LANES, idle_ms=1_000, now_ms=0)
    applied = []
    for held in arrivals[:120]:
        first.add(held, now_ms=0)
        applied += [h.entry["i"] for h in first.ready(now_ms=0)]
    # the checkpoint: what is held and each lane's last released offset, as JSON
    held_json = [h.to_json() for h in first.holding()]
    released = json.loads(json.dumps(first.released))
    restored = LaneMerge(LANES, idle_ms=1_000, now_ms=0)
    restored.restore([Held.from_json(t) for t in held_json], released, now_ms=0)
    # Flink re-delivers from an older position: 40 decisions again, then the rest
    replayed = [restored.add(h, now_ms=0) for h in arrivals[80:120]]
    assert not any(replayed)
    rest = _run(arrivals[120:], restored)
    assert applied + rest == whole


def test_a_silent_partition_is_waited_for_only_idle_ms():
    merge = LaneMerge(["d:0", "d:1"], idle_ms=500, now_ms=0)
    merge.add(Held("d:0", 0, (9, 0, 0), {"i": 0}), now_ms=100)
    assert merge.ready(now_ms=499) == []  # d:1 has not been silent for 500 ms yet
    assert [h.entry["i"] for h in merge.ready(now_ms=500)] == [0]
    # once idle, d:1 is not waited for; when it speaks again, it is
    merge.add(Held("d:0", 1, (10, 0, 1), {"i": 1}), now_ms=600)
    assert [h.entry["i"] for h in merge.ready(now_ms=600)] == [1]
    merge.add(Held("d:1", 0, (11, 1, 0), {"i": 2}), now_ms=700)
    merge.add(Held("d:0", 2, (12, 0, 2), {"i": 3}), now_ms=700)
    assert [h.entry["i"] for h in merge.ready(now_ms=700)] == [2]  # d:1 empty, not idle
    assert merge.held == 1


def test_a_lagging_partition_cannot_hold_more_than_max_held():
    merge = LaneMerge(["d:0", "d:1"], idle_ms=10_000, now_ms=0, max_held=5)
    released = []
    for offset in range(20):
        merge.add(Held("d:0", offset, (offset, 0, offset), {"i": offset}), now_ms=1)
        released += [h.entry["i"] for h in merge.ready(now_ms=1)]
    assert released == list(range(15)) and merge.held == 5


def test_a_partition_the_job_did_not_know_is_merged_from_its_first_decision():
    merge = LaneMerge([], idle_ms=1_000, now_ms=0)
    merge.add(Held("d:0", 0, (1, 0, 0), {"i": 0}), now_ms=0)
    merge.add(Held("d:3", 0, (0, 3, 0), {"i": 1}), now_ms=0)
    assert [h.entry["i"] for h in merge.ready(now_ms=0)] == [1]


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        json.dumps({"doc_id": "x"}),
        json.dumps({"docs_topic": "d", "docs_partition": "zero", "docs_offset": 1}),
        json.dumps([1, 2]),
    ],
)
def test_a_decision_that_says_not_where_it_came_from_is_not_held(value):
    assert Held.of({"kind": "routed", "value": value, "time_ms": 0}) is None


def test_settings_are_checked():
    with pytest.raises(ValueError):
        LaneMerge(LANES, idle_ms=-1, now_ms=0)
    with pytest.raises(ValueError):
        LaneMerge(LANES, idle_ms=0, now_ms=0, max_held=0)
