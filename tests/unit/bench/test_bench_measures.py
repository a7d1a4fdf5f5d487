"""What the benchmarks compute from what they observed (`bench/benchlib.py`): percentiles,
the skewed mode's slow inputs, each input's lag from its end to the bench's watch seeing
it, Pod start latencies. Pure functions: no cluster."""

from __future__ import annotations

import math
from typing import Any

import pytest
from bench_scripts import load
from kinetic.model.manifest import InputRecord

bl = load("benchlib")


# --------------------------------------------------------------------------- percentiles


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([], 50, None),
        ([5.0], 50, 5.0),
        ([5.0], 95, 5.0),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # unsorted in, interpolated between 2 and 3
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([1.0, 2.0, 3.0, 4.0], 95, 3.85),
        ([1.0, 2.0, math.inf], 50, 2.0),  # "never" sorts last
        ([1.0, math.inf], 50, math.inf),  # half way to never is never
        ([math.inf, math.inf], 50, math.inf),
    ],
)
def test_percentile_interpolates_and_a_summary_of_nothing_is_none(values, q, expected):
    got = bl.percentile(values, q)
    assert got == (None if expected is None else pytest.approx(expected))


def test_a_percentile_outside_0_to_100_is_refused_naming_it():
    with pytest.raises(ValueError, match="between 0 and 100, got 101"):
        bl.percentile([1.0], 101)


# --------------------------------------------------------------------------- the skewed mode


def test_the_skewed_run_slows_5_percent_spread_at_random_the_same_ones_every_time():
    slow = bl.slow_inputs(300)
    assert len(slow) == 15
    assert slow == bl.slow_inputs(300)  # a fixed seed: every run slows the same inputs
    assert slow <= set(range(300))
    assert max(slow) - min(slow) > 100  # spread, not a block
    assert bl.slow_inputs(300, seed=31) != slow


def test_the_skewed_run_slows_the_inputs_the_unit_simulation_slowed():
    u = load("unitsim")
    simulated = next(w for w in u.workloads() if w.key == "c")
    slowed = {i for i, d in enumerate(simulated.durations) if d == bl.SLOW_SECONDS}
    assert bl.slow_inputs(len(simulated.durations)) == slowed


@pytest.mark.parametrize("n, expected", [(0, 0), (1, 1), (10, 1), (40, 2), (1000, 50)])
def test_a_small_run_is_still_skewed_by_at_least_one_input(n, expected):
    assert len(bl.slow_inputs(n)) == expected


def test_slow_inputs_sleep_20_times_longer_and_the_work_adds_up():
    seconds = bl.input_seconds(5, frozenset({1, 3}))
    assert seconds == [0.2, 4.0, 0.2, 4.0, 0.2]
    assert bl.SLOW_SECONDS == 20 * bl.SHORT_SECONDS
    assert sum(bl.input_seconds(300, bl.slow_inputs(300))) == pytest.approx(285 * 0.2 + 15 * 4)


# --------------------------------------------------------------------------- lags


def attempt(n: int, end: str | None, outcome: str = "success") -> dict[str, Any]:
    return {"attempt": n, "pod": f"grp-1-0-{n}", "endTime": end, "outcome": outcome}


def test_an_inputs_end_is_its_last_attempts_end_and_unended_inputs_are_left_out():
    records = {
        "0": InputRecord.model_validate({"attempts": [attempt(1, "2026-11-28T10:00:05Z")]}),
        "7": InputRecord.model_validate(
            {
                "attempts": [
                    attempt(1, "2026-11-28T10:00:01Z", "failure"),
                    attempt(2, "2026-11-28T10:00:09Z"),
                ]
            }
        ),
        "8": InputRecord.model_validate({"attempts": [attempt(1, None, "running")]}),
        "9": InputRecord.model_validate({"attempts": []}),
    }
    base = bl.epoch_seconds("2026-11-28T10:00:00Z")
    assert {i: t - base for i, t in bl.input_end_times(records).items()} == {0: 5.0, 7: 9.0}


def test_the_watch_records_when_each_input_first_showed_ended():
    seen = bl.FirstSeen()
    seen.saw({"succeededIndexes": "0-1", "activeIndexes": "2-5"}, now=10.0)
    seen.saw({"succeededIndexes": "0-2", "failedIndexes": "5"}, now=11.0)
    seen.saw({"succeededIndexes": "0-2", "failedIndexes": "5"}, now=12.0)  # nothing new
    assert seen.at == {0: 10.0, 1: 10.0, 2: 11.0, 5: 11.0}
    assert not seen.truncated
    seen.saw({"succeededIndexes": "0-3", "failedIndexes": "5", "truncated": True}, now=13.0)
    assert seen.at[3] == 13.0
    assert seen.truncated  # ranges cut at the size cap: inputs past the cut go unseen


