"""A wait that timed out names the object's kind in full and what it is waiting on.

It used to say ``TimeoutError: kineticbatche default/grp-… did not finish in
180s``: the plural cut by one letter, and nothing about why.
"""

from __future__ import annotations

import pytest
from kinetic.api.waiting import PodWait, kind_of, pod_wait, timed_out
from kinetic.model import names
from kinetic.model import resources as r
from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodStatus,
)

UNSCHEDULABLE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def pod(
    name: str = "grp-0a1b2c3d-3-1",
    index: str | None = "3",
    phase: str = "Pending",
    scheduled: str | None = None,
    waiting: tuple[str, str | None] | None = None,
    deleting: bool = False,
) -> V1Pod:
    labels = {names.LABEL_BATCH: "grp-0a1b2c3d"} | ({names.LABEL_INDEX: index} if index else {})
    conditions = (
        [
            V1PodCondition(
                type="PodScheduled", status="False", reason="Unschedulable", message=scheduled
            )
        ]
        if scheduled
        else [V1PodCondition(type="PodScheduled", status="True")]
    )
    statuses = None
    if waiting is not None:
        state = V1ContainerState(
            waiting=V1ContainerStateWaiting(reason=waiting[0], message=waiting[1])
        )
        statuses = [
            V1ContainerStatus(
                name="main", image="x", image_id="", ready=False, restart_count=0, state=state
            )
        ]
    return V1Pod(
        metadata=V1ObjectMeta(
            name=name,
            labels=labels,
            deletion_timestamp="2026-01-01T00:00:00Z" if deleting else None,
        ),
        status=V1PodStatus(phase=phase, conditions=conditions, container_statuses=statuses),
    )


@pytest.mark.parametrize(
    "plural, kind", [(r.BATCH_PLURAL, "KineticBatch"), (r.JOB_PLURAL, "KineticJob")]
)
def test_the_kind_is_named_in_full(plural: str, kind: str) -> None:
    assert kind_of(plural) == kind
    said = timed_out(plural, "default", "x", 180, {"status": {"phase": "RUNNING"}})
    assert said == f"{kind} default/x did not finish in 180 s: it is RUNNING"


def test_a_pending_job_says_the_schedulers_reason_from_its_status() -> None:
    job = {
        "status": {
            "phase": "PENDING",
            "message": f"Attempt 1 cannot be scheduled yet: {UNSCHEDULABLE}",
        }
    }
    assert timed_out(r.JOB_PLURAL, "default", "train-1a2b", 60, job) == (
        "KineticJob default/train-1a2b did not finish in 60 s: it is PENDING (Attempt 1 cannot "
        "be scheduled yet: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu)"
    )


def test_a_batch_names_its_first_waiting_input_and_counts_the_others() -> None:
    batch = {"status": {"phase": "RUNNING", "message": "1/4 succeeded, 0 failed."}}
    pods = [
        PodWait("grp-0a1b2c3d-3-1", 3, unschedulable=UNSCHEDULABLE),
        PodWait("grp-0a1b2c3d-2-1", 2, waiting="ImagePullBackOff: Back-off pulling image"),
        PodWait("grp-0a1b2c3d-1-1", 1),  # not waiting on anything known: not named
    ]
    assert timed_out(r.BATCH_PLURAL, "default", "grp-0a1b2c3d", 180, batch, pods) == (
        "KineticBatch default/grp-0a1b2c3d did not finish in 180 s: it is RUNNING "
        "(1/4 succeeded, 0 failed); input 2 (Pod grp-0a1b2c3d-2-1) is waiting to start: "
        "ImagePullBackOff: Back-off pulling image (1 more Pod waiting)"
    )


def test_a_long_reason_is_cut() -> None:
    said = timed_out(r.JOB_PLURAL, "ns", "j", 1, {"status": {"message": "x" * 5000}})
    assert len(said) < 400 and said.endswith("…)")


def test_a_pod_the_scheduler_cannot_place_says_the_schedulers_message() -> None:
    assert pod_wait(pod(scheduled=UNSCHEDULABLE)) == PodWait(
        "grp-0a1b2c3d-3-1", 3, unschedulable=UNSCHEDULABLE
    )


def test_a_pod_the_kubelet_cannot_start_says_the_kubelets_reason() -> None:
    seen = pod_wait(pod(waiting=("ErrImagePull", 'pull "nosuch:1": not found')))
    assert seen is not None and seen.waiting == 'ErrImagePull: pull "nosuch:1": not found'
    assert seen.reason == 'is waiting to start: ErrImagePull: pull "nosuch:1": not found'


@pytest.mark.parametrize(
    "seen",
    [
        pod(phase="Running"),
        pod(scheduled=UNSCHEDULABLE, deleting=True),
    ],
    ids=["running", "being-deleted"],
)
def test_a_pod_not_waiting_says_nothing(seen: V1Pod) -> None:
    assert pod_wait(seen) is None


def test_a_pod_still_creating_its_container_has_no_reason() -> None:
    seen = pod_wait(pod(waiting=("ContainerCreating", None)))
    assert seen is not None and seen.reason is None
