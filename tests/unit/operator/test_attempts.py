"""The attempt planner, as a table: observed attempt Pods -> what happens next."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from kinetic_operator.logic.attempts import Limits, UnitPlan, plan_unit
from kinetic_operator.logic.observed import PodView

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def name(k: int) -> str:
    return f"u-{k}"


def pod(k: int, phase: str = "Running", **kw: object) -> PodView:
    return PodView(name=name(k), attempt=k, phase=phase, **kw)  # type: ignore[arg-type]


def ok(k: int) -> PodView:
    return pod(k, "Succeeded", exit_code=0, termination_message="42")


def stuck(k: int, reason: str, seconds: int) -> PodView:
    """A Pending Pod whose container has waited ``seconds`` for ``reason``."""
    started = NOW - timedelta(seconds=seconds)
    return pod(
        k,
        "Pending",
        waiting_reason=reason,
        waiting_message=f"{reason} for image x:1",
        start_time=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def failed(k: int, **kw: object) -> PodView:
    return pod(k, "Failed", exit_code=1, terminated_reason="Error", **kw)


def plan(
    *pods: PodView,
    reserved: int = 1,
    creating: bool = False,
    retries: int = 0,
    max_disruptions: int = 3,
    cancel: bool = False,
) -> UnitPlan:
    return plan_unit(
        {p.attempt: p for p in pods},
        reserved=reserved,
        creating=creating,
        limits=Limits(retries, max_disruptions),
        cancel=cancel,
        pod_name=name,
        now=NOW,
    )


@pytest.mark.parametrize(
    ("pods", "kw", "outcome", "create", "stop", "failures", "disruptions"),
    [
        # nothing committed yet
        ((), {"reserved": 0}, "pending", 1, (), 0, 0),
        ((), {"reserved": 0, "cancel": True}, "cancelled", None, (), 0, 0),
        # committed, Pod never seen: create it (again: the name makes that idempotent) ...
        ((), {}, "pending", 1, (), 0, 0),
        # ... unless this process just created it and the watch is behind
        ((), {"creating": True}, "pending", None, (), 0, 0),
        ((pod(1, "Pending"),), {}, "pending", None, (), 0, 0),
        ((pod(1),), {}, "running", None, (), 0, 0),
        ((ok(1),), {}, "succeeded", None, (), 0, 0),
        # an application failure spends a retry ...
        ((failed(1),), {"retries": 1}, "pending", 2, (), 1, 0),
        ((failed(1), failed(2)), {"retries": 1}, "failed", None, (), 2, 0),
        ((failed(1), ok(2)), {"retries": 1}, "succeeded", None, (), 1, 0),
        ((failed(1, reason="DeadlineExceeded"),), {}, "failed", None, (), 1, 0),
        # ... a disruption does not
        ((pod(1, gone=True),), {}, "pending", 2, (), 0, 1),
        ((pod(1, deleting=True),), {}, "pending", 2, (), 0, 1),
        ((failed(1, reason="Evicted"),), {}, "pending", 2, (), 0, 1),
        ((pod(1, disruption="EvictionByEvictionAPI"),), {}, "pending", 2, (name(1),), 0, 1),
        # a Pod that vanished before we saw it end, below the current attempt
        ((failed(2),), {"reserved": 2, "retries": 1}, "pending", 3, (), 1, 1),
        # too many disruptions end it
        (
            (pod(1, gone=True), pod(2, gone=True)),
            {"max_disruptions": 1},
            "failed",
            None,
            (),
            0,
            2,
        ),
        # a success seen after deletion still counts
        ((pod(1, "Succeeded", gone=True),), {}, "succeeded", None, (), 0, 0),
        # cancel stops the live Pod; a success wins over a cancel
        ((pod(1),), {"cancel": True}, "cancelled", None, (name(1),), 0, 0),
        ((ok(1),), {"cancel": True}, "succeeded", None, (), 0, 0),
        ((failed(1),), {"cancel": True, "retries": 3}, "cancelled", None, (), 1, 0),
        # only the newest attempt runs: an older live one is stopped
        ((pod(1), pod(2)), {}, "running", None, (name(1),), 0, 0),
        # a Pod killed by its own deletion (SIGTERM: Failed while deleting) is a disruption ...
        ((failed(1, deleting=True),), {}, "pending", 2, (), 0, 1),
        # ... but one that ran out of its deadline is a failure even if it is being deleted
        ((failed(1, reason="DeadlineExceeded", deleting=True),), {}, "failed", None, (), 1, 0),
        # a node shut down or the kubelet terminated it: evicted, so a disruption
        ((failed(1, reason="Shutdown"),), {}, "pending", 2, (), 0, 1),
        ((failed(1, reason="Terminated"),), {}, "pending", 2, (), 0, 1),
        ((pod(1, disruption="DeletionByPodGC"),), {}, "pending", 2, (name(1),), 0, 1),
        # a success anywhere wins, and a later live attempt is stopped
        ((ok(1), pod(2)), {"reserved": 2}, "succeeded", None, (name(2),), 0, 0),
        # the newest attempt was lost and an older one is still live: stop it, start the next
        ((pod(1), pod(2, gone=True)), {"reserved": 2}, "pending", 3, (name(1),), 0, 1),
        # cancel of an attempt not seen yet: nothing to stop, nothing to create
        ((), {"creating": True, "cancel": True}, "cancelled", None, (), 0, 0),
        # exactly max_disruptions is still retried for free
        ((pod(1, gone=True), pod(2, gone=True)), {"max_disruptions": 2}, "pending", 3, (), 0, 2),
        # a container that cannot start fails its attempt (and its Pod is stopped): at once
        # for a name that is no image, after the grace for a pull that may yet work
        ((stuck(1, "InvalidImageName", 0),), {}, "failed", None, (name(1),), 1, 0),
        ((stuck(1, "ErrImagePull", 5),), {}, "pending", None, (), 0, 0),
        ((stuck(1, "ImagePullBackOff", 31),), {}, "failed", None, (name(1),), 1, 0),
        ((stuck(1, "ImagePullBackOff", 31),), {"retries": 1}, "pending", 2, (name(1),), 1, 0),
        ((stuck(1, "CreateContainerConfigError", 45),), {}, "failed", None, (name(1),), 1, 0),
        # waiting to be created is no failure, however long
        ((stuck(1, "ContainerCreating", 600),), {}, "pending", None, (), 0, 0),
    ],
)
def test_plan_table(
    pods: tuple[PodView, ...],
    kw: dict,
    outcome: str,
    create: int | None,
    stop: tuple[str, ...],
    failures: int,
    disruptions: int,
) -> None:
    p = plan(*pods, **kw)
    assert (p.outcome, p.create, p.stop, p.failures, p.disruptions) == (
        outcome,
        create,
        stop,
        failures,
        disruptions,
    )


def test_records_say_how_each_attempt_ended() -> None:
    p = plan(failed(1), pod(2, gone=True), ok(3), reserved=3, retries=2)
    assert [(r.attempt, r.outcome) for r in p.records] == [
        (1, "failure"),
        (2, "disruption"),
        (3, "success"),
    ]
    assert p.last is not None and p.last.termination_message == "42"
    assert p.message == "Succeeded on attempt 3."


def test_retry_message_names_the_failure_and_the_retry() -> None:
    p = plan(failed(1, termination_message="boom\nValueError: bad"), retries=2)
    assert p.message == (
        "Attempt 1 failed (Error, exit code 1: ValueError: bad); retry 1 of 2; "
        "attempt 2 is starting."
    )
    assert [r.outcome for r in p.records] == ["failure", "pending"]


def test_final_failure_message_says_how_many_retries() -> None:
    assert plan(failed(1)).message == "Failed on attempt 1 with no retries: Error, exit code 1."
    p = plan(failed(1), failed(2), reserved=2, retries=1)
    assert p.message.startswith("Failed on attempt 2 after 1 retries")


def test_a_recorded_attempt_whose_pod_is_gone_keeps_its_record() -> None:
    from kinetic.model.resources import AttemptRecord

    known = {1: AttemptRecord(attempt=1, pod=name(1), outcome="failure", reason="Error")}
    p = plan_unit(
        {},
        reserved=2,
        creating=True,
        limits=Limits(1, 3),
        cancel=False,
        pod_name=name,
        now=NOW,
        known=known,
    )
    assert (p.outcome, p.failures, p.disruptions, p.create) == ("pending", 1, 0, None)


def test_a_deleted_pod_only_counts_once_its_successor_is_the_current_attempt() -> None:
    """The tombstone of attempt 1 and a reservation of attempt 2: create 2, charge nothing more."""
    p = plan(pod(1, gone=True), reserved=2)
    assert (p.outcome, p.create, p.failures, p.disruptions) == ("pending", 2, 0, 1)
    p = plan(pod(1, gone=True), reserved=2, creating=True)
    assert (p.outcome, p.create, p.reason) == ("pending", None, "Creating")


def test_too_many_disruptions_says_how_many_and_the_limit() -> None:
    p = plan(
        pod(1, gone=True), failed(2, reason="Evicted", message="node drained"), max_disruptions=1
    )
    assert p.outcome == "failed" and p.reason == "TooManyDisruptions"
    assert p.message.startswith("Failed on attempt 2: disrupted 2 times (the operator allows 1)")
    assert "node drained" in p.message


def test_an_image_that_exists_nowhere_fails_with_the_kubelets_words() -> None:
    p = plan(stuck(1, "ImagePullBackOff", 40))
    assert p.reason == "ImagePullBackOff"
    assert "ImagePullBackOff for image x:1" in p.message and "with no retries" in p.message
    assert p.records[-1].outcome == "failure" and p.records[-1].reason == "ImagePullBackOff"


def test_waiting_messages_say_why_a_pod_is_not_running() -> None:
    p = plan(pod(1, "Pending", unschedulable="0/3 nodes are available"))
    assert p.message == "Attempt 1 cannot be scheduled yet: 0/3 nodes are available"
    p = plan(pod(1, "Pending", waiting_reason="ErrImagePull", waiting_message="not found"))
    assert p.message == "Attempt 1 is starting (ErrImagePull: not found)."


def test_records_clip_long_messages_and_keep_pod_times() -> None:
    p = plan(failed(1, termination_message="x" * 5000, finished_at="2026-01-01T12:00:09Z"))
    (rec,) = p.records
    assert len(rec.message) == 4096 and rec.message.endswith("…")
    assert rec.end_time == "2026-01-01T12:00:09Z"


def test_a_recorded_failure_stays_a_failure_when_its_pod_is_deleted_later() -> None:
    """`known` says attempt 1 failed; later its finished Pod is deleted (the tombstone has a
    deletionTimestamp). Counting it as a disruption would grant an attempt beyond retries."""
    from kinetic.model.resources import AttemptRecord

    known = {1: AttemptRecord(attempt=1, pod=name(1), outcome="failure", reason="Error")}
    p = plan_unit(
        {1: failed(1, deleting=True, gone=True), 2: failed(2)},
        reserved=2,
        creating=False,
        limits=Limits(1, 3),
        cancel=False,
        pod_name=name,
        now=NOW,
        known=known,
    )
    assert (p.outcome, p.failures, p.disruptions) == ("failed", 2, 0)


@pytest.mark.parametrize(
    ("pods", "kw", "cause"),
    [
        ((), {"reserved": 0}, "first"),
        ((), {}, "first"),  # attempt 1 reserved, its Pod never seen: still the first
        ((failed(1),), {"retries": 1}, "retry"),
        ((pod(1, gone=True),), {}, "disruption"),
        ((failed(1, reason="Evicted"),), {}, "disruption"),
        ((failed(2),), {"reserved": 2, "retries": 1}, "retry"),
        # attempt 2 reserved, its Pod never seen: why it was started is not kept
        ((failed(1),), {"reserved": 2, "retries": 1}, None),
        ((pod(1),), {}, None),  # nothing to create, nothing to explain
    ],
)
def test_each_created_attempt_says_why_it_is_started(
    pods: tuple[PodView, ...], kw: dict[str, object], cause: str | None
) -> None:
    """The metrics tell first attempts, retries and disruption re-runs apart by this."""
    assert plan(*pods, **kw).cause == cause  # type: ignore[arg-type]


def test_an_image_pull_failure_stays_a_failure_once_its_pod_is_stopped() -> None:
    """The planner fails attempt 1 (ImagePullBackOff past the grace) and stops its Pod; the
    Pod then reads as deleted. With the verdict recorded it stays a failure, so `retries: 1`
    ends the unit after two attempts instead of turning each failure into a free disruption
    and retrying for ever."""
    first = plan(stuck(1, "ImagePullBackOff", 31), retries=1)
    assert (first.outcome, first.create, first.stop) == ("pending", 2, (name(1),))
    known = {r.attempt: r for r in first.records}
    stopped = replace(stuck(1, "ImagePullBackOff", 33), deleting=True)
    again = plan_unit(
        {1: stopped, 2: stuck(2, "ImagePullBackOff", 31)},
        reserved=2,
        creating=False,
        limits=Limits(1, 3),
        cancel=False,
        pod_name=name,
        now=NOW,
        known=known,
    )
    assert (again.outcome, again.failures, again.disruptions) == ("failed", 2, 0)
    assert [r.outcome for r in again.records] == ["failure", "failure"]
    assert again.reason == "ImagePullBackOff"


def test_the_disruption_bound_holds_when_a_failure_would_start_the_next_attempt() -> None:
    """Three disruptions recorded (the operator allows 2), then a failure with a retry
    left: no fourth attempt starts; the unit fails naming the disruptions."""
    from kinetic.model.resources import AttemptRecord

    known = {
        k: AttemptRecord(attempt=k, pod=name(k), outcome="disruption", reason="PodDeleted")
        for k in (1, 2, 3)
    }
    p = plan_unit(
        {4: failed(4)},
        reserved=4,
        creating=False,
        limits=Limits(retries=5, max_disruptions=2),
        cancel=False,
        pod_name=name,
        now=NOW,
        known=known,
    )
    assert (p.outcome, p.reason, p.create) == ("failed", "TooManyDisruptions", None)
    assert "disrupted 3 times (the operator allows 2)" in p.message


@pytest.mark.parametrize(
    ("waited", "bound", "outcome"),
    [
        (599, 600.0, "pending"),  # still within the bound: the scheduler may find room
        (600, 600.0, "failed"),  # past it: the attempt fails, with the scheduler's words
        (10_000, None, "pending"),  # no bound: it waits for ever
    ],
)
def test_a_pod_no_node_takes_fails_as_unschedulable_after_the_bound(
    waited: int, bound: float | None, outcome: str
) -> None:
    created = (NOW - timedelta(seconds=waited)).strftime("%Y-%m-%dT%H:%M:%SZ")
    view = pod(
        1, "Pending", created=created, unschedulable="0/1 nodes are available: 1 Insufficient gpu"
    )
    p = plan_unit(
        {1: view},
        reserved=1,
        creating=False,
        limits=Limits(0, 3, unschedulable_seconds=bound),
        cancel=False,
        pod_name=name,
        now=NOW,
    )
    assert p.outcome == outcome
    if outcome == "failed":
        assert p.reason == "Unschedulable" and p.stop == (name(1),)
        assert "1 Insufficient gpu" in p.message and "waits 600s" in p.message
