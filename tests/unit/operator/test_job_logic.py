"""The KineticJob decision over attempt Pods: every way an attempt starts, runs and ends.

`decide` is pure, so each test hands it a spec, the status it wrote last time
and the Pods the watch shows, and reads back the status to write and the
actions to take. `drive` runs a job through a whole story the way the
handler does (status first, then actions, the Pods of earlier attempts
staying in the index) and checks on every step that deciding again on its
own output repeats no Event and changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kinetic.model.catalog import default_catalog
from kinetic.model.resources import Condition, KineticJobSpec, KineticJobStatus, Phase
from kinetic_operator.logic import job_logic
from kinetic_operator.logic.job_logic import (
    Bounds,
    CreatePod,
    Decision,
    DeletePod,
    Event,
    InvalidSpec,
    decide,
    fmt_time,
    rejected,
    validate_spec,
)
from kinetic_operator.logic.observed import PodView

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T5 = fmt_time(T0 + timedelta(seconds=5))
SHA = "0" * 64
DEFAULT_BOUNDS = Bounds()


def cspec(**extra: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate({"container": {"command": ["sh", "-c", "x"]}, **extra})


def fspec(**extra: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate(
        {"function": {"payloadURI": "gs://b/p.pkl", "sha256": SHA}, **extra}
    )


def pod(attempt: int = 1, phase: str = "Running", **kw: Any) -> PodView:
    kw.setdefault("created", fmt_time(T0))
    kw.setdefault("start_time", fmt_time(T0) if phase != "Pending" else None)
    return PodView(name=f"kj-a{attempt}", attempt=attempt, phase=phase, **kw)


def failed_pod(attempt: int = 1, exit_code: int = 1, reason: str = "Error", **kw: Any) -> PodView:
    kw.setdefault("finished_at", T5)
    return pod(attempt, "Failed", exit_code=exit_code, terminated_reason=reason, **kw)


def ok_pod(attempt: int = 1, message: str | None = "42", **kw: Any) -> PodView:
    kw.setdefault("finished_at", T5)
    return pod(
        attempt,
        "Succeeded",
        exit_code=0,
        terminated_reason="Completed",
        termination_message=message,
        **kw,
    )


def gone(p: PodView) -> PodView:
    """A tombstone: the Pod was seen like this, then deleted."""
    return PodView(**{**p.__dict__, "gone": True})


def run(
    spec: KineticJobSpec | InvalidSpec | None = None,
    status: KineticJobStatus | None = None,
    pods: list[PodView] = (),  # type: ignore[assignment]
    now: datetime = T0,
    bounds: Bounds = DEFAULT_BOUNDS,
    **kw: Any,
) -> Decision:
    return decide(
        name="kj",
        spec=spec if spec is not None else cspec(),
        status=status if status is not None else KineticJobStatus(),
        pods={p.attempt: p for p in pods},
        now=now,
        generation=kw.pop("generation", 1),
        bounds=bounds,
        **kw,
    )


def creates(d: Decision) -> list[int]:
    return [a.attempt for a in d.actions if isinstance(a, CreatePod)]


def deletes(d: Decision) -> list[str]:
    return [a.pod for a in d.actions if isinstance(a, DeletePod)]


def events(d: Decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in d.actions if isinstance(a, Event)]


def cond(status: KineticJobStatus, type_: str) -> Any:
    return next(c for c in status.conditions if c.type == type_)


def started(spec: KineticJobSpec | None = None) -> KineticJobStatus:
    """The status right after attempt 1 was reserved."""
    return run(spec).status


def running(spec: KineticJobSpec | None = None) -> KineticJobStatus:
    return run(spec, started(spec), [pod()]).status


def assert_settled(d: Decision, spec: Any, pods: list[PodView], **kw: Any) -> None:
    """Deciding again on the decision's own output: no Event, no change, at most the same
    idempotent creates and deletes."""
    again = run(spec, d.status, pods, **kw)
    assert events(again) == [], events(again)
    # "attempt 2 is starting" may lose the "why" once the retry is under way, in the
    # status's message and in the one True condition that repeats it
    same = {"message": True, "conditions": {"__all__": {"message"}}}
    assert again.status.model_dump(exclude=same) == d.status.model_dump(exclude=same)
    assert set(creates(again)) <= set(creates(d)) | set(range(1, d.status.attempt + 1))
    third = run(spec, again.status, pods, **kw)
    assert third.status == again.status and events(third) == []


# ----------------------------------------------------------------------- starting


def test_first_decision_reserves_attempt_one_in_the_status_and_creates_its_pod():
    d = run(generation=7)
    assert d.actions[0] == CreatePod(1, "first") and deletes(d) == []
    assert events(d) == [("Normal", "Started")]
    st = d.status
    assert (st.phase, st.attempt, st.failures, st.disruptions) == ("PENDING", 1, 0, 0)
    assert st.start_time == fmt_time(T0) and st.completion_time is None
    assert st.observed_generation == 7
    assert [(r.attempt, r.pod, r.outcome) for r in st.attempts] == [(1, "kj-a1", "pending")]
    assert {c.type: c.status for c in st.conditions} == {
        "Running": "False",
        "Complete": "False",
        "Failed": "False",
        "Ready": "False",
        "Reconciling": "True",
        "Stalled": "False",
    }
    assert d.creates


def test_a_reserved_attempt_whose_pod_is_not_seen_is_created_again_quietly():
    st = started()
    d = run(status=st)
    assert creates(d) == [1] and events(d) == []
    assert d.status == st  # nothing to write: the same name makes the create idempotent


def test_a_pod_this_process_is_creating_is_not_created_twice():
    d = run(status=started(), creating=True)
    assert creates(d) == [] and d.actions == ()
    assert d.status.phase == "PENDING" and "being created" in d.status.message


def test_function_job_publishes_its_result_uri_from_the_start():
    d = run(fspec(), result_uri="gs://b/jobs/kj/result.pkl")
    assert d.status.result_uri == "gs://b/jobs/kj/result.pkl"


# ----------------------------------------------------------------------- pending and running


def test_unschedulable_pod_says_why():
    p = pod(
        phase="Pending", unschedulable="0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    d = run(status=started(), pods=[p])
    assert d.status.phase == "PENDING" and d.actions == ()
    assert "Insufficient nvidia.com/gpu" in d.status.message
    assert d.status.attempts[0].pod == "kj-a1"


def test_starting_container_says_what_it_waits_for():
    p = pod(phase="Pending", waiting_reason="ImagePullBackOff", waiting_message="no such image")
    d = run(status=started(), pods=[p])
    assert "ImagePullBackOff: no such image" in d.status.message


def test_running_pod_makes_the_job_running():
    d = run(status=started(), pods=[pod()])
    st = d.status
    assert d.actions == ()
    assert st.phase == "RUNNING" and "kj-a1" in st.message
    rec = st.attempts[0]
    assert (rec.pod, rec.outcome, rec.start_time) == ("kj-a1", "running", fmt_time(T0))
    assert cond(st, "Running").status == "True"
    assert cond(st, "Running").last_transition_time == fmt_time(T0)


def test_unchanged_state_is_a_fixpoint_and_keeps_transition_times():
    st = running()
    later = T0 + timedelta(minutes=5)
    d = run(status=st, pods=[pod()], now=later)
    assert d.actions == () and d.status == st
    assert cond(d.status, "Running").last_transition_time == fmt_time(T0)


def test_transition_time_moves_only_when_a_condition_flips():
    st = running()
    later = T0 + timedelta(minutes=5)
    d = run(status=st, pods=[ok_pod()], now=later)
    assert cond(d.status, "Running").status == "False"
    assert cond(d.status, "Running").last_transition_time == fmt_time(later)
    assert cond(d.status, "Complete").last_transition_time == fmt_time(later)
    assert cond(d.status, "Failed").last_transition_time == fmt_time(T0)


def test_a_condition_the_decision_does_not_own_is_kept():
    """ReconcileFailed is written by the failure reporter; the next status must not drop it."""
    st = running()
    failed = Condition(type="ReconcileFailed", status="True", reason="ForbiddenException")
    st.conditions.append(failed)
    d = run(status=st, pods=[ok_pod()], now=T0 + timedelta(minutes=5))
    assert d.status.phase == "SUCCEEDED"
    assert cond(d.status, "ReconcileFailed") == failed


# ----------------------------------------------------------------------- success


def test_container_success_puts_the_termination_message_in_result():
    d = run(status=running(), pods=[ok_pod(message="hello world")])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.result == "hello world"
    assert st.completion_time == fmt_time(T0)
    assert events(d) == [("Normal", "Succeeded")]
    rec = st.attempts[0]
    assert (rec.outcome, rec.exit_code, rec.reason, rec.end_time) == (
        "success",
        0,
        "Completed",
        T5,
    )
    assert cond(st, "Complete").status == "True" and cond(st, "Running").status == "False"
    assert deletes(d) == [] and creates(d) == []  # the finished Pod waits out its TTL


def test_function_success_keeps_result_uri_and_no_inline_result():
    spec = fspec()
    st = run(spec, result_uri="gs://r").status
    d = run(spec, st, [ok_pod(message="ok: returned int")], result_uri="gs://r")
    assert d.status.phase == "SUCCEEDED"
    assert d.status.result is None and d.status.result_uri == "gs://r"


def test_the_result_sha256_the_runner_reported_is_recorded_in_status():
    spec, digest = fspec(), "ab" * 32
    st = run(spec, result_uri="gs://r").status
    d = run(spec, st, [ok_pod(message=f"ok bytes=321 sha256={digest}")], result_uri="gs://r")
    assert d.status.phase == "SUCCEEDED" and d.status.result_sha256 == digest
    assert d.status.wire()["resultSHA256"] == digest
    assert d.status.wire()["resultBytes"] == 321  # the client reads no more than this


def test_a_runner_that_predates_sizes_records_the_hash_alone():
    spec, digest = fspec(), "ab" * 32
    st = run(spec, result_uri="gs://r").status
    d = run(spec, st, [ok_pod(message=f"ok sha256={digest}")], result_uri="gs://r")
    assert d.status.result_sha256 == digest and "resultBytes" not in d.status.wire()


def test_a_failed_function_records_the_hash_of_its_failure_result():
    spec, digest = fspec(), "cd" * 32
    st = run(spec, result_uri="gs://r").status
    d = run(spec, st, [failed_pod(termination_message=f"ValueError: bad sha256={digest}")])
    assert d.status.phase == "FAILED" and d.status.result_sha256 == digest


def test_a_success_without_a_reported_hash_records_none():
    spec = fspec()
    st = run(spec, result_uri="gs://r").status
    d = run(spec, st, [ok_pod(message="ok")], result_uri="gs://r")
    assert d.status.phase == "SUCCEEDED" and d.status.result_sha256 is None


def test_empty_termination_message_means_no_result():
    d = run(status=running(), pods=[ok_pod(message=None)])
    assert d.status.phase == "SUCCEEDED" and d.status.result is None


def test_a_huge_termination_message_is_clipped_to_fit_the_status():
    d = run(status=running(), pods=[ok_pod(message="x" * 10_000)])
    assert len(d.status.result) == 4096 and d.status.result.endswith("…")
    KineticJobStatus.model_validate(d.status.wire())  # still a valid status


def test_a_success_seen_only_in_the_pods_tombstone_still_counts():
    d = run(status=running(), pods=[gone(ok_pod(message="late"))])
    assert d.status.phase == "SUCCEEDED" and d.status.result == "late"
    assert d.status.disruptions == 0 and creates(d) == []


def test_a_success_on_the_first_sight_of_the_pod():
    """The watch may deliver the Pod only once it has already finished."""
    d = run(status=started(), pods=[ok_pod(message="quick")])
    assert d.status.phase == "SUCCEEDED" and d.status.result == "quick"
    assert events(d) == [("Normal", "Succeeded")]


# ----------------------------------------------------------------------- application failures


def test_failure_with_retries_left_reserves_and_creates_the_next_attempt():
    spec = cspec(retries=2)
    d = run(spec, running(spec), [failed_pod()])
    st = d.status
    assert creates(d) == [2] and deletes(d) == []  # the failed Pod is kept (its log)
    assert events(d) == [("Warning", "AttemptFailed")]
    assert (st.phase, st.attempt, st.failures, st.disruptions) == ("PENDING", 2, 1, 0)
    r1, r2 = st.attempts
    assert (r1.outcome, r1.exit_code, r1.reason, r1.end_time) == ("failure", 1, "Error", T5)
    assert (r2.attempt, r2.pod, r2.outcome) == (2, "kj-a2", "pending")
    assert "retry 1 of 2" in st.message
    assert_settled(d, spec, [failed_pod()])


def test_no_retries_means_failed_at_once():
    d = run(status=running(), pods=[failed_pod(exit_code=3, termination_message="boom")])
    st = d.status
    assert st.phase == "FAILED" and creates(d) == []
    assert events(d) == [("Warning", "Failed")]
    assert "exit code 3" in st.message and "boom" in st.message and "no retries" in st.message
    assert st.attempts[0].message == "boom"
    assert cond(st, "Failed").status == "True"
    assert st.completion_time == fmt_time(T0)


@pytest.mark.parametrize(
    "p, reason",
    [
        (failed_pod(exit_code=137, reason="OOMKilled"), "OOMKilled"),
        (failed_pod(exit_code=128, reason="ContainerCannotRun"), "ContainerCannotRun"),
        (pod(phase="Failed", reason="UnexpectedAdmissionError"), "UnexpectedAdmissionError"),
        (pod(phase="Failed"), "Error"),
    ],
)
def test_failure_reasons_come_from_the_container_or_the_pod(p, reason):
    d = run(status=running(), pods=[p])
    assert d.status.phase == "FAILED" and d.status.attempts[0].reason == reason
    assert d.status.attempts[0].outcome == "failure" and d.status.failures == 1


def test_deadline_exceeded_is_a_failure_that_spends_a_retry():
    spec = cspec(deadlineSeconds=10, retries=1)
    p = pod(phase="Failed", reason="DeadlineExceeded", message="Pod was active too long")
    d = run(spec, running(spec), [p])
    assert (d.status.failures, d.status.disruptions) == (1, 0)
    assert creates(d) == [2] and events(d) == [("Warning", "AttemptFailed")]
    rec = d.status.attempts[0]
    assert (rec.outcome, rec.reason) == ("failure", "DeadlineExceeded")
    # With no retry left, the deadline ends the job.
    d = run(cspec(deadlineSeconds=10), running(cspec(deadlineSeconds=10)), [p])
    assert d.status.phase == "FAILED" and "DeadlineExceeded" in d.status.message


def test_a_failure_seen_before_its_pod_was_deleted_stays_a_failure():
    """Attempt 1 failed and was recorded; attempt 2 runs; then someone deletes the finished
    Pod of attempt 1 (its tombstone carries a deletionTimestamp). The recorded failure must
    not turn into a free disruption: that would grant an attempt beyond `retries`."""
    spec = cspec(retries=1)
    st = run(spec, running(spec), [failed_pod()]).status
    st = run(spec, st, [failed_pod(), pod(2)]).status
    assert (st.attempt, st.failures, st.phase) == (2, 1, "RUNNING")
    d = run(spec, st, [gone(failed_pod(deleting=True)), pod(2)])
    assert (d.status.failures, d.status.disruptions) == (1, 0)
    assert (d.status.attempts[0].outcome, d.status.attempts[0].reason) == ("failure", "Error")
    # ... so when attempt 2 fails too, the job has spent its one retry.
    d = run(spec, d.status, [gone(failed_pod(deleting=True)), failed_pod(2)])
    assert d.status.phase == "FAILED" and creates(d) == []


def test_a_pod_killed_by_its_deletion_is_a_disruption_not_a_failure():
    """kubectl delete on a running Pod: SIGTERM, exit 143, phase Failed, deletionTimestamp."""
    spec = cspec(retries=1)
    d = run(spec, running(spec), [pod(1, "Failed", exit_code=143, deleting=True)])
    assert (d.status.failures, d.status.disruptions) == (0, 1)
    assert creates(d) == [2]


# ----------------------------------------------------------------------- whole stories


OUTCOMES = {
    "fail": lambda n: failed_pod(n),
    "ok": lambda n: ok_pod(n, message=f"result {n}"),
    "evict": lambda n: pod(n, "Failed", reason="Evicted", message="low memory"),
    "delete": lambda n: gone(pod(n)),
    "deleting": lambda n: pod(n, deleting=True),
    "deadline": lambda n: pod(n, "Failed", reason="DeadlineExceeded"),
    "nodelost": lambda n: pod(n, "Failed", exit_code=137, disruption="DeletionByTaintManager"),
}


def drive(
    spec: KineticJobSpec, outcomes: list[str], bounds: Bounds = DEFAULT_BOUNDS
) -> tuple[Decision, list[tuple[str, str]]]:
    """A job through attempts ending as `outcomes`; returns the last decision and every Event.

    Pods of earlier attempts stay in the index, as they do until the job
    ends. After every decision, deciding again on its own output must
    change nothing and post nothing.
    """
    d = run(spec, bounds=bounds)
    seen: dict[int, PodView] = {}
    all_events = events(d)
    for n, outcome in enumerate(outcomes, start=1):
        assert creates(d) == [n], (n, d)
        assert d.status.attempt == n  # reserved in the status this Pod is created after
        assert_settled(d, spec, list(seen.values()), bounds=bounds)
        seen[n] = pod(n)
        d = run(spec, d.status, list(seen.values()), bounds=bounds)
        assert d.status.phase == "RUNNING" and d.actions == ()
        seen[n] = OUTCOMES[outcome](n)
        d = run(spec, d.status, list(seen.values()), bounds=bounds)
        all_events += events(d)
        assert_settled(d, spec, list(seen.values()), bounds=bounds)
    return d, all_events


def test_fails_twice_then_succeeds_with_two_retries():
    d, evs = drive(cspec(retries=2), ["fail", "fail", "ok"])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 3 and st.failures == 2
    assert st.result == "result 3"
    assert [r.outcome for r in st.attempts] == ["failure", "failure", "success"]
    assert [r.pod for r in st.attempts] == ["kj-a1", "kj-a2", "kj-a3"]
    assert evs == [
        ("Normal", "Started"),
        ("Warning", "AttemptFailed"),
        ("Warning", "AttemptFailed"),
        ("Normal", "Succeeded"),
    ]


def test_exhausted_retries_end_failed_at_the_last_attempt():
    d, evs = drive(cspec(retries=2), ["fail", "deadline", "fail"])
    st = d.status
    assert st.phase == "FAILED" and st.attempt == 3 and st.failures == 3
    assert [r.outcome for r in st.attempts] == ["failure"] * 3
    assert creates(d) == [] and "after 2 retries" in st.message
    assert evs[-1] == ("Warning", "Failed") and evs.count(("Warning", "Failed")) == 1


# ----------------------------------------------------------------------- disruptions


@pytest.mark.parametrize(
    "how, reason",
    [
        ("delete", "PodDeleted"),
        ("deleting", "PodDeleted"),
        ("evict", "Evicted"),
        ("nodelost", "NodeLost"),
    ],
)
def test_a_disruption_is_retried_without_using_a_retry(how, reason):
    d, evs = drive(cspec(retries=0), [how, "ok"])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 2
    assert (st.failures, st.disruptions) == (0, 1)
    assert [(r.outcome, r.reason) for r in st.attempts] == [
        ("disruption", reason),
        ("success", "Completed"),
    ]
    assert evs == [
        ("Normal", "Started"),
        ("Warning", "AttemptDisrupted"),
        ("Normal", "Succeeded"),
    ]


def test_disruption_message_says_no_retry_was_used():
    spec = cspec()
    d = run(spec, running(spec), [gone(pod())])
    assert "without using a retry" in d.status.message and creates(d) == [2]
    assert deletes(d) == []


def test_an_evicted_pod_keeps_the_kubelets_message():
    d, _ = drive(cspec(), ["evict", "ok"])
    assert d.status.attempts[0].message == "low memory"


def test_a_pod_being_evicted_is_stopped_and_replaced():
    d = run(status=running(), pods=[pod(disruption="EvictionByEvictionAPI")])
    assert creates(d) == [2] and deletes(d) == ["kj-a1"]
    assert d.status.attempts[0].reason == "Evicted" and d.status.disruptions == 1


@pytest.mark.parametrize(
    "target, reason",
    [
        ("DeletionByTaintManager", "NodeLost"),
        ("DeletionByPodGC", "NodeLost"),
        ("EvictionByEvictionAPI", "Evicted"),
        ("PreemptionByScheduler", "Preempted"),
    ],
)
def test_disruption_target_conditions_name_the_cause(target, reason):
    d = run(status=running(), pods=[pod(phase="Failed", exit_code=137, disruption=target)])
    assert d.status.attempts[0].reason == reason and d.status.disruptions == 1
    assert d.status.failures == 0


def test_node_lost_reason_is_a_disruption():
    d = run(status=running(), pods=[pod(phase="Failed", reason="NodeLost")])
    rec = d.status.attempts[0]
    assert (rec.outcome, rec.reason) == ("disruption", "NodeLost")


def test_up_to_max_disruptions_are_absorbed():
    d, _ = drive(cspec(), ["delete", "evict", "nodelost", "ok"], bounds=Bounds(max_disruptions=3))
    assert d.status.phase == "SUCCEEDED" and d.status.disruptions == 3


def test_one_disruption_too_many_fails_the_job():
    d, evs = drive(cspec(retries=5), ["delete", "evict"], bounds=Bounds(max_disruptions=1))
    st = d.status
    assert st.phase == "FAILED" and creates(d) == []
    assert (st.failures, st.disruptions) == (0, 2)
    assert "disrupted 2 times" in st.message and "allows 1" in st.message
    assert cond(st, "Failed").status == "True"
    assert evs[-1] == ("Warning", "Failed")


def test_disruptions_and_failures_are_counted_separately():
    d, _ = drive(cspec(retries=1), ["delete", "fail", "evict", "ok"])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 4
    assert (st.failures, st.disruptions) == (1, 2)
    assert [r.outcome for r in st.attempts] == ["disruption", "failure", "disruption", "success"]


def test_a_pod_that_vanished_below_the_current_attempt_is_a_disruption():
    """An older attempt's Pod with no record and no sight: lost, not charged to retries."""
    st = KineticJobStatus(attempt=2)
    d = run(cspec(retries=1), st, [pod(2)])
    assert d.status.phase == "RUNNING"
    assert (d.status.failures, d.status.disruptions) == (0, 1)


