"""The KineticBatch decision over units of attempt Pods, one decision at a time.

A unit is what one Pod runs: one input, or ``chunkSize`` consecutive inputs.
Each test hands `decide_batch` the status it wrote last and the Pods the
watch shows per unit, and reads back the status to write and the actions
(`CreatePods`, `StopPods`, `WriteManifest`, `Event`). The randomized
simulation of whole batches is in test_batch_simulation.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    Condition,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
    PhaseCounts,
)
from kinetic_operator.logic.batch_logic import (
    BatchDecision,
    CreatePods,
    Event,
    Recorded,
    UnitObservation,
    WriteManifest,
    compact_status,
    decide_batch,
    immutable_change,
    invalid_batch,
    merge_mutable,
    settled_units,
    unit_inputs,
    with_condition,
)
from kinetic_operator.logic.observed import PodView

SHA = "a" * 64
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
KIB64 = 64 * 1024


def make_spec(n: int = 10, **extra: Any) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {"function": {"payloadURI": "gs://b/f.pkl", "sha256": SHA}},
            "inputs": {"count": n, "uriPrefix": "gs://b/inputs"},
            **extra,
        }
    )


def container_spec(n: int = 3, **extra: Any) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {"container": {"command": ["echo"]}},
            "inputs": {"items": list(range(n))},
            **extra,
        }
    )


def pv(unit: int, attempt: int = 1, phase: str = "Running", **kw: Any) -> PodView:
    return PodView(name=f"g-{unit}-{attempt}", attempt=attempt, index=unit, phase=phase, **kw)


def ok(unit: int, attempt: int = 1, message: str | None = None) -> PodView:
    return pv(unit, attempt, "Succeeded", exit_code=0, termination_message=message)


def bad(unit: int, attempt: int = 1, message: str = "boom") -> PodView:
    return pv(
        unit, attempt, "Failed", exit_code=1, terminated_reason="Error", termination_message=message
    )


def units(*pods: PodView, creating: dict[int, int] | None = None) -> dict[int, UnitObservation]:
    grouped: dict[int, dict[int, PodView]] = {}
    for p in pods:
        grouped.setdefault(p.index, {})[p.attempt] = p  # type: ignore[index]
    out = {u: UnitObservation(v) for u, v in grouped.items()}
    for u, a in (creating or {}).items():
        out[u] = UnitObservation(grouped.get(u, {}), creating=a)
    return out


def decide(
    spec: KineticBatchSpec,
    status: KineticBatchStatus | None,
    obs: dict[int, UnitObservation] | None = None,
    now: datetime = T0,
    **kw: Any,
) -> BatchDecision:
    return decide_batch(spec, status, obs or {}, now, batch="g", **kw)


def with_manifest(status: KineticBatchStatus) -> KineticBatchStatus:
    """What the handler layer does once the first manifest write succeeded."""
    return status.model_copy(update={"manifest_uri": "gs://b/batches/g/manifest.json"})


def started(spec: KineticBatchSpec) -> KineticBatchStatus:
    return with_manifest(decide(spec, None).status)


def ranges(status: KineticBatchStatus) -> dict[str, str]:
    return {
        "active": status.active_indexes,
        "succeeded": status.succeeded_indexes,
        "failed": status.failed_indexes,
        "cancelled": status.cancelled_indexes,
    }


def counts(status: KineticBatchStatus) -> dict[str, int]:
    return status.counts.model_dump()


def cond(status: KineticBatchStatus, ctype: str) -> Condition:
    return next(c for c in status.conditions if c.type == ctype)


def reasons(d: BatchDecision) -> list[str]:
    return [e.reason for e in d.of(Event)]


def assert_quiet_again(d: BatchDecision, spec: KineticBatchSpec, obs: dict) -> None:
    """Deciding again on the decision's own output posts no Event and records nothing new."""
    again = decide(spec, d.status, obs)
    assert reasons(again) == []
    assert again.recorded.terminal == d.recorded.terminal


# =========================================================================== launching


