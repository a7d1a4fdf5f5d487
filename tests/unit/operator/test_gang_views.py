"""A multi-host attempt's member Pods seen as the one view the attempt planner reads.

`gangs.see` groups the members (``kj-<attempt>-<rank>``) by attempt and
hands back one view per attempt (``kj-<attempt>``) with every member's
record, and the `Gang` that says which members to delete and which ranks
still need a Pod. `ranks_to_create` is the table of which ranks start when.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from kinetic.model.catalog import default_catalog
from kinetic.model.gang import DEFAULT_SCHEDULING_DEADLINE
from kinetic.model.resources import AttemptRecord, KineticJobSpec
from kinetic_operator.logic.attempts import pod_end
from kinetic_operator.logic.gang_verdicts import Outcome
from kinetic_operator.logic.gangs import UNSCHEDULABLE, Ranks, hosts_of_spec, ranks_to_create, see
from kinetic_operator.logic.observed import PodView
from kinetic_testing.pod_views import T0, at, deleting, failed, member, stamp, succeeded, tombstone

CATALOG = default_catalog()


def outcomes(view: PodView) -> list[tuple[int, str, str]]:
    """(rank, Pod, outcome) of every member the view records."""
    return [(m.rank, m.pod, m.outcome) for m in view.members or ()]


# --------------------------------------------------------------------------- one host


def test_one_host_passes_the_attempt_pods_through_unchanged():
    pods = [
        PodView(name="kj-a1", attempt=1, phase="Failed", exit_code=1),
        PodView(name="kj-a2", attempt=2, phase="Running"),
    ]
    views, gang = see(pods, 1, T0)
    assert gang is None
    assert views == {1: pods[0], 2: pods[1]}


# --------------------------------------------------------------------------- live gangs


def test_two_members_running_are_one_running_attempt():
    views, gang = see([member(0), member(1)], 2, at(10))
    (view,) = views.values()
    assert (view.name, view.attempt, view.phase, view.rank) == ("kj-a1", 1, "Running", None)
    assert outcomes(view) == [(0, "kj-a1-r0", "running"), (1, "kj-a1-r1", "running")]
    assert gang is not None and gang.teardown == () and gang.missing(1, "kj-a1") == ()
    assert gang.verdicts[1].outcome is Outcome.RUNNING


def test_a_member_waiting_for_a_node_keeps_the_attempt_pending_and_says_why():
    why = "0/3 nodes are available: 3 Insufficient google.com/tpu."
    views, gang = see([member(0), member(1, "Pending", unschedulable=why)], 2, at(10))
    view = views[1]
    assert (view.name, view.phase, view.unschedulable) == ("kj-a1", "Pending", why)
    assert view.start_time == stamp(0)  # the gang's, not the waiting member's (none)
    assert outcomes(view)[1] == (1, "kj-a1-r1", "pending")
    assert gang is not None and gang.teardown == ()


def test_ranks_not_created_yet_wait_as_pending_since_the_gang_began_not_as_lost():
    """Without DNS rank 0 is created first: the others are missing, not gone."""
    views, gang = see([member(0, "Pending")], 2, at(60))
    view = views[1]
    assert view.phase == "Pending" and view.disruption is None
    assert outcomes(view) == [(0, "kj-a1-r0", "pending"), (1, "kj-a1-r1", "pending")]
    assert view.members is not None and view.members[1].reason == "its Pod is not created yet"
    assert gang is not None and gang.missing(1, "kj-a1") == (1,) and gang.teardown == ()


def test_a_missing_rank_counts_against_the_scheduling_deadline_from_the_gangs_start():
    late = at(DEFAULT_SCHEDULING_DEADLINE.total_seconds())
    views, gang = see([member(0, "Pending")], 2, late)
    assert views[1].terminated_reason == UNSCHEDULABLE
    assert "2 of 2 members (rank 0, 1) waited for a node" in (views[1].termination_message or "")
    assert gang is not None and gang.teardown == ("kj-a1-r0",)


# --------------------------------------------------------------------------- verdicts


def test_rank_0_succeeding_is_the_attempts_success_and_its_peers_are_torn_down():
    views, gang = see([succeeded(member(0), "42"), member(1)], 2, at(6))
    view = views[1]
    assert (view.name, view.phase, view.termination_message) == ("kj-a1", "Succeeded", "42")
    assert pod_end(view, at(6)) is not None and pod_end(view, at(6)).outcome == "success"
    assert outcomes(view) == [(0, "kj-a1-r0", "succeeded"), (1, "kj-a1-r1", "stopped")]
    assert gang is not None and gang.teardown == ("kj-a1-r1",)


def test_a_failing_rank_fails_the_attempt_with_its_exit_code_and_rank_0_is_torn_down():
    views, gang = see([member(0), failed(member(1), exit_code=3, message="boom")], 2, at(6))
    view = views[1]
    assert (view.name, view.phase, view.exit_code) == ("kj-a1", "Failed", 3)
    assert view.disruption is None
    assert view.termination_message == "rank 1 failed: Error (exit code 3): boom"
    end = pod_end(view, at(6))
    assert end is not None and (end.outcome, end.exit_code) == ("failure", 3)
    assert "rank 1" in (end.message or "")
    assert outcomes(view) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "failed")]
    assert view.members is not None and view.members[1].exit_code == 3
    assert gang is not None and gang.teardown == ("kj-a1-r0",)


@pytest.mark.parametrize(
    "lost",
    [tombstone(member(1)), deleting(member(1), when=3)],
    ids=["tombstone", "deleting"],
)
def test_a_member_deleted_under_a_running_gang_is_a_disruption(lost):
    views, gang = see([member(0), lost], 2, at(6))
    view = views[1]
    end = pod_end(view, at(6))
    assert end is not None and (end.outcome, end.reason) == ("disruption", "PodDeleted")
    assert view.message == "rank 1 was lost: PodDeleted: pod kj-a1-r1 was deleted"
    assert not view.gone and not view.deleting  # the attempt's view is not itself a tombstone
    assert outcomes(view) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "gone")]
    assert gang is not None and gang.teardown == ("kj-a1-r0",)


def test_a_member_pending_past_the_deadline_fails_the_attempt_as_unschedulable():
    deadline = timedelta(minutes=5)
    pods = [member(0), member(1, "Pending", unschedulable="0/3 nodes are available")]
    before, _ = see(pods, 2, at(299), deadline)
    assert before[1].phase == "Pending"
    views, gang = see(pods, 2, at(300), deadline)
    view = views[1]
    assert (view.phase, view.terminated_reason, view.exit_code) == ("Failed", UNSCHEDULABLE, None)
    assert view.termination_message == (
        "1 of 2 members (rank 1) waited for a node for 300 s or more; the gang was torn down"
    )
    end = pod_end(view, at(300))
    assert end is not None and (end.outcome, end.reason) == ("failure", UNSCHEDULABLE)
    assert gang is not None and gang.teardown == ("kj-a1-r0", "kj-a1-r1")


def test_a_live_sight_wins_over_an_older_tombstone_of_the_same_name():
    views, _ = see([tombstone(member(1)), member(0), member(1)], 2, at(6))
    assert views[1].phase == "Running"


def test_members_of_several_attempts_make_one_view_each():
    pods = [failed(member(0)), failed(member(1)), member(0, attempt=2), member(1, attempt=2)]
    views, gang = see(pods, 2, at(10))
    assert {a: (v.name, v.phase) for a, v in views.items()} == {
        1: ("kj-a1", "Failed"),
        2: ("kj-a2", "Running"),
    }
    assert gang is not None and gang.members_of(2) == ("kj-a2-r0", "kj-a2-r1")
    assert gang.members_of(1) == ()


# --------------------------------------------------------------------------- settled


def _failure_record() -> AttemptRecord:
    """What the owner recorded when rank 1 failed, before it deleted rank 0."""
    views, _ = see([member(0), failed(member(1), exit_code=3)], 2, at(5))
    view = views[1]
    return AttemptRecord(
        attempt=1,
        pod="kj-a1",
        outcome="failure",
        reason="Error",
        exit_code=3,
        message=view.termination_message,
        members=list(view.members or ()),
    )


@pytest.mark.parametrize(
    "rank0",
    [deleting(member(0), when=5), tombstone(deleting(member(0), when=5))],
    ids=["deleting", "gone"],
)
def test_a_recorded_failure_stands_when_the_member_the_operator_deleted_shows_up_lost(rank0):
    """The operator deletes rank 0 in the same second rank 1 failed: read on its own, that
    loss would come first and turn the failure into a free disruption."""
    pods = [rank0, failed(member(1), exit_code=3)]
    unsettled, _ = see(pods, 2, at(6))
    assert unsettled[1].disruption == "PodDeleted"  # why the record must win
    views, gang = see(pods, 2, at(6), settled={1: _failure_record()})
    view = views[1]
    assert (view.phase, view.disruption, view.exit_code) == ("Failed", None, 3)
    assert view.termination_message == "rank 1 failed: Error (exit code 3): boom"
    end = pod_end(view, at(6))
    assert end is not None and end.outcome == "failure"
    assert outcomes(view) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "failed")]
    assert gang is not None and gang.verdicts[1].outcome is Outcome.FAILED
    assert gang.teardown == ()  # rank 0 is already on its way out


def test_a_record_still_running_does_not_settle_the_attempt():
    running = AttemptRecord(attempt=1, pod="kj-a1", outcome="running")
    views, _ = see([member(0), tombstone(member(1))], 2, at(6), settled={1: running})
    assert views[1].disruption == "PodDeleted"


# --------------------------------------------------------------------------- ranks_to_create


def _gang(*pods: PodView, creating: tuple[str, ...] = ()):
    _, gang = see(pods, 2, at(1), creating=creating)
    return gang


@pytest.mark.parametrize(
    "pods, creating, dns, expected",
    [
        ((), (), True, Ranks((0, 1))),
        ((), (), False, Ranks((0,))),
        ((), ("kj-a1-r0",), False, None),  # rank 0 is on its way
        ((), ("kj-a1-r0",), True, Ranks((1,))),
        ((), ("kj-a1-r0", "kj-a1-r1"), True, None),
        ((member(0, "Pending"),), (), False, None),  # no IP yet: the others wait
        ((member(0, pod_ip="10.0.0.7"),), (), False, Ranks((1,), "10.0.0.7")),
        ((member(0, pod_ip="10.0.0.7"),), ("kj-a1-r1",), False, None),
        ((member(0),), (), True, Ranks((1,))),
        ((member(0, pod_ip="10.0.0.7"), member(1)), (), False, None),  # all there
        ((member(0, pod_ip="10.0.0.7"), member(1)), (), True, None),
    ],
    ids=[
        "dns-nothing-seen",
        "podip-nothing-seen",
        "podip-rank0-being-created",
        "dns-rank0-being-created",
        "dns-all-being-created",
        "podip-rank0-without-ip",
        "podip-rank0-with-ip",
        "podip-rank1-being-created",
        "dns-rank0-seen",
        "podip-all-seen",
        "dns-all-seen",
    ],
)
def test_ranks_to_create(pods, creating, dns, expected):
    assert ranks_to_create(_gang(*pods, creating=creating), 1, "kj-a1", 2, dns=dns) == expected


@pytest.mark.parametrize("dns, expected", [(True, Ranks((0, 1))), (False, Ranks((0,)))])
def test_ranks_to_create_before_any_member_was_seen(dns, expected):
    assert ranks_to_create(None, 1, "kj-a1", 2, dns=dns) == expected


def test_a_rank_0_deleted_gives_no_coordinator_ip():
    gang = _gang(deleting(member(0, pod_ip="10.0.0.7"), when=0))
    assert gang is not None and gang.coordinator_ip(1) is None


def test_an_attempt_with_a_verdict_creates_nothing_more():
    gang = _gang(failed(member(0, pod_ip="10.0.0.7"), when=1))
    assert gang is not None and gang.missing(1, "kj-a1") == ()
    assert ranks_to_create(gang, 1, "kj-a1", 2, dns=True) is None


def test_one_host_creates_no_ranks():
    assert ranks_to_create(None, 1, "kj-a1", 1, dns=True) is None
    assert ranks_to_create(None, 1, "kj-a1", 1, dns=False) is None


# --------------------------------------------------------------------------- hosts_of_spec


@pytest.mark.parametrize(
    "raw, hosts",
    [
        ({}, 1),
        ({"hosts": 3}, 3),
        ({"accelerator": "tpu-v5e-16"}, 4),
        ({"accelerator": "tpu-v4-16", "hosts": 2}, 2),
        ({"accelerator": "gpu-l4x1", "hosts": 2}, 2),
    ],
)
def test_hosts_of_a_spec(raw, hosts):
    spec = KineticJobSpec.model_validate({"container": {"command": ["x"]}, **raw})
    assert hosts_of_spec(spec, CATALOG, []) == hosts


def test_hosts_of_a_spec_that_cannot_run_are_what_its_pods_show():
    pods = [member(0), member(2), PodView(name="kj-a1", attempt=1)]
    assert hosts_of_spec(object(), CATALOG, pods) == 3
    assert hosts_of_spec(object(), CATALOG, []) == 1


def test_a_member_this_process_just_deleted_is_not_deleted_again():
    """Between the delete and the watch showing it, the member still looks live: the next
    decision must not send a second delete for it."""
    pods = [member(0, "Succeeded"), member(1)]
    _, gang = see(pods, 2, at(10))
    assert gang is not None and gang.teardown == ("kj-a1-r1",)
    _, gang = see(pods, 2, at(10), stopping={"kj-a1-r1"})
    assert gang is not None and gang.teardown == ()
    _, running = see([member(0), member(1)], 2, at(10), stopping={"kj-a1-r0"})
    assert running is not None and running.members_of(1) == ("kj-a1-r1",)