# ----------------------------------------------------------------------- cancel


def test_cancel_while_running_stops_the_pod_and_ends_cancelled():
    d = run(cspec(cancel=True), running(), [pod()])
    assert deletes(d) == ["kj-a1"] and creates(d) == []
    assert d.status.phase == "CANCELLED"
    assert events(d) == [("Normal", "Cancelled")]
    rec = d.status.attempts[0]
    assert (rec.outcome, rec.reason, rec.pod) == ("cancelled", "Cancelled", "kj-a1")
    assert rec.end_time == fmt_time(T0)
    assert d.status.completion_time == fmt_time(T0)
    assert {c.type: c.status for c in d.status.conditions} == {
        "Running": "False",
        "Complete": "False",
        "Failed": "False",
        "Ready": "False",
        "Reconciling": "False",
        "Stalled": "True",  # it will not succeed without a new job
    }


def test_a_cancelled_job_still_running_later_is_stopped_again_quietly():
    d = run(cspec(cancel=True), running(), [pod()])
    again = run(cspec(cancel=True), d.status, [pod()])
    assert deletes(again) == ["kj-a1"] and events(again) == [] and creates(again) == []
    assert again.status == d.status


def test_the_cancelled_pod_dying_is_not_a_disruption():
    d = run(cspec(cancel=True), running(), [pod()])
    for p in (pod(deleting=True), gone(pod()), pod(1, "Failed", exit_code=143)):
        after = run(cspec(cancel=True), d.status, [p])
        assert after.status == d.status and after.actions == ()


