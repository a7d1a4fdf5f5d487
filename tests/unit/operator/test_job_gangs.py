"""A multi-host KineticJob played step by step against a small in-test cluster.

`Cluster` holds the member Pods by name and does what the handler does on
each reconcile: `gangs.see` over the members (the status's attempt records
as ``settled``), `job_logic.decide`, then the status is written and the
actions applied: a `CreatePod` adds its ranks as Pending Pods, a
`DeletePod` marks its Pod terminating. Each test moves the Pods along in
between (placed, given an IP, failed, deleted) and reads what a user would
see: the phase, the message, the attempt records and their members.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kinetic.model.names import fmt_time
from kinetic.model.resources import KineticJobSpec, KineticJobStatus
from kinetic_operator.logic import gangs
from kinetic_operator.logic.job_logic import CreatePod, Decision, DeletePod, Event, decide
from kinetic_operator.logic.observed import PodView
from kinetic_testing.pod_views import T0, stamp


def gang_spec(**extra: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate({"container": {"command": ["train"]}, "hosts": 2, **extra})


@dataclass
class Cluster:
    """The member Pods of KineticJob ``kj``, and its status as last written."""

    spec: KineticJobSpec
    dns: bool = False
    pods: dict[str, PodView] = field(default_factory=dict)
    status: KineticJobStatus = field(default_factory=KineticJobStatus)
    now: datetime = T0

    def decide(self) -> Decision:
        """One reconcile: see, decide, write the status, apply the actions."""
        views, gang = gangs.see(
            self.pods.values(),
            2,
            self.now,
            settled={r.attempt: r for r in self.status.attempts},
        )
        d = decide(
            name="kj",
            spec=self.spec,
            status=self.status,
            pods=views,
            gang=gang,
            dns=self.dns,
            now=self.now,
        )
        self.status = d.status
        for action in d.actions:
            if isinstance(action, CreatePod):
                for rank in action.ranks:
                    name = f"kj-a{action.attempt}-r{rank}"
                    pod = PodView(
                        name,
                        action.attempt,
                        rank=rank,
                        created=fmt_time(self.now),
                        attempt_pod=f"kj-a{action.attempt}",
                    )
                    self.pods.setdefault(name, pod)
            elif isinstance(action, DeletePod):
                self.pods[action.pod] = replace(
                    self.pods[action.pod], deleting=True, deleted_at=fmt_time(self.now)
                )
        self.now += timedelta(seconds=1)
        return d

    def change(self, name: str, **kw: Any) -> None:
        self.pods[name] = replace(self.pods[name], **kw)

    def place(self, name: str, ip: str | None = None) -> None:
        """The Pod is on a node and its container runs; ``ip`` once the cluster gave one."""
        self.change(name, phase="Running", start_time=fmt_time(self.now), pod_ip=ip)

    def exit(self, name: str, code: int) -> None:
        phase = "Succeeded" if code == 0 else "Failed"
        reason = "Completed" if code == 0 else "Error"
        message = "42" if code == 0 else "boom"
        self.change(
            name,
            phase=phase,
            exit_code=code,
            terminated_reason=reason,
            termination_message=message,
            finished_at=fmt_time(self.now),
        )

    def finish_deletions(self) -> None:
        """Every terminating Pod is gone (its tombstone stays in the index)."""
        for name, pod in self.pods.items():
            if pod.deleting:
                self.pods[name] = replace(pod, gone=True)

    def running(self, attempt: int, ip: str = "10.0.0.7") -> None:
        """Both members of ``attempt`` created, placed and running."""
        self.decide()
        self.place(f"kj-a{attempt}-r0", ip)
        self.decide()
        self.place(f"kj-a{attempt}-r1")
        d = self.decide()
        assert d.status.phase == "RUNNING" and d.actions == ()


def creates(d: Decision) -> list[CreatePod]:
    return [a for a in d.actions if isinstance(a, CreatePod)]


def deletes(d: Decision) -> list[str]:
    return [a.pod for a in d.actions if isinstance(a, DeletePod)]


def events(d: Decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in d.actions if isinstance(a, Event)]


def members(status: KineticJobStatus, attempt: int) -> list[tuple[int, str, str]]:
    record = next(r for r in status.attempts if r.attempt == attempt)
    return [(m.rank, m.pod, m.outcome) for m in record.members or ()]


# --------------------------------------------------------------------------- starting


def test_without_dns_rank_0_is_created_first_and_the_others_once_it_has_an_ip():
    c = Cluster(gang_spec(), dns=False)
    d = c.decide()
    assert creates(d) == [CreatePod(1, "first", (0,), None)]
    assert events(d) == [("Normal", "Started")]
    assert (c.status.phase, c.status.attempt) == ("PENDING", 1)
    assert list(c.pods) == ["kj-a1-r0"]

    assert c.decide().actions == ()  # rank 0 is Pending: nothing to create, nothing said
    c.place("kj-a1-r0")
    assert c.decide().actions == ()  # running, but no IP yet
    assert c.status.phase == "PENDING"

    c.place("kj-a1-r0", "10.0.0.7")
    d = c.decide()
    assert creates(d) == [CreatePod(1, None, (1,), "10.0.0.7")]
    assert events(d) == [] and deletes(d) == []
    assert c.decide().actions == ()  # rank 1 exists now: not created twice

    c.place("kj-a1-r1")
    d = c.decide()
    assert d.actions == ()
    assert c.status.phase == "RUNNING" and c.status.message == "Attempt 1 is running in pod kj-a1."
    assert members(c.status, 1) == [(0, "kj-a1-r0", "running"), (1, "kj-a1-r1", "running")]


def test_with_dns_every_rank_is_created_at_once():
    c = Cluster(gang_spec(), dns=True)
    d = c.decide()
    assert creates(d) == [CreatePod(1, "first", (0, 1), None)]
    assert sorted(c.pods) == ["kj-a1-r0", "kj-a1-r1"]
    assert c.decide().actions == ()


# --------------------------------------------------------------------------- failures


def test_a_failing_rank_stops_its_gang_and_the_retry_starts_from_rank_0():
    c = Cluster(gang_spec(retries=1), dns=False)
    c.running(1, ip="10.0.0.7")
    c.exit("kj-a1-r1", 3)
    d = c.decide()
    assert deletes(d) == ["kj-a1-r0"]
    assert creates(d) == [CreatePod(2, "retry", (0,), None)]
    assert events(d) == [("Warning", "AttemptFailed")]
    st = c.status
    assert (st.phase, st.attempt, st.failures, st.disruptions) == ("PENDING", 2, 1, 0)
    assert "rank 1 failed: Error (exit code 3): boom" in st.message
    assert "retry 1 of 1" in st.message
    first = st.attempts[0]
    assert (first.outcome, first.exit_code, first.reason) == ("failure", 3, "Error")
    assert members(st, 1) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "failed")]

    # The operator's own deletion of rank 0 shows up, then it is gone: still one failure.
    d = c.decide()
    assert deletes(d) == [] and creates(d) == [] and c.status.failures == 1
    c.finish_deletions()
    c.decide()
    assert (c.status.failures, c.status.disruptions) == (1, 0)
    assert members(c.status, 1) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "failed")]

    # Attempt 2 starts over: rank 0, then rank 1 with the new rank 0's IP.
    c.place("kj-a2-r0", "10.0.0.9")
    assert creates(c.decide()) == [CreatePod(2, None, (1,), "10.0.0.9")]


def test_a_second_failure_spends_the_last_retry_and_the_job_fails():
    c = Cluster(gang_spec(retries=1), dns=True)
    c.running(1)
    c.exit("kj-a1-r1", 3)
    c.decide()
    c.finish_deletions()
    c.place("kj-a2-r0")
    c.place("kj-a2-r1")
    c.decide()
    c.exit("kj-a2-r0", 1)
    d = c.decide()
    assert deletes(d) == ["kj-a2-r1"] and creates(d) == []
    assert events(d) == [("Warning", "Failed")]
    st = c.status
    assert (st.phase, st.attempt, st.failures) == ("FAILED", 2, 2)
    assert st.message == (
        "Failed on attempt 2 after 1 retries: Error, exit code 1: rank 0 failed: Error "
        "(exit code 1): boom."
    )
    assert [(r.attempt, r.outcome, r.exit_code) for r in st.attempts] == [
        (1, "failure", 3),
        (2, "failure", 1),
    ]
    assert members(st, 1) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "failed")]
    assert members(st, 2) == [(0, "kj-a2-r0", "failed"), (1, "kj-a2-r1", "stopped")]

    c.finish_deletions()
    d = c.decide()
    assert d.actions == () and (c.status.phase, c.status.failures) == ("FAILED", 2)


def test_a_member_deleted_mid_run_is_a_disruption_not_a_failure():
    c = Cluster(gang_spec(), dns=True)
    c.running(1)
    c.change("kj-a1-r1", gone=True)
    d = c.decide()
    assert deletes(d) == ["kj-a1-r0"]
    assert creates(d) == [CreatePod(2, "disruption", (0, 1), None)]
    assert events(d) == [("Warning", "AttemptDisrupted")]
    st = c.status
    assert (st.phase, st.attempt, st.failures, st.disruptions) == ("PENDING", 2, 0, 1)
    assert "rank 1 was lost" in st.message and "without using a retry" in st.message
    assert st.attempts[0].outcome == "disruption"
    assert members(st, 1) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "gone")]


def test_rank_0_succeeding_ends_the_job_with_its_result_and_stops_the_others():
    c = Cluster(gang_spec(), dns=True)
    c.running(1)
    c.exit("kj-a1-r0", 0)
    d = c.decide()
    assert deletes(d) == ["kj-a1-r1"] and creates(d) == []
    assert (c.status.phase, c.status.result) == ("SUCCEEDED", "42")
    assert members(c.status, 1) == [(0, "kj-a1-r0", "succeeded"), (1, "kj-a1-r1", "stopped")]


# --------------------------------------------------------------------------- stopping


def test_cancel_stops_every_live_member():
    c = Cluster(gang_spec(), dns=True)
    c.running(1)
    c.spec = gang_spec(cancel=True)
    d = c.decide()
    assert deletes(d) == ["kj-a1-r0", "kj-a1-r1"] and creates(d) == []
    assert c.status.phase == "CANCELLED"
    assert c.status.attempts[-1].outcome == "cancelled"
    assert c.decide().actions == ()  # both terminating: nothing more to do


def test_cancel_before_rank_1_exists_stops_rank_0_only():
    c = Cluster(gang_spec(), dns=False)
    c.decide()
    c.place("kj-a1-r0")
    c.decide()
    c.spec = gang_spec(cancel=True)
    d = c.decide()
    assert deletes(d) == ["kj-a1-r0"] and creates(d) == []
    assert c.status.phase == "CANCELLED"


def test_a_terminal_job_deletes_members_whose_attempt_still_looks_live():
    """Terminal phases are sticky: a member still running is only stopped."""
    c = Cluster(gang_spec(), dns=True)
    c.running(1)
    status = c.status.model_copy(update={"phase": "FAILED"})
    c.status = status
    d = c.decide()
    assert deletes(d) == ["kj-a1-r0", "kj-a1-r1"] and creates(d) == []
    assert c.status.phase == "FAILED"


def test_a_terminal_job_deletes_a_member_left_running_after_its_attempt_ended():
    c = Cluster(gang_spec(), dns=True)
    c.running(1)
    c.exit("kj-a1-r0", 0)
    c.decide()
    assert c.status.phase == "SUCCEEDED"
    c.change("kj-a1-r1", deleting=False, deleted_at=None)  # the delete never happened
    d = c.decide()
    assert deletes(d) == ["kj-a1-r1"]


def test_a_cancelled_attempt_records_its_members_as_stopped():
    c = Cluster(gang_spec(), dns=True)
    c.running(1)
    c.spec = gang_spec(cancel=True)
    c.decide()
    assert members(c.status, 1) == [(0, "kj-a1-r0", "stopped"), (1, "kj-a1-r1", "stopped")]


def test_an_ended_attempts_record_does_not_change_when_decided_again():
    c = Cluster(gang_spec(retries=1), dns=True)
    c.decide()
    c.place("kj-a1-r0")
    c.now += timedelta(seconds=3)
    c.place("kj-a1-r1")  # rank 1 placed later than rank 0
    c.decide()
    c.exit("kj-a1-r1", 3)
    pods = dict(c.pods)
    first = c.decide().status.attempts[0]
    c.pods = pods  # the same Pods, before the deletion was applied
    again = c.decide().status.attempts[0]
    assert again == first
    assert first.start_time == stamp(1)  # the gang's start: rank 0's