def test_first_decision_reserves_up_to_the_limit_before_creating():
    spec = make_spec(10, maxConcurrent=3)
    d = decide(spec, None, generation=1)
    assert d.write_status and d.urgent  # the reservation is written before any Pod exists
    assert [type(a) for a in d.actions] == [WriteManifest, CreatePods, Event]
    assert d.actions[0] == WriteManifest(urgent=True, blocking=True)
    assert d.creates == [(0, 1), (1, 1), (2, 1)]
    s = d.status
    assert s.launched == 3 and s.active_indexes == "0-2"
    assert s.total == 10 and s.progress == "0/10"
    assert s.phase == Phase.PENDING
    assert counts(s) == {"pending": 10, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
    assert s.start_time == "2024-05-01T12:00:00Z" and s.completion_time is None
    assert s.observed_generation == 1
    assert cond(s, "Running").status == "False" and cond(s, "Running").reason == "Pending"
    assert cond(s, "Complete").status == "False" and cond(s, "Failed").status == "False"
    assert d.of(Event)[0].message == "Launching 10 inputs, at most 3 at a time."


def test_a_crash_between_reserve_and_create_is_repaired_by_creating_the_same_pods():
    spec = make_spec(6, maxConcurrent=2)
    reserved = decide(spec, None)
    # The status write committed, then the operator died: no manifest, no Pods.
    d = decide(spec, reserved.status, now=T0 + timedelta(seconds=30))
    assert d.creates == [(0, 1), (1, 1)]  # the same names: AlreadyExists if they had been made
    assert d.actions[0] == WriteManifest(urgent=True, blocking=True)
    assert d.write_status  # creates only after a conditional write on this very status
    assert d.status.active_indexes == "0-1" and d.status.launched == 2
    assert d.status.start_time == reserved.status.start_time
    assert reasons(d) == []  # "Launching" was said once


def test_pods_being_created_are_not_created_again():
    spec = make_spec(4, maxConcurrent=2)
    s = started(spec)
    d = decide(spec, s, units(creating={0: 1, 1: 1}))
    assert d.creates == [] and d.stops == [] and not d.write_status and reasons(d) == []


def test_manifest_write_is_not_blocking_once_it_exists():
    spec = make_spec(10, maxConcurrent=3)
    s = started(spec)
    d = decide(spec, s, units(ok(0), pv(1), pv(2, phase="Pending")))
    assert d.creates == [(3, 1)]
    assert d.of(WriteManifest) == [WriteManifest(urgent=False, blocking=False)]
    assert d.actions.index(d.of(CreatePods)[0]) < d.actions.index(d.of(WriteManifest)[0])


def test_nothing_changes_nothing_happens():
    spec = make_spec(10, maxConcurrent=3)
    obs = units(pv(0), pv(1), pv(2))
    d1 = decide(spec, started(spec), obs, T0 + timedelta(seconds=1))
    d2 = decide(spec, d1.status, obs, T0 + timedelta(seconds=9))
    assert d1.status.phase == Phase.RUNNING and counts(d1.status)["running"] == 3
    assert d2.creates == [] and d2.stops == [] and reasons(d2) == [] and not d2.write_status
    assert d2.status.wire() == d1.status.wire()


def test_max_concurrent_none_launches_everything():
    d = decide(make_spec(250, maxConcurrent=None), None)
    assert d.creates == [(i, 1) for i in range(250)] and d.status.launched == 250
    assert not d.more


def test_max_launches_paces_creation():
    spec = make_spec(250, maxConcurrent=None)
    d = decide(spec, None, max_launches=100)
    assert len(d.creates) == 100 and d.more
    obs = units(*(pv(i, phase="Pending") for i in range(100)))
    d2 = decide(spec, with_manifest(d.status), obs, max_launches=100)
    assert d2.creates == [(i, 1) for i in range(100, 200)] and d2.more
    assert d2.status.active_indexes == "0-199"


def test_free_slots_are_refilled_in_index_order():
    spec = make_spec(10, maxConcurrent=3)
    d = decide(spec, started(spec), units(pv(0), ok(1), bad(2)))
    assert d.creates == [(3, 1), (4, 1)]
    assert ranges(d.status) == {"active": "0,3-4", "succeeded": "1", "failed": "2", "cancelled": ""}
    assert counts(d.status) == {
        "pending": 7,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert d.status.progress == "1/10" and d.status.launched == 5


def test_max_concurrent_can_change_mid_run():
    spec = make_spec(20, maxConcurrent=2)
    s = started(spec)
    obs = units(pv(0), pv(1))
    wider = decide(spec.model_copy(update={"max_concurrent": 5}), s, obs)
    assert wider.creates == [(2, 1), (3, 1), (4, 1)]
    five = units(*(pv(i) for i in range(5)))
    narrow = spec.model_copy(update={"max_concurrent": 2})
    d = decide(narrow, wider.status, five)
    assert d.creates == [] and d.stops == []  # nothing is stopped to shrink
    d = decide(narrow, d.status, units(ok(0), ok(1), ok(2), pv(3), pv(4)))
    assert d.creates == []  # 3 and 4 still run: at the new limit
    d = decide(narrow, d.status, units(ok(3), pv(4)))
    assert d.creates == [(5, 1)]


def test_zero_inputs_succeed_at_once():
    d = decide(container_spec(0), None)
    assert d.status.phase == Phase.SUCCEEDED and d.status.progress == "0/0"
    assert d.creates == []


def test_naive_time_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        decide(make_spec(1), None, now=datetime(2024, 1, 1))


# =========================================================================== outcomes


def test_all_succeeded():
    spec = make_spec(3, maxConcurrent=None)
    d = decide(spec, started(spec), units(ok(0), ok(1), ok(2)), T0 + timedelta(minutes=5))
    st = d.status
    assert st.phase == Phase.SUCCEEDED and st.progress == "3/3"
    assert st.completion_time == "2024-05-01T12:05:00Z"
    assert cond(st, "Complete").status == "True" and cond(st, "Complete").reason == "AllSucceeded"
    assert cond(st, "Failed").status == "False" and cond(st, "Running").status == "False"
    assert WriteManifest(urgent=True) in d.actions and d.urgent
    assert reasons(d) == ["Succeeded"]
    assert st.active_indexes == "" and st.succeeded_indexes == "0-2"
    assert d.stops == []  # finished Pods wait out their TTL


def test_no_event_per_successful_input():
    """A batch of 40 run to the end posts Launching and Succeeded, nothing per input."""
    spec = make_spec(40, maxConcurrent=7)
    status, pods, posted = None, {}, []
    for step in range(100):
        d = decide(spec, status, units(*pods.values()), T0 + timedelta(seconds=step))
        posted += reasons(d)
        status = with_manifest(d.status)
        for unit, attempt in d.creates:
            pods[unit] = pv(unit, attempt)
        for unit in [u for u, p in pods.items() if p.phase == "Running"][: step % 3 + 1]:
            pods[unit] = ok(unit)
        if Phase(status.phase).terminal:
            break
    assert status.phase == Phase.SUCCEEDED
    assert posted == ["Launching", "Succeeded"]


def test_a_tombstone_of_a_finished_pod_records_its_outcome():
    spec = make_spec(2, maxConcurrent=None)
    gone_ok = PodView(**{**ok(0).__dict__, "gone": True})
    d = decide(spec, started(spec), units(gone_ok, pv(1)))
    assert d.status.succeeded_indexes == "0" and d.creates == []


def test_failures_without_fail_fast_end_failed():
    spec = make_spec(3, maxConcurrent=None)
    d = decide(spec, started(spec), units(ok(0), bad(1, message="ValueError: no"), ok(2)))
    st = d.status
    assert st.phase == Phase.FAILED
    assert cond(st, "Failed").status == "True" and cond(st, "Failed").reason == "InputsFailed"
    assert cond(st, "Complete").status == "False"
    assert reasons(d) == ["InputsFailed", "Failed"]
    failed = d.of(Event)[0]
    assert failed.type == "Warning" and failed.message.startswith("Input 1 failed. Input 1 failed")
    assert "ValueError: no" in failed.message
    assert (
        st.message
        == "Done with failures: 2/3 succeeded, 1 failed, 0 cancelled, 0 running, 0 pending."
    )


def test_retries_are_per_input_and_keep_its_slot():
    spec = make_spec(4, maxConcurrent=2, retries=2)
    s = started(spec)
    d = decide(spec, s, units(bad(0), pv(1)))
    assert d.creates == [(0, 2)]  # the retry, not a new input: 0 keeps its slot
    assert d.status.active_indexes == "0-1" and d.status.failed_indexes == ""
    assert reasons(d) == []  # an attempt failing is not a batch transition
    assert_quiet_again(d, spec, units(bad(0), pv(1)))
    d = decide(spec, d.status, units(bad(0), bad(0, 2), pv(1)))
    assert d.creates == [(0, 3)]
    d = decide(spec, d.status, units(bad(0), bad(0, 2), bad(0, 3), pv(1)))
    assert d.creates == [(2, 1)] and d.status.failed_indexes == "0"
    assert reasons(d) == ["InputsFailed"]
    assert "after 2 retries" in d.of(Event)[0].message
    assert_quiet_again(d, spec, units(bad(0), bad(0, 2), bad(0, 3), pv(1), pv(2, phase="Pending")))


def test_a_deleted_pod_is_rerun_without_using_a_retry():
    spec = make_spec(2, maxConcurrent=None, retries=0)
    s = started(spec)
    gone = PodView(**{**pv(0).__dict__, "gone": True})
    d = decide(spec, s, units(gone, pv(1)))
    assert d.creates == [(0, 2)] and d.status.failed_indexes == ""
    assert d.plans[0].disruptions == 1 and d.plans[0].failures == 0
    d = decide(spec, d.status, units(gone, ok(0, 2), ok(1)))
    assert d.status.phase == Phase.SUCCEEDED


def test_a_failed_attempt_whose_pod_is_deleted_later_still_spends_its_retry():
    """Attempt 1 failed, attempt 2 runs, then someone deletes the finished Pod of attempt 1
    (its tombstone carries a deletionTimestamp). When attempt 2 fails too, the input has
    used its one retry: no third attempt."""
    spec = make_spec(1, maxConcurrent=None, retries=1)
    d = decide(spec, started(spec), units(bad(0)))
    assert d.creates == [(0, 2)]
    tomb = PodView(**{**bad(0).__dict__, "deleting": True, "gone": True})
    d = decide(spec, d.status, units(tomb, pv(0, 2)))
    assert d.creates == [] and d.plans[0].failures == 1
    d = decide(spec, d.status, units(tomb, bad(0, 2)))
    assert d.creates == [] and d.status.failed_indexes == "0"


def test_too_many_disruptions_fail_the_input():
    spec = make_spec(1, maxConcurrent=None, retries=5)
    s = started(spec)
    lost = [PodView(**{**pv(0, a).__dict__, "gone": True}) for a in (1, 2)]
    d = decide(spec, s, units(*lost), max_disruptions=1)
    assert d.creates == [] and d.status.failed_indexes == "0"
    assert "disrupted 2 times" in d.of(Event)[0].message


def test_an_older_live_attempt_of_an_input_is_stopped():
    spec = make_spec(1, maxConcurrent=None, retries=1)
    d = decide(spec, started(spec), units(pv(0, 1), pv(0, 2)))
    assert d.stops == ["g-0-1"] and d.creates == []


# =========================================================================== the fail-fast table


def _first_failure(fail_fast: bool, cancel_running: bool, **extra: Any):
    """6 inputs, 3 at a time; input 0 has failed, 1 runs, 2 is reserved but not seen yet."""
    spec = make_spec(
        6, maxConcurrent=3, failFast=fail_fast, cancelRunningOnFail=cancel_running, **extra
    )
    s = started(spec)
    assert s.active_indexes == "0-2"
    return spec, decide(spec, s, units(bad(0), pv(1)))


@pytest.mark.parametrize("cancel_running", [False, True], ids=["row1", "row4"])
def test_fail_fast_off_everything_continues(cancel_running):
    """Rows 1 and 4: cancelRunningOnFail without failFast has no effect."""
    spec, d = _first_failure(False, cancel_running)
    assert d.creates == [(2, 1), (3, 1)]  # 2 again (never seen), 3 takes 0's slot
    assert d.stops == []
    assert ranges(d.status) == {"active": "1-3", "succeeded": "", "failed": "0", "cancelled": ""}
    assert d.status.phase == Phase.RUNNING
    assert reasons(d) == ["InputsFailed"]
    end = decide(spec, d.status, units(bad(0), ok(1), ok(2), ok(3), ok(4), ok(5)))
    end = decide(spec, end.status, units(bad(0), ok(1), ok(2), ok(3), ok(4), ok(5)))
    assert end.status.phase == Phase.FAILED and cond(end.status, "Failed").reason == "InputsFailed"
    assert ranges(end.status)["succeeded"] == "1-5"


def test_fail_fast_row2_stops_launching_and_lets_running_finish():
    spec, d = _first_failure(True, False)
    assert d.creates == [(2, 1)]  # reserved before the failure: it is already launched
    assert d.stops == []
    assert ranges(d.status) == {"active": "1-2", "succeeded": "", "failed": "0", "cancelled": "3-5"}
    assert d.status.phase == Phase.RUNNING
    assert cond(d.status, "Running").reason == "FailFast"
    ev = next(e for e in d.of(Event) if e.reason == "FailFast")
    assert ev.type == "Warning" and "3 never launched" in ev.message
    assert "waiting for 2 running to finish" in ev.message
    assert_quiet_again(d, spec, units(bad(0), pv(1), pv(2)))
    end = decide(spec, d.status, units(bad(0), ok(1), ok(2)))
    assert end.status.phase == Phase.FAILED
    assert cond(end.status, "Failed").reason == "FailFast"
    assert counts(end.status) == {
        "pending": 0,
        "running": 0,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 3,
    }


def test_fail_fast_row2_running_inputs_still_get_their_retries():
    spec, d = _first_failure(True, False, retries=1)
    assert d.status.failed_indexes == ""  # 0 has a retry left: not a failure yet
    assert d.creates == [(0, 2), (2, 1)]  # 0's retry keeps its slot
    d = decide(spec, d.status, units(bad(0), bad(0, 2), bad(1), pv(2)))
    assert d.status.failed_indexes == "0" and d.creates == [(1, 2)]  # 1 finishes its retries
    assert d.status.cancelled_indexes == "3-5" and d.stops == []


def test_fail_fast_row3_cancels_running_inputs():
    spec, d = _first_failure(True, True)
    assert d.stops == ["g-1-1"]
    assert ranges(d.status) == {"active": "", "succeeded": "", "failed": "0", "cancelled": "1-5"}
    ev = next(e for e in d.of(Event) if e.reason == "FailFast")
    assert "cancelling 1 running" in ev.message and "3 never launched" in ev.message
    # Later sights of the stopped Pod, or of 2's Pod showing up at last, stop them again.
    again = decide(spec, d.status, units(bad(0), pv(1), pv(2)))
    assert again.stops == ["g-1-1", "g-2-1"] and again.creates == []
    # 2 was reserved but never seen, and is now cancelled: its Pod is not created (again).
    assert d.creates == []
    assert d.status.phase == Phase.FAILED and cond(d.status, "Failed").reason == "FailFast"
    assert reasons(again) == []


def test_fail_fast_row3_creates_no_pod_for_an_input_it_cancels():
    """Input 1 was disrupted (a retry is due) in the very decision in which input 0 fails
    for good: fail-fast cancels 1, so its next attempt must not be created."""
    spec, _ = _first_failure(True, True)
    s = started(spec)
    lost = PodView(**{**pv(1).__dict__, "gone": True})
    d = decide(spec, s, units(bad(0), lost, pv(2)))
    assert d.status.cancelled_indexes == "1-5"
    assert d.creates == []  # no Pod for a cancelled input
    assert d.status.phase == Phase.FAILED


def test_submission_failures_are_failures_from_the_start():
    spec = make_spec(
        5,
        maxConcurrent=None,
        submissionFailures=[
            {"index": 1, "message": "cannot pickle"},
            {"index": 3, "message": "too big"},
        ],
    )
    d = decide(spec, None)
    assert d.creates == [(0, 1), (2, 1), (4, 1)]
    assert d.status.failed_indexes == "1,3" and d.status.counts.failed == 2
    ev = next(e for e in d.of(Event) if e.reason == "SubmissionFailed")
    assert "Inputs 1,3 could not be submitted" in ev.message and "cannot pickle" in ev.message
    assert d.status.phase == Phase.PENDING  # submission failures alone are not progress
    again = decide(spec, with_manifest(d.status), units(pv(0, phase="Pending")))
    assert "SubmissionFailed" not in reasons(again)


def test_submission_failure_trips_fail_fast_before_anything_launches():
    spec = make_spec(4, failFast=True, submissionFailures=[{"index": 2, "message": "x"}])
    d = decide(spec, None)
    assert d.creates == []
    assert d.status.phase == Phase.FAILED and cond(d.status, "Failed").reason == "FailFast"
    assert ranges(d.status) == {"active": "", "succeeded": "", "failed": "2", "cancelled": "0-1,3"}
    assert d.status.start_time is None and d.status.completion_time is not None
    assert WriteManifest(urgent=True) in d.actions


# =========================================================================== cancel


def test_spec_cancel_stops_launching_and_cancels_every_running_input():
    spec = make_spec(8, maxConcurrent=3)
    s = started(spec)
    cancel = spec.model_copy(update={"cancel": True})
    d = decide(cancel, s, units(ok(0), pv(1), pv(2, phase="Pending")))
    assert d.creates == []
    assert d.stops == ["g-1-1", "g-2-1"]
    assert ranges(d.status) == {"active": "", "succeeded": "0", "failed": "", "cancelled": "1-7"}
    st = d.status
    assert st.phase == Phase.CANCELLED
    assert cond(st, "Failed").status == "True" and cond(st, "Failed").reason == "Cancelled"
    assert st.counts.cancelled == 7 and st.counts.succeeded == 1
    assert reasons(d)[-1] == "Cancelled" and reasons(d).count("Cancelled") == 1


def test_cancel_wins_over_failures_for_the_phase():
    spec = make_spec(3, maxConcurrent=None)
    s = started(spec)
    d = decide(spec.model_copy(update={"cancel": True}), s, units(bad(0), pv(1), ok(2)))
    assert d.status.phase == Phase.CANCELLED and "1 failed" in d.status.message


def test_cancel_indexes_cancels_one_running_input_and_the_others_carry_on():
    spec = container_spec(4, maxConcurrent=None)
    s = started(spec)
    obs = units(pv(0), pv(1), pv(2), pv(3))
    edited = spec.model_copy(update={"cancel_indexes": "1"})
    d = decide(edited, s, obs)
    assert d.stops == ["g-1-1"] and d.creates == []
    assert ranges(d.status) == {"active": "0,2-3", "succeeded": "", "failed": "", "cancelled": "1"}
    assert d.status.phase == Phase.RUNNING and cond(d.status, "Running").reason == "Running"
    # Its Pod dying of the stop changes nothing; a later sight of it live stops it again.
    killed = pv(1, phase="Failed", exit_code=143, deleting=True)
    d2 = decide(edited, d.status, units(pv(0), killed, pv(2), pv(3)))
    assert d2.status.cancelled_indexes == "1" and d2.creates == [] and d2.stops == []
    d3 = decide(edited, d2.status, units(ok(0), ok(2), ok(3)))
    assert d3.status.phase == Phase.CANCELLED
    assert cond(d3.status, "Failed").reason == "InputsCancelled"
    assert ranges(d3.status)["succeeded"] == "0,2-3"


def test_cancel_indexes_of_inputs_not_launched_yet_frees_their_turn():
    spec = make_spec(6, maxConcurrent=2, cancelIndexes="2-3,99")
    d = decide(spec, started(make_spec(6, maxConcurrent=2)), units(ok(0), pv(1)))
    assert d.creates == [(4, 1)]
    assert ranges(d.status)["cancelled"] == "2-3"  # 99 is not an input: ignored


def test_cancel_indexes_never_change_a_recorded_outcome():
    spec = make_spec(3, maxConcurrent=None)
    d = decide(spec, started(spec), units(ok(0), bad(1), pv(2)))
    edited = spec.model_copy(update={"cancel_indexes": "0-2"})
    d = decide(edited, d.status, units(ok(0), bad(1), pv(2)))
    assert ranges(d.status) == {"active": "", "succeeded": "0", "failed": "1", "cancelled": "2"}


def test_a_chunk_pod_is_stopped_only_once_every_input_of_it_is_settled():
    spec = make_spec(8, maxConcurrent=None, chunkSize=4)
    s = started(spec)
    assert decide(spec, None).creates == [(0, 1), (4, 1)]
    running = units(pv(0, chunk=4), pv(4, chunk=4))
    d = decide(spec.model_copy(update={"cancel_indexes": "1,3"}), s, running)
    assert d.stops == [] and ranges(d.status)["cancelled"] == "1,3"
    d = decide(spec.model_copy(update={"cancel_indexes": "0-3"}), d.status, running)
    assert d.stops == ["g-0-1"] and ranges(d.status)["cancelled"] == "0-3"
    assert ranges(d.status)["active"] == "4-7"


def test_a_batch_that_ended_is_final():
    spec = make_spec(2, maxConcurrent=None)
    done = decide(spec, started(spec), units(ok(0), ok(1))).status
    later = decide(spec.model_copy(update={"cancel": True}), done, {}, T0 + timedelta(1))
    assert later.actions == () and not later.write_status and later.status == done
    bumped = decide(spec, done, generation=7)
    assert bumped.write_status and bumped.status.observed_generation == 7
    stray = decide(spec, done, units(pv(1, 2)))
    assert stray.stops == ["g-1-2"] and stray.creates == [] and stray.status == done


# =========================================================================== chunks


def test_chunks_run_consecutive_inputs_per_pod_and_max_concurrent_counts_pods():
    spec = make_spec(7, maxConcurrent=2, chunkSize=3)
    d = decide(spec, None)
    assert d.creates == [(0, 1), (3, 1)]
    assert d.status.active_indexes == "0-5" and d.status.launched == 6
    assert unit_inputs(6, 3, 7) == IndexSet([6])
    d = decide(spec, with_manifest(d.status), units(ok(0), pv(3)))
    assert d.creates == [(6, 1)] and d.status.succeeded_indexes == "0-2"
    assert d.status.active_indexes == "3-6"


def test_a_chunk_reports_each_input_on_its_own():
    spec = make_spec(3, maxConcurrent=None, chunkSize=3)
    report = json.dumps({"succeeded": "0,2", "failed": "1"})
    d = decide(spec, started(spec), units(bad(0, message=report)))
    assert ranges(d.status) == {"active": "", "succeeded": "0,2", "failed": "1", "cancelled": ""}
    assert reasons(d)[0] == "InputsFailed" and d.of(Event)[0].message.startswith("Input 1 failed")


def test_a_chunk_retry_collects_successes_from_every_attempt():
    spec = make_spec(4, maxConcurrent=None, chunkSize=4, retries=1)
    s = started(spec)
    first = bad(0, message=json.dumps({"succeeded": "0,2", "failed": "1,3"}))
    d = decide(spec, s, units(first))
    assert d.creates == [(0, 2)] and d.status.active_indexes == "0-3"
    second = bad(0, 2, message=json.dumps({"succeeded": "1", "failed": "3"}))
    d = decide(spec, d.status, units(first, second))
    assert ranges(d.status) == {"active": "", "succeeded": "0-2", "failed": "3", "cancelled": ""}


def test_a_chunk_that_says_nothing_readable_fails_all_its_open_inputs():
    spec = make_spec(3, maxConcurrent=None, chunkSize=3)
    d = decide(spec, started(spec), units(bad(0, message="Traceback: out of memory")))
    assert d.status.failed_indexes == "0-2"


def test_a_succeeded_chunk_succeeds_every_open_input():
    spec = make_spec(3, maxConcurrent=None, chunkSize=3)
    d = decide(spec, started(spec), units(ok(0, message='{"succeeded":"0-2","failed":""}')))
    assert d.status.succeeded_indexes == "0-2" and d.status.phase == Phase.SUCCEEDED


# =========================================================================== adoption


def test_pods_the_status_does_not_record_are_adopted_not_duplicated():
    spec = make_spec(10, maxConcurrent=4)
    d = decide(spec, None, units(pv(6), pv(42)))
    assert 6 in IndexSet.parse(d.status.active_indexes)
    assert d.creates == [(0, 1), (1, 1), (2, 1)]  # 6 takes one of the 4 slots
    assert d.stops == ["g-42-1"]  # not an input of this batch
    assert d.status.launched == 7
    ev = next(e for e in d.of(Event) if e.reason == "Adopted")
    assert ev.type == "Warning" and "inputs 6" in ev.message
    follow = decide(spec, with_manifest(d.status), units(ok(6), pv(0), pv(1), pv(2)))
    assert follow.status.succeeded_indexes == "6" and (6, 1) not in follow.creates


def test_pods_of_recorded_inputs_are_not_adopted_but_stopped():
    spec = make_spec(3, maxConcurrent=None)
    d = decide(spec, started(spec), units(ok(0), pv(1), pv(2)))
    again = decide(spec, d.status, units(pv(0, 2), pv(1), pv(2)))
    assert again.stops == ["g-0-2"] and "Adopted" not in reasons(again)
    assert again.status.succeeded_indexes == "0"


def test_pods_deleted_after_their_outcome_was_recorded_are_never_relaunched():
    spec = make_spec(4, maxConcurrent=2)
    s = decide(spec, started(spec), units(ok(0), bad(1))).status
    assert s.active_indexes == "2-3"
    d = decide(spec, s, units(pv(2), pv(3)))  # 0 and 1 deleted after their TTL
    assert d.creates == [] and d.status.succeeded_indexes == "0"
    end = decide(spec, d.status, units(ok(2), ok(3)))
    assert end.status.phase == Phase.FAILED and end.creates == []
    after = decide(spec, end.status, {})
    assert after.actions == () and not after.write_status


# =========================================================================== conditions


def test_conditions_keep_transition_times_when_status_does_not_flip():
    spec = make_spec(5, maxConcurrent=2)
    s = started(spec)
    t1 = T0 + timedelta(seconds=10)
    s1 = decide(spec, s, units(pv(0), pv(1, phase="Pending")), t1).status
    assert cond(s1, "Running").status == "True"
    assert cond(s1, "Running").last_transition_time == "2024-05-01T12:00:10Z"
    assert cond(s1, "Complete").last_transition_time == "2024-05-01T12:00:00Z"
    s2 = decide(spec, s1, units(ok(0), pv(1)), T0 + timedelta(seconds=99)).status
    assert cond(s2, "Running").last_transition_time == "2024-05-01T12:00:10Z"


def test_other_conditions_are_kept():
    spec = make_spec(2)
    s = decide(spec, None).status
    s.conditions.append(Condition(type="ManifestWritten", status="False", reason="WriteFailed"))
    s2 = decide(spec, s, units(pv(0))).status
    assert any(c.type == "ManifestWritten" and c.reason == "WriteFailed" for c in s2.conditions)


def test_invalid_batch_fails_at_once_and_launches_nothing():
    d = invalid_batch(None, ["spec.inputs needs exactly one of count, items or grid"], T0)
    assert d.write_status and d.status.phase == "FAILED"
    assert d.status.message.startswith("Invalid batch: spec.inputs needs")
    failed = cond(d.status, "Failed")
    assert failed.status == "True" and failed.reason == "InvalidSpec"
    assert [type(a).__name__ for a in d.actions] == ["Event"]
    again = invalid_batch(d.status, ["other"], T0)  # an ended batch keeps its outcome
    assert not again.write_status and again.status.message == d.status.message


def test_with_condition_moves_transition_time_only_on_flips():
    t1 = T0 + timedelta(minutes=5)
    s1 = with_condition(KineticBatchStatus(), "ManifestWritten", "False", "WriteFailed", "x", T0)
    assert s1.conditions[-1].last_transition_time == "2024-05-01T12:00:00Z"
    assert with_condition(s1, "ManifestWritten", "False", "WriteFailed", "x", t1) is s1
    s2 = with_condition(s1, "ManifestWritten", "False", "WriteFailed", "again", t1)
    assert s2.conditions[-1].last_transition_time == "2024-05-01T12:00:00Z"
    s3 = with_condition(s2, "ManifestWritten", "True", "Written", "ok", t1)
    assert s3.conditions[-1].last_transition_time == "2024-05-01T12:05:00Z"
    assert len(s3.conditions) == 1


# =========================================================================== immutability


def test_immutable_change():
    spec = make_spec(10)
    for mutable in ({"max_concurrent": 3}, {"max_concurrent": None}, {"cancel": True}):
        assert immutable_change(spec, spec.model_copy(update=mutable)) is None
    assert immutable_change(spec, spec.model_copy(update={"cancel_indexes": "1-3"})) is None
    t = spec.model_copy(deep=True)
    t.template.accelerator = "gpu-l4"
    assert immutable_change(spec, t) == (
        "spec.template cannot change on an existing batch (only spec.maxConcurrent, "
        "spec.cancel and spec.cancelIndexes can): create a new batch instead"
    )
    msg = immutable_change(spec, make_spec(11, retries=1, failFast=True, chunkSize=2))
    assert msg.startswith("spec.inputs, spec.chunkSize, spec.retries, spec.failFast cannot change")
    assert "spec.tags" in immutable_change(spec, spec.model_copy(update={"tags": {"a": "b"}}))


def test_merge_mutable_keeps_the_accepted_spec():
    spec = make_spec(10)
    edited = make_spec(99, maxConcurrent=5, cancel=True, cancelIndexes="4")
    merged = merge_mutable(spec, edited)
    assert merged.inputs.count == 10 and merged.max_concurrent == 5 and merged.cancel
    assert merged.cancel_indexes == "4"


# =========================================================================== size


def _alternating(n: int, phase: Phase = Phase.FAILED) -> tuple[KineticBatchStatus, Recorded]:
    evens, odds = IndexSet(range(0, n, 2)), IndexSet(range(1, n, 2))
    status = KineticBatchStatus(
        phase=phase,
        total=n,
        counts=PhaseCounts(succeeded=len(evens), failed=len(odds)),
        progress=f"{len(evens)}/{n}",
        launched=n,
        succeeded_indexes=str(evens),
        failed_indexes=str(odds),
        manifest_uri="gs://b/batches/g/manifest.json",
    )
    return status, Recorded(evens, odds, IndexSet())


def test_compact_status_keeps_100k_alternating_outcomes_under_64_kib():
    full, recorded = _alternating(100_000)
    assert len(json.dumps(full.wire())) > 5 * KIB64  # far too big as it stands
    small = compact_status(full)
    assert small.truncated
    assert len(json.dumps(small.wire())) < KIB64
    assert small.counts == full.counts and small.phase == full.phase
    # What is left is a true prefix of each set, ending at a whole item.
    for name in ("succeeded_indexes", "failed_indexes"):
        cut = IndexSet.parse(getattr(small, name))
        assert cut and set(cut) <= set(IndexSet.parse(getattr(full, name)))
    # The decision sees every outcome again with `extra` (what the manifest header holds).
    d = decide(make_spec(100_000), small, extra=recorded)
    assert d.recorded.succeeded == recorded.succeeded and d.recorded.failed == recorded.failed
    assert d.actions == () and not d.write_status
    assert compact_status(KineticBatchStatus()) == KineticBatchStatus()


def test_a_running_batch_with_cut_ranges_relaunches_nothing_given_extra():
    n = 100_000
    full, recorded = _alternating(n - 10, Phase.RUNNING)
    full = full.model_copy(update={"total": n, "active_indexes": f"{n - 10}-{n - 1}"})
    small = compact_status(full)
    assert small.truncated
    obs = units(*(pv(i) for i in range(n - 10, n)))
    d = decide(make_spec(n, maxConcurrent=10), small, obs, extra=recorded)
    assert d.creates == [] and d.stops == []
    assert d.status.counts.succeeded == len(recorded.succeeded)
    assert d.status.counts.failed == len(recorded.failed)
    assert d.status.counts.running == 10
    assert len(json.dumps(compact_status(d.status).wire())) < KIB64


@pytest.mark.timeout(120)
@pytest.mark.parametrize("done", [10_000, 50_000, 99_980])
def test_status_stays_under_64_kib_throughout_a_100k_alternating_run(done):
    """At any point of a 100,000-input run whose outcomes alternate, the status written
    (compacted) is under 64 KiB, and the decision still sees every outcome."""
    n, live = 100_000, 20
    spec = make_spec(n, maxConcurrent=live)
    full, recorded = _alternating(done, Phase.RUNNING)
    active = IndexSet.range(done, done + live)
    status = compact_status(
        full.model_copy(update={"total": n, "active_indexes": str(active), "launched": done + live})
    )
    assert len(json.dumps(status.wire())) < KIB64
    obs = units(*(ok(i) if i % 2 == 0 else bad(i) for i in active))
    d = decide(spec, status, obs, extra=recorded)
    assert d.recorded.terminal == IndexSet.range(0, done + live)
    assert d.creates == [(i, 1) for i in range(done + live, min(n, done + 2 * live))]
    written = compact_status(d.status)
    assert written.truncated and len(json.dumps(written.wire())) < KIB64


@pytest.mark.timeout(60)
def test_one_decision_of_a_big_batch_with_scattered_outcomes():
    """10,000 inputs, half done with alternating outcomes, 500 Pods ending at once: every
    outcome is counted and every free slot refilled. (How long it takes is measured by
    `make bench-scale`, not asserted here; the timeout only catches a runaway.)"""
    n, live = 10_000, 500
    half = n // 2
    spec = make_spec(n, maxConcurrent=live)
    full, recorded = _alternating(half, Phase.RUNNING)
    active = IndexSet.range(half, half + live)
    status = full.model_copy(
        update={"total": n, "active_indexes": str(active), "launched": half + live}
    )
    obs = units(*(ok(i) if i % 2 == 0 else bad(i) for i in active))
    d = decide(spec, status, obs, extra=recorded)
    assert d.status.counts.succeeded + d.status.counts.failed == half + live
    assert len(d.creates) == live


def test_a_fragmented_active_set_stays_under_64_kib():
    """maxConcurrent null: all 100,000 inputs were launched (200 per decision) and every
    other one has finished, so activeIndexes is '0,2,4,...'. The status must stay small
    whatever the pattern; activeIndexes is the one range `compact_status` leaves whole."""
    n = 100_000
    running, done = IndexSet(range(0, n, 2)), IndexSet(range(1, n, 2))
    status = KineticBatchStatus(
        phase=Phase.RUNNING,
        total=n,
        counts=PhaseCounts(running=len(running), succeeded=len(done)),
        launched=n,
        active_indexes=str(running),
        succeeded_indexes=str(done),
    )
    size = len(json.dumps(compact_status(status).wire()))
    assert size < KIB64, f"the status is {size} bytes"


def test_an_input_whose_image_cannot_be_pulled_fails_after_its_retries():
    """The decision fails attempt 1 (ImagePullBackOff past the grace) and stops its Pod,
    which then reads as deleted: remembered, the verdict stands (`settled_units`), so the
    input fails after `retries: 1` instead of retrying for ever as free disruptions."""
    spec = make_spec(1, retries=1)
    status = started(spec)
    waited = (T0 - timedelta(seconds=40)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pulling = {"waiting_reason": "ImagePullBackOff", "start_time": waited, "phase": "Pending"}
    first = decide(spec, status, units(pv(0, 1, **pulling)))
    assert (first.creates, first.stops) == ([(0, 2)], ["g-0-1"])
    ended = settled_units(first.plans)
    assert ended[0][1].outcome == "failure"
    obs = {
        0: UnitObservation(
            {1: pv(0, 1, deleting=True, **pulling), 2: pv(0, 2, **pulling)}, ended=ended[0]
        )
    }
    second = decide(spec, first.status, obs)
    assert ranges(second.status)["failed"] == "0" and second.creates == []
    assert second.plans[0].failures == 2 and second.plans[0].disruptions == 0