def test_cancel_before_start_creates_nothing():
    d = run(cspec(cancel=True))
    assert d.actions == (Event("Normal", "Cancelled", "Cancelled before it started."),)
    assert d.status.phase == "CANCELLED" and d.status.attempt == 0


def test_cancel_of_a_reserved_attempt_not_seen_yet_stops_its_pod_when_it_appears():
    d = run(cspec(cancel=True), started())
    assert d.status.phase == "CANCELLED" and creates(d) == []
    assert d.status.attempts[0].outcome == "cancelled"
    later = run(cspec(cancel=True), d.status, [pod(phase="Pending")])
    assert deletes(later) == ["kj-a1"] and creates(later) == [] and events(later) == []


def test_cancel_after_success_keeps_the_success():
    d = run(cspec(cancel=True), running(), [ok_pod()])
    assert d.status.phase == "SUCCEEDED" and deletes(d) == []


def test_cancel_after_a_failure_does_not_retry():
    d = run(cspec(cancel=True, retries=3), running(), [failed_pod()])
    assert d.status.phase == "CANCELLED" and creates(d) == []
    assert d.status.attempts[0].outcome == "failure"


# ----------------------------------------------------------------------- terminal states are sticky


@pytest.mark.parametrize("outcome", ["ok", "fail"])
def test_terminal_states_never_relaunch(outcome):
    d, _ = drive(cspec(), [outcome])
    final = d.status
    specs = (cspec(), cspec(retries=5), cspec(cancel=True), InvalidSpec("spec.x: bad"))
    views = ([], [OUTCOMES[outcome](1)], [gone(OUTCOMES[outcome](1))])
    for spec in specs:
        for pods in views:
            again = run(spec, final, pods, now=T0 + timedelta(hours=1))
            assert again.actions == () and again.status == final


