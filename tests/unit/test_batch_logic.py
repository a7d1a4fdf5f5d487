"""The KineticBatch controller's pure decisions.

Two kinds of tests: focused ones on a single decision, and a small simulated
API server (`Sim`) that applies decisions the way the handler layer must —
conditional status write first, then actions — while children progress,
finish, get cleaned up, the operator crashes between reserve and create, and
stale reconciles race. Invariants are checked after every step.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from kinetic.ranges import IndexSet
from kinetic.resources import KineticBatchSpec, KineticBatchStatus, Phase
from kinetic_operator.batch_logic import (
    Cancel,
    ChildObservation,
    Event,
    Launch,
    WriteManifest,
    decide_batch,
    immutable_change,
    merge_mutable,
    observe_child,
)

SHA = "a" * 64
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def make_spec(n: int = 10, **extra) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {"function": {"payloadURI": "gs://b/f.pkl", "sha256": SHA}},
            "inputs": {"count": n, "uriPrefix": "gs://b/inputs"},
            **extra,
        }
    )


def obs(phase: Phase = Phase.PENDING, **kw) -> ChildObservation:
    return ChildObservation(phase=phase, **kw)


def ranges(status: KineticBatchStatus) -> dict[str, str]:
    return {
        "active": status.active_indexes,
        "succeeded": status.succeeded_indexes,
        "failed": status.failed_indexes,
        "cancelled": status.cancelled_indexes,
    }


def cond(status: KineticBatchStatus, ctype: str):
    return next(c for c in status.conditions if c.type == ctype)


def with_manifest(status: KineticBatchStatus) -> KineticBatchStatus:
    """What the handler layer does once the first manifest write succeeded."""
    return status.model_copy(update={"manifest_uri": "gs://b/batches/g/manifest.json"})


# =========================================================================== single decisions


def test_first_decision_reserves_up_to_the_limit_and_writes_the_manifest_first():
    spec = make_spec(10, maxConcurrent=3)
    d = decide_batch(spec, None, {}, T0, generation=1)
    assert d.write_status
    assert [type(a) for a in d.actions[:2]] == [WriteManifest, Launch]
    assert d.actions[0] == WriteManifest(urgent=True, blocking=True)
    assert d.launch == IndexSet.range(0, 3)
    s = d.status
    assert s.launched == 3 and s.active_indexes == "0-2"
    assert s.total == 10 and s.progress == "0/10"
    assert s.phase == Phase.PENDING
    assert s.counts.pending == 10 and s.counts.running == 0
    assert s.start_time == "2024-05-01T12:00:00Z" and s.completion_time is None
    assert s.observed_generation == 1
    assert cond(s, "Running").status == "False" and cond(s, "Running").reason == "Pending"
    assert cond(s, "Complete").status == "False" and cond(s, "Failed").status == "False"
    assert any(isinstance(e, Event) and e.reason == "Launching" for e in d.actions)


def test_manifest_write_is_not_blocking_once_it_exists():
    spec = make_spec(10, maxConcurrent=3)
    s1 = with_manifest(decide_batch(spec, None, {}, T0).status)
    children = {0: obs(Phase.SUCCEEDED, attempts=1), 1: obs(Phase.RUNNING), 2: obs()}
    d = decide_batch(spec, s1, children, T0)
    assert d.launch == IndexSet([3])
    assert WriteManifest(urgent=False, blocking=False) in d.actions
    assert d.actions.index(d.of(Launch)[0]) < d.actions.index(d.of(WriteManifest)[0])


def test_nothing_changes_nothing_happens():
    spec = make_spec(10, maxConcurrent=3)
    s1 = with_manifest(decide_batch(spec, None, {}, T0).status)
    children = {i: obs(Phase.RUNNING) for i in range(3)}
    d1 = decide_batch(spec, s1, children, T0 + timedelta(seconds=1))
    d2 = decide_batch(spec, d1.status, children, T0 + timedelta(seconds=9))
    assert d1.status.phase == Phase.RUNNING
    assert d2.actions == () and not d2.write_status
    assert d2.status.wire() == d1.status.wire()


def test_max_concurrent_none_launches_everything():
    d = decide_batch(make_spec(250, maxConcurrent=None), None, {}, T0)
    assert d.launch == IndexSet.range(0, 250) and d.status.launched == 250
    assert not d.more


def test_max_launches_paces_creation():
    spec = make_spec(250, maxConcurrent=None)
    d = decide_batch(spec, None, {}, T0, max_launches=100)
    assert d.launch == IndexSet.range(0, 100) and d.more
    d2 = decide_batch(
        spec, with_manifest(d.status), {i: obs() for i in range(100)}, T0, max_launches=100
    )
    assert d2.launch == IndexSet.range(100, 200) and d2.more
    assert d2.status.active_indexes == "0-199"


def test_free_slots_are_refilled_in_index_order():
    spec = make_spec(10, maxConcurrent=3)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    children = {0: obs(Phase.RUNNING), 1: obs(Phase.SUCCEEDED), 2: obs(Phase.FAILED)}
    d = decide_batch(spec, s, children, T0)
    assert d.launch == IndexSet([3, 4])
    assert ranges(d.status) == {"active": "0,3-4", "succeeded": "1", "failed": "2", "cancelled": ""}
    assert d.status.counts.model_dump() == {
        "pending": 7,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert d.status.progress == "1/10" and d.status.launched == 5


def test_retries_are_the_childs_business():
    """A child retrying is still one active input: no relaunch, no failure, no extra slot."""
    spec = make_spec(4, maxConcurrent=2, retries=2, failFast=True)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    retrying = {0: obs(Phase.RUNNING, attempts=3), 1: obs(Phase.PENDING, attempts=2)}
    d = decide_batch(spec, s, retrying, T0)
    assert d.launch == IndexSet() and d.status.counts.failed == 0
    assert d.status.active_indexes == "0-1"
    # Only the terminal phase counts: now it trips fail-fast.
    d = decide_batch(spec, s, {0: obs(Phase.FAILED, attempts=3), 1: obs(Phase.RUNNING)}, T0)
    assert d.status.failed_indexes == "0" and d.launch == IndexSet()


def test_all_succeeded():
    spec = make_spec(3, maxConcurrent=None)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    done = {i: obs(Phase.SUCCEEDED, attempts=1) for i in range(3)}
    d = decide_batch(spec, s, done, T0 + timedelta(minutes=5))
    st = d.status
    assert st.phase == Phase.SUCCEEDED and st.progress == "3/3"
    assert st.completion_time == "2024-05-01T12:05:00Z"
    assert cond(st, "Complete").status == "True" and cond(st, "Complete").reason == "AllSucceeded"
    assert cond(st, "Failed").status == "False" and cond(st, "Running").status == "False"
    assert WriteManifest(urgent=True) in d.actions
    assert [e.reason for e in d.of(Event)] == ["Succeeded"]
    assert st.active_indexes == "" and st.succeeded_indexes == "0-2"


def test_zero_inputs_succeed_at_once():
    spec = KineticBatchSpec.model_validate(
        {"template": {"container": {"command": ["true"]}}, "inputs": {"items": []}}
    )
    d = decide_batch(spec, None, {}, T0)
    assert d.status.phase == Phase.SUCCEEDED and d.status.progress == "0/0"
    assert d.launch == IndexSet()


def test_failures_without_fail_fast_end_failed():
    spec = make_spec(3, maxConcurrent=None)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    d = decide_batch(
        spec,
        s,
        {
            0: obs(Phase.SUCCEEDED),
            1: obs(Phase.FAILED, attempts=2, message="boom"),
            2: obs(Phase.SUCCEEDED),
        },
        T0,
    )
    st = d.status
    assert st.phase == Phase.FAILED
    assert cond(st, "Failed").status == "True" and cond(st, "Failed").reason == "InputsFailed"
    assert cond(st, "Complete").status == "False"
    failed = [e for e in d.of(Event) if e.reason == "InputsFailed"]
    assert failed and "Input 1 failed after 2 attempts: boom" in failed[0].message


# --------------------------------------------------------------------------- the fail-fast table


def _first_failure(fail_fast: bool, cancel_running: bool):
    """6 inputs, 3 at a time; input 0 has failed, 1 runs, 2 is reserved but not seen yet."""
    spec = make_spec(6, maxConcurrent=3, failFast=fail_fast, cancelRunningOnFail=cancel_running)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    assert s.active_indexes == "0-2"
    children = {0: obs(Phase.FAILED, attempts=1), 1: obs(Phase.RUNNING)}
    return spec, decide_batch(spec, s, children, T0)


@pytest.mark.parametrize("cancel_running", [False, True], ids=["row1", "row4"])
def test_fail_fast_off_everything_continues(cancel_running):
    """Rows 1 and 4: cancelRunningOnFail without failFast has no effect."""
    _, d = _first_failure(False, cancel_running)
    assert d.launch == IndexSet([2, 3])  # 2 re-created (never seen), 3 fills 0's slot
    assert d.cancel == IndexSet()
    assert ranges(d.status) == {"active": "1-3", "succeeded": "", "failed": "0", "cancelled": ""}
    assert d.status.phase == Phase.RUNNING
    assert not any(e.reason == "FailFast" for e in d.of(Event))


def test_fail_fast_row2_stops_launching_and_lets_running_finish():
    spec, d = _first_failure(True, False)
    assert d.launch == IndexSet([2])  # reserved before the failure: it is already launched
    assert d.cancel == IndexSet()
    assert ranges(d.status) == {"active": "1-2", "succeeded": "", "failed": "0", "cancelled": "3-5"}
    assert d.status.phase == Phase.RUNNING
    assert cond(d.status, "Running").reason == "FailFast"
    ev = [e for e in d.of(Event) if e.reason == "FailFast"]
    assert ev and ev[0].type == "Warning" and "3 never launched" in ev[0].message
    assert "waiting for 2 running to finish" in ev[0].message
    # The running ones finish; the batch ends FAILED with reason FailFast.
    end = decide_batch(
        spec, d.status, {0: obs(Phase.FAILED), 1: obs(Phase.SUCCEEDED), 2: obs(Phase.SUCCEEDED)}, T0
    )
    assert end.status.phase == Phase.FAILED
    assert cond(end.status, "Failed").reason == "FailFast"
    assert end.status.counts.model_dump() == {
        "pending": 0,
        "running": 0,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 3,
    }


def test_fail_fast_row3_cancels_running_siblings():
    spec, d = _first_failure(True, True)
    assert d.launch == IndexSet()  # 2 was never created: it is not created now
    assert d.cancel == IndexSet([1])
    assert ranges(d.status) == {"active": "1", "succeeded": "", "failed": "0", "cancelled": "2-5"}
    assert "cancelling 1 running" in next(e for e in d.of(Event) if e.reason == "FailFast").message
    # Already asked: not asked again.
    again = decide_batch(
        spec, d.status, {0: obs(Phase.FAILED), 1: obs(Phase.RUNNING, cancel_requested=True)}, T0
    )
    assert again.cancel == IndexSet() and not again.of(Event)
    end = decide_batch(spec, again.status, {0: obs(Phase.FAILED), 1: obs(Phase.CANCELLED)}, T0)
    assert end.status.phase == Phase.FAILED and cond(end.status, "Failed").reason == "FailFast"
    assert end.status.cancelled_indexes == "1-5"


def test_a_child_that_appears_after_its_index_was_cancelled_is_stopped():
    spec, d = _first_failure(True, True)
    late = {0: obs(Phase.FAILED), 1: obs(Phase.RUNNING, cancel_requested=True), 2: obs()}
    again = decide_batch(spec, d.status, late, T0)
    assert again.cancel == IndexSet([2]) and again.launch == IndexSet()
    assert again.status.cancelled_indexes == "2-5"  # the recorded outcome stays


def test_submission_failures_are_failures_from_the_start():
    spec = make_spec(
        5,
        maxConcurrent=None,
        submissionFailures=[
            {"index": 1, "message": "cannot pickle"},
            {"index": 3, "message": "too big"},
        ],
    )
    d = decide_batch(spec, None, {}, T0)
    assert d.launch == IndexSet([0, 2, 4])
    assert d.status.failed_indexes == "1,3" and d.status.counts.failed == 2
    ev = next(e for e in d.of(Event) if e.reason == "SubmissionFailed")
    assert "Inputs 1,3 could not be submitted" in ev.message and "cannot pickle" in ev.message
    assert d.status.phase == Phase.PENDING  # submission failures alone are not progress
    again = decide_batch(spec, with_manifest(d.status), {i: obs() for i in (0, 2, 4)}, T0)
    assert not any(e.reason == "SubmissionFailed" for e in again.of(Event))


def test_submission_failure_trips_fail_fast_before_anything_launches():
    spec = make_spec(4, failFast=True, submissionFailures=[{"index": 2, "message": "x"}])
    d = decide_batch(spec, None, {}, T0)
    assert d.launch == IndexSet()
    assert d.status.phase == Phase.FAILED
    assert ranges(d.status) == {"active": "", "succeeded": "", "failed": "2", "cancelled": "0-1,3"}
    assert d.status.start_time is None and d.status.completion_time is not None
    assert WriteManifest(urgent=True) in d.actions


# --------------------------------------------------------------------------- cancel


def test_spec_cancel_stops_launching_and_cancels_every_running_child():
    spec = make_spec(8, maxConcurrent=3)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    cancel = spec.model_copy(update={"cancel": True})
    children = {
        0: obs(Phase.SUCCEEDED),
        1: obs(Phase.RUNNING),
        2: obs(Phase.PENDING, cancel_requested=True),
    }
    d = decide_batch(cancel, s, children, T0)
    assert d.launch == IndexSet()
    assert d.cancel == IndexSet([1])
    assert ranges(d.status) == {"active": "1-2", "succeeded": "0", "failed": "", "cancelled": "3-7"}
    assert cond(d.status, "Running").reason == "Cancelling"
    assert any(e.reason == "Cancelling" for e in d.of(Event))
    end = decide_batch(
        cancel,
        d.status,
        {0: obs(Phase.SUCCEEDED), 1: obs(Phase.CANCELLED), 2: obs(Phase.CANCELLED)},
        T0,
    )
    st = end.status
    assert st.phase == Phase.CANCELLED
    assert cond(st, "Failed").status == "True" and cond(st, "Failed").reason == "Cancelled"
    assert st.counts.cancelled == 7 and st.counts.succeeded == 1


def test_cancel_wins_over_failures_for_the_phase():
    spec = make_spec(3, maxConcurrent=None, cancel=True)
    s = with_manifest(decide_batch(make_spec(3, maxConcurrent=None), None, {}, T0).status)
    d = decide_batch(
        spec, s, {0: obs(Phase.FAILED), 1: obs(Phase.CANCELLED), 2: obs(Phase.SUCCEEDED)}, T0
    )
    assert d.status.phase == Phase.CANCELLED and "1 failed" in d.status.message


def test_child_cancelled_on_its_own_ends_the_batch_cancelled():
    spec = make_spec(2, maxConcurrent=None)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    d = decide_batch(spec, s, {0: obs(Phase.SUCCEEDED), 1: obs(Phase.CANCELLED)}, T0)
    assert d.status.phase == Phase.CANCELLED
    assert cond(d.status, "Failed").reason == "ChildrenCancelled"


def test_a_finished_batch_is_final():
    spec = make_spec(2, maxConcurrent=None)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    done = decide_batch(spec, s, {0: obs(Phase.SUCCEEDED), 1: obs(Phase.SUCCEEDED)}, T0).status
    later = decide_batch(spec.model_copy(update={"cancel": True}), done, {}, T0 + timedelta(1))
    assert later.actions == () and not later.write_status and later.status == done
    bumped = decide_batch(spec, done, {}, T0, generation=7)
    assert bumped.write_status and bumped.status.observed_generation == 7
    stray = decide_batch(spec, done, {5: obs(Phase.RUNNING)}, T0)
    assert stray.cancel == IndexSet([5])


# ------------------------------------------------------------- cleanup, crashes, adoption


def test_children_deleted_by_cleanup_are_never_relaunched():
    spec = make_spec(4, maxConcurrent=2)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    s = decide_batch(spec, s, {0: obs(Phase.SUCCEEDED), 1: obs(Phase.FAILED)}, T0).status
    assert s.active_indexes == "2-3"
    # Both finished children are deleted (results(cleanup=True)); now they are just absent.
    d = decide_batch(spec, s, {2: obs(Phase.RUNNING), 3: obs(Phase.RUNNING)}, T0)
    assert d.launch == IndexSet() and d.status.succeeded_indexes == "0"
    end = decide_batch(spec, d.status, {2: obs(Phase.SUCCEEDED), 3: obs(Phase.SUCCEEDED)}, T0)
    assert end.status.phase == Phase.FAILED and end.launch == IndexSet()
    # Everything cleaned up: the ranges remember every outcome, nothing is launched.
    after = decide_batch(spec, end.status, {}, T0)
    assert after.actions == () and not after.write_status
    # Even before the batch ends, a recorded index stays recorded.
    mid = decide_batch(spec, d.status, {}, T0)
    assert mid.launch == IndexSet([2, 3])  # active, never seen ended: ensure they exist
    assert not ({0, 1} & set(mid.launch))


def test_crash_between_reserve_and_create_is_repaired():
    spec = make_spec(6, maxConcurrent=2)
    reserved = decide_batch(spec, None, {}, T0)
    # The status write committed, then the operator died: no manifest, no children.
    d = decide_batch(spec, reserved.status, {}, T0 + timedelta(seconds=30))
    assert d.launch == IndexSet([0, 1])
    assert d.actions[0] == WriteManifest(urgent=True, blocking=True)
    assert d.write_status  # creates only after a conditional write on this status
    assert d.status.active_indexes == "0-1" and d.status.launched == 2
    assert d.status.start_time == reserved.status.start_time


def test_a_child_deleted_while_running_is_recorded_cancelled_not_rerun():
    spec = make_spec(3, maxConcurrent=3)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    d = decide_batch(spec, s, {0: obs(Phase.RUNNING, present=False), 1: obs(), 2: obs()}, T0)
    assert d.launch == IndexSet() and d.status.cancelled_indexes == "0"
    # a tombstone of a finished child records its outcome
    d = decide_batch(spec, d.status, {1: obs(Phase.SUCCEEDED, present=False), 2: obs()}, T0)
    assert d.status.succeeded_indexes == "1"


def test_unknown_children_are_adopted_not_duplicated():
    spec = make_spec(10, maxConcurrent=4)
    # The status was lost (or the child was made by hand): child 6 exists and runs.
    d = decide_batch(spec, None, {6: obs(Phase.RUNNING), 42: obs(Phase.RUNNING)}, T0)
    assert 6 in IndexSet.parse(d.status.active_indexes)
    assert d.launch == IndexSet([0, 1, 2])  # 6 takes one of the 4 slots; 42 is out of range
    assert d.status.launched == 7
    assert any(e.reason == "Adopted" and "inputs 6" in e.message for e in d.of(Event))


def test_max_concurrent_can_change_mid_run():
    spec = make_spec(20, maxConcurrent=2)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    running = {0: obs(Phase.RUNNING), 1: obs(Phase.RUNNING)}
    wider = decide_batch(spec.model_copy(update={"max_concurrent": 5}), s, running, T0)
    assert wider.launch == IndexSet([2, 3, 4])
    five = {i: obs(Phase.RUNNING) for i in range(5)}
    narrow = spec.model_copy(update={"max_concurrent": 2})
    d = decide_batch(narrow, wider.status, five, T0)
    assert d.launch == IndexSet() and d.cancel == IndexSet()  # nothing is cancelled to shrink
    five.update({0: obs(Phase.SUCCEEDED), 1: obs(Phase.SUCCEEDED), 2: obs(Phase.SUCCEEDED)})
    d = decide_batch(narrow, d.status, five, T0)
    assert d.launch == IndexSet()  # 2 still running, at the new limit
    five[3] = obs(Phase.SUCCEEDED)
    assert decide_batch(narrow, d.status, five, T0).launch == IndexSet([5])
    unlimited = decide_batch(spec.model_copy(update={"max_concurrent": None}), d.status, five, T0)
    assert unlimited.launch == IndexSet.range(5, 20)


def test_conditions_keep_transition_times_when_status_does_not_flip():
    spec = make_spec(5, maxConcurrent=2)
    s = with_manifest(decide_batch(spec, None, {}, T0).status)
    t1 = T0 + timedelta(seconds=10)
    s1 = decide_batch(spec, s, {0: obs(Phase.RUNNING), 1: obs()}, t1).status
    assert cond(s1, "Running").status == "True"
    assert cond(s1, "Running").last_transition_time == "2024-05-01T12:00:10Z"
    assert cond(s1, "Complete").last_transition_time == "2024-05-01T12:00:00Z"
    s2 = decide_batch(
        spec, s1, {0: obs(Phase.SUCCEEDED), 1: obs(Phase.RUNNING)}, T0 + timedelta(seconds=99)
    ).status
    assert cond(s2, "Running").last_transition_time == "2024-05-01T12:00:10Z"


def test_other_conditions_are_kept():
    from kinetic.resources import Condition

    spec = make_spec(2)
    s = decide_batch(spec, None, {}, T0).status
    s.conditions.append(Condition(type="ManifestWritten", status="False", reason="WriteFailed"))
    s2 = decide_batch(spec, s, {0: obs(Phase.RUNNING)}, T0).status
    assert any(c.type == "ManifestWritten" and c.reason == "WriteFailed" for c in s2.conditions)


def test_naive_time_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        decide_batch(make_spec(1), None, {}, datetime(2024, 1, 1))


# --------------------------------------------------------------------------- immutability


def test_immutable_change():
    spec = make_spec(10)
    assert immutable_change(spec, spec.model_copy(update={"max_concurrent": 3})) is None
    assert immutable_change(spec, spec.model_copy(update={"max_concurrent": None})) is None
    assert immutable_change(spec, spec.model_copy(update={"cancel": True})) is None
    t = spec.model_copy(deep=True)
    t.template.accelerator = "gpu-l4"
    assert immutable_change(spec, t) == (
        "spec.template cannot change on an existing batch (only spec.maxConcurrent and "
        "spec.cancel can): create a new batch instead"
    )
    many = make_spec(11, retries=1, failFast=True)
    msg = immutable_change(spec, many)
    assert msg.startswith("spec.inputs, spec.retries, spec.failFast cannot change")
    tags = spec.model_copy(update={"tags": {"a": "b"}})
    assert "spec.tags" in immutable_change(spec, tags)


def test_merge_mutable_keeps_the_accepted_spec():
    spec = make_spec(10)
    edited = make_spec(99, maxConcurrent=5, cancel=True)
    merged = merge_mutable(spec, edited)
    assert merged.inputs.count == 10 and merged.max_concurrent == 5 and merged.cancel


# --------------------------------------------------------------------------- observe_child


def test_observe_child():
    body = {
        "metadata": {"name": "g-3", "labels": {"kinetic.dev/batch": "g", "kinetic.dev/index": "3"}},
        "spec": {"cancel": True},
        "status": {"phase": "RUNNING", "attempt": 2, "message": "retrying"},
    }
    assert observe_child(body) == (3, ChildObservation(Phase.RUNNING, True, 2, True, "retrying"))
    fresh = {"metadata": {"labels": {"kinetic.dev/index": "0"}}}
    assert observe_child(fresh) == (0, ChildObservation(Phase.PENDING))
    for bad in ("-1", "x", "01", "", None):
        assert observe_child({"metadata": {"labels": {"kinetic.dev/index": bad}}}) is None
    weird = {"metadata": {"labels": {"kinetic.dev/index": "1"}}, "status": {"phase": "??"}}
    assert observe_child(weird)[1].phase == Phase.PENDING


# =========================================================================== simulation


@dataclass
class Child:
    phase: Phase = Phase.PENDING
    attempts: int = 0
    cancel: bool = False


@dataclass
class Sim:
    """A tiny API server: a batch status with a resourceVersion and child objects."""

    spec: KineticBatchSpec
    rng: random.Random
    failing: set[int] = field(default_factory=set)
    status: KineticBatchStatus | None = None
    rv: int = 0
    children: dict[int, Child] = field(default_factory=dict)
    created: Counter = field(default_factory=Counter)
    runs: Counter = field(default_factory=Counter)
    clock: datetime = T0
    max_active: int = 0
    conflicts: int = 0
    reserved_after_stop: list[int] = field(default_factory=list)
    cap: int | None = None  # the live-children bound to check, when not the spec's own

    def observations(self, lag: bool = False) -> dict[int, ChildObservation]:
        """What the Kopf index holds; with ``lag`` some children are not in it yet."""
        return {
            i: ChildObservation(c.phase, True, c.attempts, c.cancel)
            for i, c in self.children.items()
            if not (lag and self.rng.random() < 0.3)
        }

    def reconcile(
        self,
        *,
        based_on: tuple[int, KineticBatchStatus | None] | None = None,
        crash_after_write: bool = False,
        max_launches: int | None = None,
        lag: bool = False,
    ) -> str:
        rv, status = based_on if based_on is not None else (self.rv, self.status)
        self.clock += timedelta(seconds=1)
        d = decide_batch(
            self.spec, status, self.observations(lag), self.clock, max_launches=max_launches
        )
        if d.write_status:
            if rv != self.rv:  # the conditional PATCH: 409 Conflict, nothing else runs
                self.conflicts += 1
                return "conflict"
            self._check_reserve(self.status, d.status)
            self.status = d.status
            self.rv += 1
        if crash_after_write:
            return "crash"
        for action in d.actions:
            if isinstance(action, WriteManifest):
                if self.status.manifest_uri is None:
                    self.status = with_manifest(self.status)
                    self.rv += 1
            elif isinstance(action, Launch):
                for i in action.indexes:
                    if i not in self.children:  # else AlreadyExists
                        live = sum(1 for c in self.children.values() if not c.phase.terminal)
                        if self.spec.max_concurrent is not None:
                            assert live < self.spec.max_concurrent, "launched beyond the limit"
                        self.children[i] = Child()
                        self.created[i] += 1
            elif isinstance(action, Cancel):
                for i in action.indexes:
                    self.children[i].cancel = True
        s = self.status
        stop_running = self.spec.cancel or (
            self.spec.fail_fast and self.spec.cancel_running_on_fail and bool(s.failed_indexes)
        )
        if stop_running and not lag:
            live = [i for i, c in self.children.items() if not c.phase.terminal]
            assert all(self.children[i].cancel for i in live), "a running sibling was not cancelled"
        self.check()
        return "ok"

    def _check_reserve(self, old: KineticBatchStatus | None, new: KineticBatchStatus) -> None:
        """Once a failure trips fail-fast (or cancel is set), nothing new is reserved."""
        if old is None:
            return
        stopped = self.spec.cancel or (self.spec.fail_fast and bool(old.failed_indexes))
        if stopped:
            grown = IndexSet.parse(new.active_indexes) - IndexSet.parse(old.active_indexes)
            self.reserved_after_stop.extend(grown)

    def step_child(self) -> None:
        live = [i for i, c in self.children.items() if not c.phase.terminal]
        if not live:
            return
        i = self.rng.choice(live)
        c = self.children[i]
        if c.cancel:
            c.phase = Phase.CANCELLED
        elif c.phase is Phase.PENDING:
            c.phase, c.attempts = Phase.RUNNING, 1
            self.runs[i] += 1
        else:
            # Retries happen inside the child: the batch only ever sees the end.
            c.attempts = 1 + self.rng.randrange(self.spec.retries + 1)
            c.phase = Phase.FAILED if i in self.failing else Phase.SUCCEEDED
        self.check()

    def cleanup(self) -> None:
        """results(cleanup=True): delete children whose outcome the status has recorded."""
        if self.status is None:
            return
        done = (
            IndexSet.parse(self.status.succeeded_indexes)
            | IndexSet.parse(self.status.failed_indexes)
            | IndexSet.parse(self.status.cancelled_indexes)
        )
        for i in [i for i in self.children if i in done and self.children[i].phase.terminal]:
            if self.rng.random() < 0.5:
                del self.children[i]

    def check(self) -> None:
        active = sum(1 for c in self.children.values() if not c.phase.terminal)
        self.max_active = max(self.max_active, active)
        cap = self.cap if self.cap is not None else self.spec.max_concurrent
        if cap is not None:
            assert active <= cap, (active, cap)
        assert all(n == 1 for n in self.created.values()), "a child was created twice"
        assert all(n == 1 for n in self.runs.values()), "an input ran twice"
        if self.status is not None:
            s = self.status
            sets = [
                IndexSet.parse(x)
                for x in (
                    s.active_indexes,
                    s.succeeded_indexes,
                    s.failed_indexes,
                    s.cancelled_indexes,
                )
            ]
            for a in range(4):
                for b in range(a + 1, 4):
                    assert sets[a].isdisjoint(sets[b]), s
            assert s.counts.succeeded == len(sets[1]) and s.counts.failed == len(sets[2])
            assert s.counts.cancelled == len(sets[3])
            c = s.counts
            assert c.pending + c.running + c.succeeded + c.failed + c.cancelled == s.total

    def run(self, *, chaos: bool = True, limit: int = 20_000) -> None:
        old_snapshot = (self.rv, self.status)
        for _ in range(limit):
            r = self.rng.random()
            if chaos and r < 0.05:
                self.reconcile(crash_after_write=True)
            elif chaos and r < 0.10:
                self.reconcile(based_on=old_snapshot)  # a stale reconcile racing
            elif chaos and r < 0.15:
                self.cleanup()
            elif chaos and r < 0.22:
                self.reconcile(lag=True)  # the child index has not caught up
            elif r < 0.55:
                self.step_child()
            else:
                old_snapshot = (self.rv, self.status)
                self.reconcile()
            if self.finished():
                return
        raise AssertionError(f"batch did not finish: {self.status}")

    def finished(self) -> bool:
        return (
            self.status is not None
            and Phase(self.status.phase).terminal
            and all(c.phase.terminal for c in self.children.values())
        )


def _sim(seed: int, n: int, *, failing=(), chaos=True, **extra) -> Sim:
    rng = random.Random(seed)
    sim = Sim(spec=make_spec(n, **extra), rng=rng, failing=set(failing))
    sim.run(chaos=chaos)
    return sim


def _final_sets(sim: Sim) -> dict[str, IndexSet]:
    s = sim.status
    return {k: IndexSet.parse(v) for k, v in ranges(s).items()}


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("limit", [1, 3, 7, None])
def test_simulated_runs_never_exceed_the_limit_and_run_each_input_once(seed, limit):
    rng = random.Random(seed * 1000 + (limit or 0))
    n = rng.randrange(0, 40)
    failing = {i for i in range(n) if rng.random() < 0.1}
    sim = _sim(seed, n, failing=failing, maxConcurrent=limit, retries=rng.randrange(3))
    sets = _final_sets(sim)
    assert sets["active"] == IndexSet()
    assert sets["failed"] == IndexSet(failing)
    assert sets["succeeded"] == IndexSet.range(0, n) - failing
    assert set(sim.created) == set(range(n))
    if limit is not None and n > limit and not failing:
        assert sim.max_active <= limit
    expected = Phase.FAILED if failing else Phase.SUCCEEDED
    assert sim.status.phase == expected
    assert sim.status.progress == f"{n - len(failing)}/{n}"


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(
    ("fail_fast", "cancel_running"),
    [(False, False), (True, False), (True, True), (False, True)],
    ids=["row1-continue", "row2-stop-launching", "row3-cancel-running", "row4-no-effect"],
)
def test_simulated_fail_fast_table(seed, fail_fast, cancel_running):
    rng = random.Random(seed)
    n = 30
    failing = {rng.randrange(n) for _ in range(rng.randrange(1, 4))}
    sim = _sim(
        seed,
        n,
        failing=failing,
        maxConcurrent=4,
        failFast=fail_fast,
        cancelRunningOnFail=cancel_running,
    )
    sets = _final_sets(sim)
    assert sim.status.phase == Phase.FAILED
    everything = IndexSet.range(0, n)
    assert sets["succeeded"] | sets["failed"] | sets["cancelled"] == everything
    if not fail_fast:
        # Rows 1 and 4: every input ran, failures collected at the end.
        assert sets["failed"] == IndexSet(failing) and sets["cancelled"] == IndexSet()
        assert set(sim.created) == set(range(n))
        assert cond(sim.status, "Failed").reason == "InputsFailed"
        return
    assert cond(sim.status, "Failed").reason == "FailFast"
    assert sim.reserved_after_stop == []  # no launch after the first recorded failure
    assert set(sets["failed"]) <= failing
    never = everything - IndexSet(sim.created)
    assert set(never) <= set(sets["cancelled"])  # never launched: counted cancelled
    if min(failing) < n - 8:  # an early failure: some inputs can never have been launched
        assert never
    cancelled_children = {i for i, c in sim.children.items() if c.cancel}
    if not cancel_running:
        assert not cancelled_children  # row 2: running children finish on their own
    # Row 3 is checked on every reconcile in Sim.reconcile: once fail-fast has
    # tripped, every live child has been asked to stop.


def test_simulated_cancel_mid_run():
    rng = random.Random(5)
    sim = Sim(spec=make_spec(50, maxConcurrent=5), rng=rng)
    for _ in range(60):
        sim.reconcile()
        sim.step_child()
    sim.spec = sim.spec.model_copy(update={"cancel": True})
    sim.reconcile()
    assert all(c.cancel for c in sim.children.values() if not c.phase.terminal)
    sim.run(chaos=True)
    assert sim.status.phase == Phase.CANCELLED
    assert sim.reserved_after_stop == []
    sets = _final_sets(sim)
    assert sets["succeeded"] | sets["cancelled"] == IndexSet.range(0, 50)


def test_simulated_max_concurrent_change():
    rng = random.Random(11)
    sim = Sim(spec=make_spec(60, maxConcurrent=2), rng=rng)
    for _ in range(30):
        sim.reconcile()
        sim.step_child()
    sim.spec = sim.spec.model_copy(update={"max_concurrent": 8})
    sim.reconcile()
    live = sum(1 for c in sim.children.values() if not c.phase.terminal)
    assert live == 8
    # Shrinking cancels nothing: the 8 drain, and nothing launches until fewer than 3 run
    # (asserted at every create in Sim.reconcile).
    sim.spec = sim.spec.model_copy(update={"max_concurrent": 3})
    sim.cap = 8
    sim.run(chaos=True)
    assert sim.status.phase == Phase.SUCCEEDED


def test_stale_reconcile_cannot_relaunch_a_cleaned_up_child():
    """Why the status write must be conditional even when only (re)creates are decided."""
    rng = random.Random(0)
    sim = Sim(spec=make_spec(3, maxConcurrent=1), rng=rng)
    sim.reconcile()
    stale = (sim.rv, sim.status)  # child 0 active
    sim.children[0].phase = Phase.SUCCEEDED
    sim.runs[0] += 1
    sim.reconcile()  # records 0, launches 1
    del sim.children[0]  # cleanup after the outcome was recorded
    # Decided on the stale status, index 0 looks reserved-but-never-created:
    d = decide_batch(sim.spec, stale[1], sim.observations(), T0)
    assert 0 in d.launch
    # ...so it only gets to act if its conditional write succeeds, which it cannot.
    assert sim.reconcile(based_on=stale) == "conflict"
    assert 0 not in sim.children and sim.created[0] == 1


def test_stale_decisions_racing_do_not_exceed_the_limit():
    rng = random.Random(3)
    sim = Sim(spec=make_spec(30, maxConcurrent=3), rng=rng)
    sim.reconcile()
    for _ in range(200):
        snapshot = (sim.rv, sim.status)
        sim.step_child()
        sim.step_child()
        results = [sim.reconcile(based_on=snapshot) for _ in range(3)]
        assert results.count("ok") <= 1 or sim.rv == snapshot[0]
        if sim.finished():
            break
    assert sim.conflicts > 0


def test_crash_after_every_reserve_still_completes_exactly_once():
    rng = random.Random(8)
    sim = Sim(spec=make_spec(25, maxConcurrent=4), rng=rng)
    for _ in range(2000):
        sim.reconcile(crash_after_write=True)  # every reserve is followed by a crash...
        sim.reconcile()  # ...and repaired by the next reconcile
        sim.step_child()
        if sim.finished():
            break
    assert sim.status.phase == Phase.SUCCEEDED
    assert set(sim.created) == set(range(25))


def test_max_launches_pacing_simulated():
    rng = random.Random(2)
    sim = Sim(spec=make_spec(500, maxConcurrent=None), rng=rng)
    while sim.status is None or sim.status.launched < 500:
        sim.reconcile(max_launches=64)
        assert len(sim.children) <= 64 * sim.rv
    assert len(sim.children) == 500


# --------------------------------------------------------------------------- size


def test_status_of_100k_inputs_stays_small():
    n = 100_000
    spec = make_spec(n, maxConcurrent=2000, retries=1)
    status = None
    children: dict[int, ChildObservation] = {}
    biggest = 0
    for round_ in range(200):
        d = decide_batch(spec, status, children, T0 + timedelta(minutes=round_))
        status = with_manifest(d.status)
        biggest = max(biggest, len(json.dumps(status.wire())))
        # every launched child runs and succeeds; finished ones are cleaned up
        children = {i: obs(Phase.SUCCEEDED, attempts=1) for i in d.launch}
        if Phase(status.phase).terminal:
            break
    assert status.phase == Phase.SUCCEEDED
    assert status.succeeded_indexes == "0-99999" and status.progress == "100000/100000"
    size = len(json.dumps(status.wire()))
    assert size < 4096, size
    assert biggest < 4096, biggest


# ------------------------------------------------------------------- invalid specs, conditions


def test_invalid_batch_fails_at_once_and_launches_nothing():
    from kinetic_operator.batch_logic import invalid_batch

    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    d = invalid_batch(None, ["spec.inputs needs exactly one of count, items or grid"], now)
    assert d.write_status and d.status.phase == "FAILED"
    assert d.status.message.startswith("Invalid batch: spec.inputs needs")
    failed = next(c for c in d.status.conditions if c.type == "Failed")
    assert failed.status == "True" and failed.reason == "InvalidSpec"
    assert [type(a).__name__ for a in d.actions] == ["Event"]
    again = invalid_batch(d.status, ["other"], now)  # an ended batch keeps its outcome
    assert not again.write_status and again.status.message == d.status.message


def test_with_condition_moves_transition_time_only_on_flips():
    from kinetic_operator.batch_logic import with_condition

    t0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    t1 = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)
    s0 = KineticBatchStatus()
    s1 = with_condition(s0, "ManifestWritten", "False", "WriteFailed", "boom", t0)
    assert s1.conditions[-1].last_transition_time == "2024-05-01T12:00:00Z"
    assert with_condition(s1, "ManifestWritten", "False", "WriteFailed", "boom", t1) is s1
    s2 = with_condition(s1, "ManifestWritten", "False", "WriteFailed", "again", t1)
    assert s2.conditions[-1].last_transition_time == "2024-05-01T12:00:00Z"
    s3 = with_condition(s2, "ManifestWritten", "True", "Written", "ok", t1)
    assert s3.conditions[-1].last_transition_time == "2024-05-01T12:05:00Z"
    assert len(s3.conditions) == 1