def test_lags_run_from_each_inputs_end_to_the_watch_and_count_what_either_side_lacks():
    ends = {0: 100.0, 1: 100.0, 2: 101.0, 3: 105.0}
    seen = {0: 101.0, 1: 103.0, 2: 101.5, 9: 110.0}
    assert bl.lag_summary(ends, seen) == {
        "p50_seconds": 1.0,
        "p95_seconds": 2.8,  # between 1.0 and 3.0
        "max_seconds": 3.0,
        "inputs": 3,
        "ended_never_seen": 1,  # input 3
        "seen_without_end": 1,  # input 9
    }


def test_no_lag_measured_is_none_not_zero():
    summary = bl.lag_summary({}, {0: 5.0})
    assert summary["p50_seconds"] is None and summary["p95_seconds"] is None
    assert summary["max_seconds"] is None and summary["inputs"] == 0


# --------------------------------------------------------------------------- Pod starts


def pod(created: str, state: dict[str, Any] | None) -> dict[str, Any]:
    statuses = [] if state is None else [{"name": "task", "state": state}]
    return {"metadata": {"creationTimestamp": created}, "status": {"containerStatuses": statuses}}


def test_a_pods_start_runs_from_its_creation_to_its_containers_start():
    pods = [
        pod("2026-11-28T10:00:00Z", {"terminated": {"startedAt": "2026-11-28T10:00:07Z"}}),
        pod("2026-11-28T10:00:03Z", {"running": {"startedAt": "2026-11-28T10:00:05Z"}}),
        pod("2026-11-28T10:00:03Z", {"waiting": {"reason": "ContainerCreating"}}),  # not yet
        pod("2026-11-28T10:00:04Z", None),  # no container status at all
    ]
    assert bl.pod_start_seconds(pods) == [7.0, 2.0]


def _pod(created: str, finished: str | None) -> dict:
    state = {"terminated": {"finishedAt": finished}} if finished else {"running": {}}
    return {
        "metadata": {"creationTimestamp": created},
        "status": {"containerStatuses": [{"state": state}]},
    }


def test_each_later_pod_takes_the_slot_of_the_earliest_pod_ended_before_it() -> None:
    pods = [
        _pod("2026-11-28T08:00:00Z", "2026-11-28T08:00:03Z"),
        _pod("2026-11-28T08:00:00Z", "2026-11-28T08:00:05Z"),
        _pod("2026-11-28T08:00:04Z", "2026-11-28T08:00:09Z"),  # took the 08:00:03 slot
        _pod("2026-11-28T08:00:07Z", None),  # took the 08:00:05 slot, still running
    ]
    assert bl.slot_refill_seconds(pods, parallel=2) == [1.0, 2.0]
    assert bl.slot_refill_seconds(pods[:2], parallel=2) == []  # the first wave takes none


def _obj(kind: str, namespace: str, name: str, phase: str | None) -> dict[str, Any]:
    status = {} if phase is None else {"phase": phase}
    return {"kind": kind, "metadata": {"namespace": namespace, "name": name}, "status": status}


def test_the_bench_names_kinetic_work_of_other_namespaces_that_has_not_ended() -> None:
    """A batch an interrupted run left behind shares every window: the bench refuses to
    start while one runs, and names it."""
    objects = [
        _obj("KineticBatch", "kinetic-bench-dash-1", "grp-dashbench", "RUNNING"),
        _obj("KineticJob", "team-a", "train", None),  # no status yet: pending
        _obj("KineticJob", "team-a", "done", "SUCCEEDED"),
        _obj("KineticBatch", "team-b", "old", "CANCELLED"),
        _obj("KineticBatch", "kinetic-bench-function", "grp-1", "RUNNING"),  # our own
        _obj("KineticJob", "team-c", "odd", "SOMETHING"),  # unknown phases count as busy
    ]
    own = {"kinetic-bench-function", "kinetic-bench-job"}  # a dashboard bench's is not
    assert bl.unfinished_elsewhere(objects, own) == [
        "KineticBatch kinetic-bench-dash-1/grp-dashbench",
        "KineticJob team-a/train",
        "KineticJob team-c/odd",
    ]