def test_a_live_pod_under_a_terminal_job_is_only_stopped():
    d, _ = drive(cspec(retries=3), ["ok"])
    stray = pod(2)  # e.g. created by a stale reconcile that lost its race
    again = run(cspec(retries=3), d.status, [ok_pod(1), stray])
    assert again.actions == (DeletePod("kj-a2"),)
    assert again.status == d.status


def test_observed_generation_follows_the_spec_even_when_terminal():
    d, _ = drive(cspec(), ["ok"])
    assert run(cspec(), d.status, generation=9).status.observed_generation == 9


def test_no_terminal_job_keeps_an_attempt_recorded_as_still_going():
    stories = [["ok"], ["fail"], ["delete", "fail"], ["evict", "ok"]]
    for story in stories:
        d, _ = drive(cspec(), story, bounds=Bounds(max_disruptions=1))
        assert Phase(d.status.phase).terminal
        assert all(r.outcome not in ("pending", "running") for r in d.status.attempts), story


# ----------------------------------------------------------------------- invalid specs


def test_invalid_spec_fails_without_creating_anything():
    d = run(InvalidSpec("spec.container.command: List should have at least 1 item"))
    assert d.actions == (
        Event("Warning", "InvalidSpec", "spec.container.command: List should have at least 1 item"),
    )
    st = d.status
    assert st.phase == "FAILED" and st.attempt == 0 and st.attempts == []
    assert st.message.startswith("spec.container.command")
    # The Failed condition says why, as a KineticBatch's does, and keeps saying it.
    assert cond(st, "Failed").status == "True" and cond(st, "Failed").reason == "InvalidSpec"
    again = run(InvalidSpec("spec.x: y"), st)
    assert again.actions == ()  # said once
    assert cond(again.status, "Failed").reason == "InvalidSpec"


