"""The KineticJob decision, exhaustively: every way an attempt starts, runs and ends."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kinetic.resources import KineticJobSpec, KineticJobStatus, Phase
from kinetic_operator.catalog import default_catalog
from kinetic_operator.job_logic import (
    Bounds,
    CreateAttempt,
    Decision,
    DeleteAttempt,
    Event,
    InvalidSpec,
    decide,
    fmt_time,
    rejected,
    validate_spec,
)
from kinetic_operator.observed import JobView, PodView, summarize_job, summarize_pod

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SHA = "0" * 64
DEFAULT_BOUNDS = Bounds()


def cspec(**extra: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate({"container": {"command": ["sh", "-c", "x"]}, **extra})


def fspec(**extra: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate(
        {"function": {"payloadURI": "gs://b/p.pkl", "sha256": SHA}, **extra}
    )


def job(attempt: int = 1, **kw: Any) -> JobView:
    return JobView(name=f"kj-{attempt}", attempt=attempt, start_time=fmt_time(T0), **kw)


def pod(attempt: int = 1, suffix: str = "a", phase: str = "Running", **kw: Any) -> PodView:
    kw.setdefault("created", fmt_time(T0))
    kw.setdefault("start_time", fmt_time(T0) if phase != "Pending" else None)
    return PodView(name=f"kj-{attempt}-{suffix}", attempt=attempt, phase=phase, **kw)


def failed_pod(attempt: int = 1, exit_code: int = 1, reason: str = "Error", **kw: Any) -> PodView:
    return pod(
        attempt,
        phase="Failed",
        exit_code=exit_code,
        terminated_reason=reason,
        finished_at=fmt_time(T0 + timedelta(seconds=5)),
        **kw,
    )


def ok_pod(attempt: int = 1, message: str | None = "42", **kw: Any) -> PodView:
    return pod(
        attempt,
        phase="Succeeded",
        exit_code=0,
        terminated_reason="Completed",
        termination_message=message,
        finished_at=fmt_time(T0 + timedelta(seconds=5)),
        **kw,
    )


def run(
    spec: KineticJobSpec | InvalidSpec | None = None,
    status: KineticJobStatus | None = None,
    jobs: list[JobView] = (),  # type: ignore[assignment]
    pods: list[PodView] = (),  # type: ignore[assignment]
    now: datetime = T0,
    bounds: Bounds = DEFAULT_BOUNDS,
    **kw: Any,
) -> Decision:
    return decide(
        name="kj",
        spec=spec if spec is not None else cspec(),
        status=status if status is not None else KineticJobStatus(),
        jobs=jobs,
        pods=pods,
        now=now,
        generation=kw.pop("generation", 1),
        bounds=bounds,
        **kw,
    )


def creates(d: Decision) -> list[int]:
    return [a.attempt for a in d.actions if isinstance(a, CreateAttempt)]


def deletes(d: Decision) -> list[str]:
    return [a.job for a in d.actions if isinstance(a, DeleteAttempt)]


def events(d: Decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in d.actions if isinstance(a, Event)]


def cond(status: KineticJobStatus, type_: str) -> Any:
    return next(c for c in status.conditions if c.type == type_)


def started(spec: KineticJobSpec | None = None, **kw: Any) -> KineticJobStatus:
    """The status right after attempt 1 was created."""
    return run(spec, **kw).status


def running(spec: KineticJobSpec | None = None) -> KineticJobStatus:
    return run(spec, started(spec), [job()], [pod()]).status


# ----------------------------------------------------------------------- starting


def test_first_reconcile_creates_attempt_one():
    d = run(generation=7)
    assert creates(d) == [1] and deletes(d) == []
    assert events(d) == [("Normal", "Started")]
    st = d.status
    assert (st.phase, st.attempt, st.failures, st.disruptions) == ("PENDING", 1, 0, 0)
    assert st.start_time == fmt_time(T0) and st.completion_time is None
    assert st.observed_generation == 7
    assert [(r.attempt, r.job, r.outcome) for r in st.attempts] == [(1, "kj-1", "running")]
    assert {c.type: c.status for c in st.conditions} == {
        "Running": "False",
        "Complete": "False",
        "Failed": "False",
    }


def test_created_job_not_yet_seen_is_created_again_quietly():
    d = run(status=started())
    assert creates(d) == [1] and events(d) == []
    assert d.status.attempt == 1 and d.status.phase == "PENDING"


def test_function_job_publishes_its_result_uri_from_the_start():
    d = run(fspec(), result_uri="gs://b/jobs/kj/result.pkl")
    assert d.status.result_uri == "gs://b/jobs/kj/result.pkl"


# ----------------------------------------------------------------------- pending and running


def test_job_without_pod_is_pending():
    d = run(status=started(), jobs=[job()])
    assert d.actions == ()
    assert d.status.phase == "PENDING"
    assert "waiting for its pod" in d.status.message


def test_unschedulable_pod_says_why():
    p = pod(
        phase="Pending", unschedulable="0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    d = run(status=started(), jobs=[job()], pods=[p])
    assert d.status.phase == "PENDING"
    assert "Insufficient nvidia.com/gpu" in d.status.message
    assert d.status.attempts[0].pod == p.name


def test_starting_container_says_what_it_waits_for():
    p = pod(phase="Pending", waiting_reason="ImagePullBackOff", waiting_message="no such image")
    d = run(status=started(), jobs=[job()], pods=[p])
    assert "ImagePullBackOff: no such image" in d.status.message


def test_running_pod_makes_the_job_running():
    d = run(status=started(), jobs=[job()], pods=[pod()])
    st = d.status
    assert d.actions == ()
    assert st.phase == "RUNNING"
    assert st.attempts[0].pod == "kj-1-a" and st.attempts[0].start_time == fmt_time(T0)
    assert cond(st, "Running").status == "True"
    assert cond(st, "Running").last_transition_time == fmt_time(T0)


def test_unchanged_state_is_a_fixpoint_and_keeps_transition_times():
    st = running()
    later = T0 + timedelta(minutes=5)
    d = run(status=st, jobs=[job()], pods=[pod()], now=later)
    assert d.actions == ()
    assert d.status == st
    assert cond(d.status, "Running").last_transition_time == fmt_time(T0)


def test_transition_time_moves_when_a_condition_flips():
    st = running()
    later = T0 + timedelta(minutes=5)
    d = run(status=st, jobs=[job(complete=True)], pods=[ok_pod()], now=later)
    assert cond(d.status, "Running").status == "False"
    assert cond(d.status, "Running").last_transition_time == fmt_time(later)
    assert cond(d.status, "Complete").last_transition_time == fmt_time(later)
    assert cond(d.status, "Failed").last_transition_time == fmt_time(T0)


# ----------------------------------------------------------------------- success


def test_container_success_puts_the_termination_message_in_result():
    d = run(status=running(), jobs=[job()], pods=[ok_pod(message="hello world")])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.result == "hello world"
    assert st.completion_time == fmt_time(T0)
    assert events(d) == [("Normal", "Succeeded")]
    rec = st.attempts[0]
    assert (rec.outcome, rec.exit_code, rec.reason) == ("success", 0, "Completed")
    assert rec.end_time == fmt_time(T0 + timedelta(seconds=5))
    assert cond(st, "Complete").status == "True" and cond(st, "Running").status == "False"
    assert deletes(d) == []  # the finished Job is kept for its logs


def test_function_success_keeps_result_uri_and_no_inline_result():
    spec = fspec()
    st = run(spec, result_uri="gs://r").status
    d = run(
        spec, st, [job(complete=True)], [ok_pod(message="ok: returned int")], result_uri="gs://r"
    )
    assert d.status.phase == "SUCCEEDED"
    assert d.status.result is None and d.status.result_uri == "gs://r"


def test_job_complete_without_pods_is_success():
    d = run(status=running(), jobs=[job(complete=True)], pods=[])
    assert d.status.phase == "SUCCEEDED"


def test_empty_termination_message_means_no_result():
    d = run(status=running(), jobs=[job()], pods=[ok_pod(message=None)])
    assert d.status.phase == "SUCCEEDED" and d.status.result is None


# ----------------------------------------------------------------------- application failures


def test_failure_with_retries_left_starts_the_next_attempt():
    spec = cspec(retries=2)
    d = run(spec, running(spec), [job(failed_reason="BackoffLimitExceeded")], [failed_pod()])
    st = d.status
    assert creates(d) == [2]
    assert events(d) == [("Warning", "AttemptFailed"), ("Normal", "Retrying")]
    assert (st.phase, st.attempt, st.failures, st.disruptions) == ("PENDING", 2, 1, 0)
    r1, r2 = st.attempts
    assert (r1.outcome, r1.exit_code, r1.reason) == ("failure", 1, "Error")
    assert (r2.attempt, r2.job, r2.outcome) == (2, "kj-2", "running")
    assert "retry 1 of 2" in st.message
    assert deletes(d) == []  # failed attempts keep their Job (logs)


def test_failure_is_seen_as_soon_as_the_pod_fails():
    spec = cspec(retries=1)
    d = run(spec, running(spec), [job()], [failed_pod()])
    assert creates(d) == [2] and d.status.failures == 1
    assert deletes(d) == []  # its pod is finished; the Job controller will mark it failed


def test_no_retries_means_failed_at_once():
    d = run(
        status=running(), jobs=[job()], pods=[failed_pod(exit_code=3, termination_message="boom")]
    )
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
    d = run(status=running(), jobs=[job()], pods=[p])
    assert d.status.phase == "FAILED" and d.status.attempts[0].reason == reason
    assert d.status.attempts[0].outcome == "failure"


def test_deadline_exceeded_from_the_job_condition():
    spec = cspec(deadlineSeconds=10)
    j = job(failed_reason="DeadlineExceeded", failed_message="Job was active longer than specified")
    d = run(spec, running(spec), [j], [])
    assert d.status.phase == "FAILED"
    rec = d.status.attempts[0]
    assert (rec.reason, rec.outcome) == ("DeadlineExceeded", "failure")
    assert "deadlineSeconds" in d.status.message


def test_pod_killed_after_the_deadline_is_a_deadline_failure_not_a_disruption():
    spec = cspec(deadlineSeconds=10, retries=1)
    d = run(spec, running(spec), [job()], [pod(deleting=True)], now=T0 + timedelta(seconds=11))
    assert d.status.failures == 1 and d.status.disruptions == 0
    assert d.status.attempts[0].reason == "DeadlineExceeded"


def test_pod_deleted_before_the_deadline_is_a_disruption():
    spec = cspec(deadlineSeconds=10)
    d = run(spec, running(spec), [job()], [pod(deleting=True)], now=T0 + timedelta(seconds=3))
    assert d.status.failures == 0 and d.status.disruptions == 1


def test_job_failed_without_any_pod_is_a_failure_with_the_jobs_reason():
    j = job(failed_reason="PodFailurePolicy", failed_message="m", finished_time=fmt_time(T0))
    d = run(status=started(), jobs=[j], now=T0 + timedelta(minutes=1))
    assert d.status.phase == "FAILED" and d.status.attempts[0].reason == "PodFailurePolicy"


def simulate(
    spec: KineticJobSpec, outcomes: list[str], bounds: Bounds = DEFAULT_BOUNDS
) -> Decision:
    """Drive decide() through attempts; each outcome is 'fail', 'ok', 'evict' or 'delete'."""
    d = run(spec, bounds=bounds)
    for n, outcome in enumerate(outcomes, start=1):
        assert creates(d) == [n], (n, d)
        st = run(spec, d.status, [job(n)], [pod(n)], bounds=bounds).status
        assert st.phase == "RUNNING"
        p = {
            "fail": failed_pod(n),
            "ok": ok_pod(n),
            "evict": pod(n, phase="Failed", reason="Evicted", message="low memory"),
            "delete": pod(n, deleting=True),
        }[outcome]
        d = run(spec, st, [job(n)], [p], bounds=bounds)
    return d


def test_fails_twice_then_succeeds_with_two_retries():
    d = simulate(cspec(retries=2), ["fail", "fail", "ok"])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 3 and st.failures == 2
    assert [r.outcome for r in st.attempts] == ["failure", "failure", "success"]


def test_exhausted_retries_end_failed_at_the_last_attempt():
    d = simulate(cspec(retries=2), ["fail", "fail", "fail"])
    st = d.status
    assert st.phase == "FAILED" and st.attempt == 3 and st.failures == 3
    assert [r.outcome for r in st.attempts] == ["failure"] * 3
    assert creates(d) == [] and "after 2 retries" in st.message


# ----------------------------------------------------------------------- disruptions


def test_deleted_pod_is_retried_without_using_a_retry():
    d = simulate(cspec(retries=0), ["delete", "ok"])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 2
    assert (st.failures, st.disruptions) == (0, 1)
    assert [(r.outcome, r.reason) for r in st.attempts] == [
        ("disruption", "PodDeleted"),
        ("success", "Completed"),
    ]


def test_disruption_events_and_message():
    spec = cspec()
    d = run(spec, running(spec), [job()], [pod(deleting=True)])
    assert events(d) == [("Warning", "AttemptDisrupted"), ("Normal", "Retrying")]
    assert "without using a retry" in d.status.message
    assert creates(d) == [2]


def test_evicted_pod_is_a_disruption():
    d = simulate(cspec(), ["evict", "ok"])
    assert [(r.outcome, r.reason) for r in d.status.attempts][0] == ("disruption", "Evicted")
    assert d.status.attempts[0].message == "low memory"


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
    d = run(
        status=running(), jobs=[job()], pods=[pod(phase="Failed", exit_code=137, disruption=target)]
    )
    assert d.status.attempts[0].reason == reason and d.status.disruptions == 1


def test_node_lost_reason_is_a_disruption():
    d = run(status=running(), jobs=[job()], pods=[pod(phase="Failed", reason="NodeLost")])
    assert (d.status.attempts[0].outcome, d.status.attempts[0].reason) == ("disruption", "NodeLost")


def test_recorded_pod_that_vanished_is_a_disruption():
    d = run(status=running(), jobs=[job()], pods=[])
    assert d.status.attempts[0].reason == "PodDeleted" and creates(d) == [2]


def test_replacement_pod_is_stopped_and_the_attempt_retried():
    """Job controllers that replace a deleted pod would run attempt 1 twice: stop it."""
    d = run(
        status=running(), jobs=[job()], pods=[pod(suffix="b", created=fmt_time(T0 + timedelta(1)))]
    )
    assert d.status.attempts[0].reason == "PodDeleted"
    assert creates(d) == [2] and deletes(d) == ["kj-1"]


def test_deleted_job_is_a_disruption():
    d = run(status=running(), jobs=[], pods=[])
    assert (d.status.attempts[0].reason, creates(d)) == ("JobDeleted", [2])
    d = run(status=running(), jobs=[job(deleting=True)], pods=[pod(deleting=True)])
    assert (d.status.attempts[0].reason, creates(d)) == ("JobDeleted", [2])


def test_disruptions_are_bounded():
    d = simulate(cspec(retries=5), ["delete", "evict"], bounds=Bounds(max_disruptions=1))
    st = d.status
    assert st.phase == "FAILED" and creates(d) == []
    assert (st.failures, st.disruptions) == (0, 2)
    assert "disrupted 2 times" in st.message and "allows 1" in st.message


def test_disruptions_and_failures_are_counted_separately():
    d = simulate(cspec(retries=1), ["delete", "fail", "evict", "ok"])
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 4
    assert (st.failures, st.disruptions) == (1, 2)
    assert [r.outcome for r in st.attempts] == ["disruption", "failure", "disruption", "success"]


# ----------------------------------------------------------------------- cancel


def test_cancel_while_running_deletes_the_job_and_ends_cancelled():
    st = running()
    d = run(cspec(cancel=True), st, [job()], [pod()])
    assert deletes(d) == ["kj-1"] and creates(d) == []
    assert d.status.phase == "CANCELLED"
    assert events(d) == [("Normal", "Cancelled")]
    rec = d.status.attempts[0]
    assert (rec.outcome, rec.reason, rec.pod) == ("cancelled", "Cancelled", "kj-1-a")
    assert d.status.completion_time == fmt_time(T0)
    assert {c.type: c.status for c in d.status.conditions}["Running"] == "False"


def test_cancel_is_not_a_disruption_when_the_pod_then_dies():
    d = run(cspec(cancel=True), running(), [job()], [pod()])
    d2 = run(cspec(cancel=True), d.status, [job(deleting=True)], [pod(deleting=True)])
    assert d2.status == d.status and d2.actions == ()


def test_cancel_before_start_creates_nothing():
    d = run(cspec(cancel=True))
    assert creates(d) == [] and d.status.phase == "CANCELLED" and d.status.attempt == 0


def test_cancel_of_an_unseen_attempt_still_deletes_it():
    d = run(cspec(cancel=True), started())
    assert deletes(d) == ["kj-1"] and d.status.phase == "CANCELLED"


def test_cancel_after_success_keeps_the_success():
    d = run(cspec(cancel=True), running(), [job()], [ok_pod()])
    assert d.status.phase == "SUCCEEDED" and deletes(d) == []


def test_cancel_after_a_failure_does_not_retry():
    d = run(cspec(cancel=True, retries=3), running(), [job()], [failed_pod()])
    assert d.status.phase == "CANCELLED" and creates(d) == []
    assert d.status.attempts[0].outcome == "failure"


def test_cancelled_job_still_running_later_is_stopped_again():
    d = run(cspec(cancel=True), running(), [job()], [pod()])
    again = run(cspec(cancel=True), d.status, [job()], [pod()])
    assert deletes(again) == ["kj-1"] and events(again) == []
    assert again.status == d.status


# ----------------------------------------------------------------------- terminal states are sticky


@pytest.mark.parametrize("outcome", ["ok", "fail"])
def test_terminal_states_never_relaunch(outcome):
    d = simulate(cspec(), [outcome])
    final = d.status
    for spec in (cspec(), cspec(retries=5), cspec(cancel=True), InvalidSpec("spec.x: bad")):
        for jobs, pods in (([], []), ([job()], [])):
            again = run(spec, final, jobs, pods, now=T0 + timedelta(hours=1))
            assert creates(again) == [] and events(again) == []
            assert again.status == final


def test_observed_generation_follows_the_spec_even_when_terminal():
    d = simulate(cspec(), ["ok"])
    assert run(cspec(), d.status, generation=9).status.observed_generation == 9


# ----------------------------------------------------------------------- invalid specs


def test_invalid_spec_fails_without_creating_anything():
    d = run(InvalidSpec("spec.container.command: List should have at least 1 item"))
    assert d.actions == (
        Event("Warning", "InvalidSpec", "spec.container.command: List should have at least 1 item"),
    )
    st = d.status
    assert st.phase == "FAILED" and st.attempt == 0 and st.attempts == []
    assert st.message.startswith("spec.container.command")
    assert cond(st, "Failed").status == "True" and cond(st, "Failed").reason == "Failed"


def test_spec_edited_into_nonsense_mid_run_stops_the_attempt():
    d = run(InvalidSpec("spec.accelerator: unknown"), running(), [job()], [pod()])
    assert d.status.phase == "FAILED" and deletes(d) == ["kj-1"]
    assert d.status.attempts[0].outcome == "failure"


def validate(raw: Any, name: str = "kj", root: str | None = "gs://b") -> Any:
    return validate_spec(name, raw, default_catalog(), storage_root=root, max_disruptions=3)


@pytest.mark.parametrize(
    "raw, start",
    [
        ({"container": {"image": "x"}}, "spec.container.command: Field required"),
        (
            {"container": {"command": []}},
            "spec.container.command: List should have at least 1 item",
        ),
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


def test_function_job_needs_a_result_uri_or_a_storage_root():
    raw = {"function": {"payloadURI": "gs://a/p", "sha256": SHA}}
    assert validate(raw, root=None).message.startswith("spec.function.resultURI: required")
    assert isinstance(validate(raw, root="gs://b"), KineticJobSpec)
    raw["function"]["resultURI"] = "gs://a/r"
    assert isinstance(validate(raw, root=None), KineticJobSpec)


def test_names_too_long_for_attempt_jobs_are_refused():
    raw = {"container": {"command": ["x"]}, "retries": 10}
    assert isinstance(validate(raw, name="a" * 50), KineticJobSpec)
    msg = validate(raw, name="a" * 61).message
    assert msg.startswith("metadata.name: too long")


def test_many_errors_are_summarised():
    raw = {
        "container": {"command": []},
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
    d = simulate(cspec(retries=10), ["fail"] * 6 + ["ok"], bounds=Bounds(history=3))
    st = d.status
    assert [r.attempt for r in st.attempts] == [5, 6, 7]
    assert st.attempt == 7 and st.failures == 6 and st.phase == "SUCCEEDED"


def test_a_job_newer_than_the_status_is_adopted():
    d = run(status=KineticJobStatus(), jobs=[job(1, failed_reason="x"), job(2)], pods=[pod(2)])
    assert creates(d) == [] and d.status.attempt == 2 and d.status.phase == "RUNNING"


def test_an_older_attempt_still_running_is_stopped():
    spec = cspec(retries=1)
    st = run(spec, running(spec), [job()], [failed_pod()]).status
    assert st.attempt == 2
    d = run(spec, st, [job(1), job(2)], [pod(1, suffix="z"), pod(2)])
    assert deletes(d) == ["kj-1"] and d.status.phase == "RUNNING"


def test_rejected_attempt_fails_the_job():
    st = rejected(started(), "Kubernetes refused Job kj-1: bad cpu", T0)
    assert st.phase == "FAILED" and st.message.endswith("bad cpu")
    assert (st.attempts[0].outcome, st.attempts[0].reason) == ("failure", "Rejected")
    assert cond(st, "Failed").status == "True"


def test_status_round_trips_through_the_wire():
    st = simulate(cspec(retries=2), ["fail", "delete", "ok"]).status
    assert KineticJobStatus.model_validate(st.wire()) == st
    assert Phase(st.phase) is Phase.SUCCEEDED


# ----------------------------------------------------------------------- summaries of API objects


def test_summarize_job_and_pod_from_api_bodies():
    j = summarize_job(
        {
            "metadata": {
                "name": "kj-2",
                "labels": {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "2"},
            },
            "status": {
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": "m",
                    }
                ],
            },
        }
    )
    assert j == JobView("kj-2", 2, "2026-01-01T00:00:00Z", False, False, "DeadlineExceeded", "m")
    assert j.finished
    p = summarize_pod(
        {
            "metadata": {
                "name": "kj-2-x",
                "creationTimestamp": "2026-01-01T00:00:01Z",
                "deletionTimestamp": "2026-01-01T00:00:09Z",
                "labels": {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "2"},
            },
            "status": {
                "phase": "Failed",
                "startTime": "2026-01-01T00:00:02Z",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                    },
                ],
                "containerStatuses": [
                    {
                        "name": "main",
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "OOMKilled",
                                "message": "out of memory\n",
                                "finishedAt": "2026-01-01T00:00:08Z",
                            }
                        },
                    }
                ],
            },
        }
    )
    assert replace(p) == PodView(
        name="kj-2-x",
        attempt=2,
        phase="Failed",
        created="2026-01-01T00:00:01Z",
        deleting=True,
        start_time="2026-01-01T00:00:02Z",
        exit_code=137,
        terminated_reason="OOMKilled",
        termination_message="out of memory",
        finished_at="2026-01-01T00:00:08Z",
        disruption="EvictionByEvictionAPI",
    )
    assert not p.live and p.terminal
    pending = summarize_pod(
        {
            "metadata": {"name": "p", "labels": {"kinetic.dev/attempt": "bogus"}},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "no nodes",
                    }
                ]
            },
        }
    )
    assert pending.attempt == 0 and pending.unschedulable == "no nodes" and pending.live
    assert summarize_job({"metadata": {"name": "j"}}) == JobView("j", 0)


def test_job_complete_before_its_pod_is_seen_ending_waits_for_the_pod():
    """Watches race: the termination message is on the pod, so wait for it."""
    d = run(status=running(), jobs=[job(complete=True)], pods=[pod()])
    assert d.status.phase == "RUNNING" and d.actions == ()
    d = run(status=d.status, jobs=[job(complete=True)], pods=[ok_pod(message="late")])
    assert d.status.phase == "SUCCEEDED" and d.status.result == "late"


def test_job_failed_before_its_pod_is_seen_ending_waits_for_the_pod():
    j = job(failed_reason="BackoffLimitExceeded")
    d = run(status=running(), jobs=[j], pods=[pod()])
    assert d.status.phase == "RUNNING" and d.actions == ()
    d = run(status=d.status, jobs=[j], pods=[failed_pod(exit_code=7)])
    assert d.status.phase == "FAILED" and d.status.attempts[0].exit_code == 7


@pytest.mark.parametrize(
    "finished", [dict(complete=True), dict(failed_reason="BackoffLimitExceeded")]
)
def test_job_finished_before_its_pod_was_ever_seen_waits_then_settles(finished):
    """A finished Job whose pod we never saw: wait for the pod, but not forever."""
    j = job(finished_time=fmt_time(T0), **finished)
    d = run(status=started(), jobs=[j], pods=[], now=T0 + timedelta(seconds=10))
    assert d.status.phase == "PENDING" and d.actions == ()
    assert d.recheck_after == pytest.approx(20)
    late = run(status=d.status, jobs=[j], pods=[], now=T0 + timedelta(seconds=31))
    assert late.recheck_after is None
    assert late.status.phase == ("SUCCEEDED" if "complete" in finished else "FAILED")


def test_running_job_whose_job_finished_first_stays_running_while_catching_up():
    st = run(status=started(), jobs=[job()], pods=[]).status  # job seen, no pod yet
    j = job(complete=True, finished_time=fmt_time(T0))
    d = run(status=st, jobs=[j], pods=[])
    assert d.recheck_after is not None and d.status.phase == "PENDING"
    d = run(status=d.status, jobs=[j], pods=[ok_pod(message="m")])
    assert d.status.phase == "SUCCEEDED" and d.status.result == "m"


def test_pod_replaced_by_the_job_controller_and_finished_still_counts_a_disruption():
    """We saw pod a running; it was deleted and the Job's pod b finished before we looked."""
    d = run(
        status=running(),
        jobs=[job(complete=True)],
        pods=[ok_pod(suffix="b", message="done")],
    )
    st = d.status
    assert st.phase == "SUCCEEDED" and st.attempt == 1
    assert (st.disruptions, st.failures) == (1, 0)
    assert st.attempts[0].pod == "kj-1-b"
    assert ("Warning", "AttemptDisrupted") in events(d)
