"""`made_again`: a Pod made again under the name of one the operator made is told apart by
its UID, per owner, so a job deleted and created again under its name keeps its own Pods."""

from __future__ import annotations

from kinetic_operator.handlers.events import made_again
from kinetic_operator.logic.observed import PodView


def pod(uid: str, owner: str, name: str = "resync-a1") -> PodView:
    return PodView(name=name, attempt=1, uid=uid, owner_uid=owner)


def test_the_first_pod_under_a_name_is_the_operators_and_a_second_is_not() -> None:
    uids: dict[tuple[str, str], str] = {}
    assert made_again(uids, pod("pod-1", "job-1")) is None
    assert made_again(uids, pod("pod-1", "job-1")) is None  # its later events
    assert made_again(uids, pod("copy", "job-1")) == "pod-1"  # the seal copied, a new UID


def test_a_job_made_again_under_its_name_keeps_its_own_pods_whatever_the_event_order() -> None:
    uids: dict[tuple[str, str], str] = {}
    # The old job's Pod's last event (its deletion) comes after the new job's first.
    assert made_again(uids, pod("new-pod", "new-job")) is None
    assert made_again(uids, pod("old-pod", "old-job")) is None
    assert made_again(uids, pod("new-pod", "new-job")) is None  # still the new job's own
    # ... and the other order.
    uids = {}
    assert made_again(uids, pod("old-pod", "old-job")) is None
    assert made_again(uids, pod("new-pod", "new-job")) is None


def test_a_pod_without_a_uid_is_never_taken_for_one_made_again() -> None:
    uids: dict[tuple[str, str], str] = {}
    assert made_again(uids, pod("", "job-1")) is None
    assert made_again(uids, pod("pod-1", "job-1")) is None