def test_spec_edited_into_nonsense_mid_run_stops_the_attempt():
    """A job that fails for its spec while its Pod runs stops that Pod, and its attempt
    record does not stay 'running' under a FAILED job."""
    d = run(InvalidSpec("spec.accelerator: unknown"), running(), [pod()])
    assert d.status.phase == "FAILED"
    assert deletes(d) == ["kj-a1"]
    assert d.status.attempts[0].outcome not in ("pending", "running")


def validate(raw: Any, name: str = "kj", root: str | None = "gs://b") -> Any:
    return validate_spec(name, raw, default_catalog(), storage_root=root, max_disruptions=3)


@pytest.mark.parametrize(
    "raw, start",
    [
        (
            {"container": {"command": "echo"}},
            "spec.container.command: Input should be a valid list",
        ),
        ({}, "spec: exactly one of spec.function or spec.container"),
        (
            {"container": {"command": ["x"]}, "function": {"payloadURI": "gs://a", "sha256": SHA}},
            "spec: exactly one of",
        ),
        (
            {"function": {"payloadURI": "http://x", "sha256": SHA}},
            "spec.function.payloadURI: String should match",
        ),
        ({"container": {"command": ["x"]}, "retries": -1}, "spec.retries: Input should be greater"),
        (
            {"container": {"command": ["x"]}, "env": [{"name": "1x"}]},
            "spec.env[0].name: String should match",
        ),
        (
            {"container": {"command": ["x"]}, "accelerator": "gpu-v100"},
            "spec.accelerator: unknown accelerator 'gpu-v100'",
        ),
        (
            {"container": {"command": ["x"]}, "accelerator": "GPU!"},
            "spec.accelerator: String should match",
        ),
        (
            {"container": {"command": ["x"]}, "deadlineSeconds": 0},
            "spec.deadlineSeconds: Input should be greater",
        ),
        (None, "spec: exactly one of"),
        ("not a mapping", "spec: Input should be a valid dictionary"),
    ],
)
def test_validation_names_the_field(raw, start):
    result = validate(raw)
    assert isinstance(result, InvalidSpec), result
    assert result.message.startswith(start), result.message


def test_unknown_accelerator_lists_the_known_ones():
    msg = validate({"container": {"command": ["x"]}, "accelerator": "tpu-v9-1"}).message
    assert "known accelerators: cpu, gpu-a100" in msg and "tpu-v6e-4" in msg


def test_function_job_needs_a_storage_root():
    raw = {"function": {"payloadURI": "gs://b/namespaces/default/uploads/x/p", "sha256": SHA}}
    assert validate(raw, root=None).message.startswith("spec.function: the operator has no")
    assert isinstance(validate(raw, root="gs://b"), KineticJobSpec)


@pytest.mark.parametrize(
    "field, uri",
    [
        ("payloadURI", "gs://b/namespaces/other/uploads/x/p.pkl"),  # another namespace's
        ("payloadURI", "gs://b/jobs/kj/payload.pkl"),  # the root, outside any namespace
        ("payloadURI", "gs://b/namespaces/default/../other/p.pkl"),
        ("payloadURI", "file:///home/me/p.pkl"),
        ("resultURI", "gs://bucket/result.pkl"),
        ("inputURI", "gs://b/namespaces/defaultx/in.pkl"),  # a longer name is not a prefix
    ],
)
def test_storage_uris_outside_the_namespace_prefix_are_refused_naming_the_field(field, uri):
    fn = {"payloadURI": "gs://b/namespaces/default/uploads/x/p", "sha256": SHA, field: uri}
    msg = validate({"function": fn}).message
    assert msg.startswith(f"spec.function.{field}: {uri} is outside")
    assert "gs://b/namespaces/default/" in msg  # the allowed prefix, so the fix is clear


@pytest.mark.parametrize(
    "output_dir, refused",
    [
        ("gs://b/namespaces/default/outputs/x", False),
        ("gs://elsewhere/out", False),  # another bucket: the Pod's own credentials decide
        ("gs://b/namespaces/other/outputs/x", True),
        ("file:///var/run/secrets", True),
    ],
)
def test_the_output_dir_must_not_point_into_storage_the_namespace_does_not_own(output_dir, refused):
    raw = {"container": {"command": ["x"]}, "outputDir": output_dir}
    result = validate(raw)
    if refused:
        assert result.message.startswith(f"spec.outputDir: {output_dir} is outside")
    else:
        assert isinstance(result, KineticJobSpec)


def test_a_job_of_any_valid_name_runs_its_attempt_pods_under_names_that_fit():
    raw = {"container": {"command": ["x"]}, "retries": 10}
    assert isinstance(validate(raw, name="a" * 63), KineticJobSpec)


def test_many_errors_are_summarised():
    raw = {
        "container": {"command": "echo"},
        "retries": -1,
        "bogus": 1,
        "env": [{"name": "1"}],
        "x": 2,
        "y": 3,
    }
    msg = validate(raw).message
    assert msg.count("; ") == 4 and msg.endswith("more)")


# ----------------------------------------------------------------------- history, adoption


def test_attempt_history_is_bounded_to_the_newest():
    d, _ = drive(cspec(retries=10), ["fail"] * 6 + ["ok"], bounds=Bounds(history=3))
    st = d.status
    assert [r.attempt for r in st.attempts] == [5, 6, 7]
    assert st.attempt == 7 and st.failures == 6 and st.phase == "SUCCEEDED"


def test_pods_newer_than_the_status_are_adopted_not_created_again():
    d = run(cspec(retries=1), KineticJobStatus(), [failed_pod(1), pod(2)])
    assert creates(d) == [] and d.status.attempt == 2 and d.status.phase == "RUNNING"
    assert d.status.failures == 1


def test_an_older_attempt_still_running_is_stopped():
    spec = cspec(retries=1)
    st = run(spec, running(spec), [failed_pod()]).status
    assert st.attempt == 2
    d = run(spec, st, [pod(1), pod(2)])
    assert deletes(d) == ["kj-a1"] and d.status.phase == "RUNNING" and creates(d) == []


def test_rejected_attempt_fails_the_job():
    st = rejected(started(), "Kubernetes rejected the Pod of attempt 1: bad cpu", T0)
    assert st.phase == "FAILED" and st.message.endswith("bad cpu")
    assert (st.attempts[0].outcome, st.attempts[0].reason) == ("failure", "Rejected")
    assert cond(st, "Failed").status == "True" and st.completion_time == fmt_time(T0)


def test_status_round_trips_through_the_wire():
    d, _ = drive(cspec(retries=2), ["fail", "delete", "ok"])
    st = d.status
    assert KineticJobStatus.model_validate(st.wire()) == st
    assert Phase(st.phase) is Phase.SUCCEEDED


# ----------------------------------------------------------------------- policy per generation


@pytest.mark.parametrize(
    "status, spec, changed",
    [
        ({}, {"image": "a:1"}, False),  # never accepted: the first-acceptance check's
        ({"phase": "RUNNING"}, {"image": "a:1"}, False),  # accepted before the record
        ({"phase": "RUNNING", "accepted": {"image": "a:1"}}, {"image": "a:1"}, False),
        (
            {"phase": "RUNNING", "accepted": {"image": "a:1"}},
            {"image": "a:1", "cancel": True},
            False,
        ),
        ({"phase": "RUNNING", "accepted": {"image": "a:1"}}, {"image": "b:1"}, True),
        ({"phase": "PENDING", "accepted": {"image": "a:1"}}, {"image": "a:1", "spot": True}, True),
    ],
)
def test_what_counts_as_a_change_after_acceptance(status, spec, changed):
    def parsed(extra):
        return KineticJobSpec.model_validate({"container": {"command": ["x"]}, **extra})

    raw = {k: v for k, v in status.items() if k != "accepted"}
    if "accepted" in status:
        raw["acceptedSpecSHA256"] = job_logic.spec_sha256(parsed(status["accepted"]))
    st = KineticJobStatus.model_validate(raw)
    assert job_logic.changed_after_acceptance(st, parsed(spec)) is changed


def test_an_accepted_spec_is_recorded_and_a_denied_change_fails_the_job():
    d = run(cspec())
    assert d.status.accepted_spec_sha256 == job_logic.spec_sha256(cspec())
    denied = job_logic.policy_denied(["spec.image 'x' is not an allowed image"], 2)
    out = decide(name="j", spec=denied, status=d.status, pods={}, now=T0)
    assert out.status.phase == "FAILED" and "generation 2" in (out.status.message or "")
    failed = next(c for c in out.status.conditions if c.type == "Failed")
    assert failed.reason == "PolicyDenied"
    assert [a for a in out.actions if isinstance(a, CreatePod)] == []
