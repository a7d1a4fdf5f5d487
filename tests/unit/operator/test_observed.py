"""Summaries of attempt Pods (what the operator's indexes keep), and the freshest-copy cache."""

from __future__ import annotations

from kinetic_operator.logic.observed import PodView, batch_key, job_key, summarize_pod
from kinetic_operator.state import Fresh, OperatorState, operator_state


def pod_body(labels: dict[str, str], status: dict | None = None, **meta) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels, **meta},
        "status": status or {},
    }


def test_a_failed_pod_of_a_kineticjob():
    body = pod_body(
        {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "2"},
        {
            "phase": "Failed",
            "startTime": "2026-01-01T00:00:02Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
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
        name="kj-a2",
        creationTimestamp="2026-01-01T00:00:01Z",
        deletionTimestamp="2026-01-01T00:00:09Z",
    )
    p = summarize_pod(body)
    assert p == PodView(
        name="kj-a2",
        attempt=2,
        phase="Failed",
        created="2026-01-01T00:00:01Z",
        deleting=True,
        deleted_at="2026-01-01T00:00:09Z",
        start_time="2026-01-01T00:00:02Z",
        exit_code=137,
        terminated_reason="OOMKilled",
        termination_message="out of memory",
        finished_at="2026-01-01T00:00:08Z",
        disruption="EvictionByEvictionAPI",
        attempt_pod="kj-a2",  # the attempt's own name, from its labels
    )
    assert p.terminal and not p.live
    assert job_key(body) == ("ns", "kj") and batch_key(body) is None


def test_a_chunk_pod_of_a_batch():
    body = pod_body(
        {
            "kinetic.dev/batch": "grp-1",
            "kinetic.dev/index": "8",
            "kinetic.dev/attempt": "1",
            "kinetic.dev/chunk": "4",
        },
        {"phase": "Running"},
    )
    p = summarize_pod(body)
    assert (p.index, p.chunk, p.attempt, p.phase, p.live) == (8, 4, 1, "Running", True)
    assert batch_key(body) == ("ns", "grp-1") and job_key(body) is None


def test_a_pod_waiting_to_be_scheduled_or_to_start_says_why():
    unschedulable = pod_body(
        {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "1"},
        {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "no nodes",
                }
            ]
        },
    )
    p = summarize_pod(unschedulable)
    assert p.phase == "Pending" and p.unschedulable == "no nodes" and p.live
    pulling = pod_body(
        {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "1"},
        {
            "phase": "Pending",
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
            ],
        },
    )
    p = summarize_pod(pulling)
    assert (p.waiting_reason, p.waiting_message) == ("ImagePullBackOff", "not found")


def test_pods_with_labels_that_are_not_ours_are_ignored():
    for attempt in ("0", "-1", "x", "", "1" * 10):
        assert summarize_pod(pod_body({"kinetic.dev/attempt": attempt})) is None
    assert summarize_pod({"metadata": {"name": "p"}}) is None
    odd_index = pod_body({"kinetic.dev/attempt": "1", "kinetic.dev/index": "first"})
    assert summarize_pod(odd_index).index is None


def test_messages_are_clipped():
    body = pod_body({"kinetic.dev/attempt": "1"}, {"phase": "Failed", "message": "m" * 10_000})
    assert len(summarize_pod(body).message) == 4096


def test_fresh_keeps_the_newer_copy():
    fresh = Fresh()
    v5 = {"metadata": {"resourceVersion": "5"}}
    v7 = {"metadata": {"resourceVersion": "7"}}
    fresh.offer(v7)
    fresh.offer(v5)  # a late watch event: older than what we wrote
    assert fresh.get() is v7
    fresh.set(v5)  # a fresh read replaces whatever is held
    assert fresh.get() is v5
    fresh.offer({"metadata": {}})  # no version: taken
    assert fresh.get() == {"metadata": {}}


def test_operator_state_lives_in_kopfs_memo():
    class Memo:
        pass

    memo = Memo()
    state = operator_state(memo)
    assert isinstance(state, OperatorState) and operator_state(memo) is state
    assert isinstance(operator_state(None), OperatorState)


def _deleted_while_running(finished: str, grace: int | None) -> dict:
    """A kubelet's view of a Pod deleted at 00:00:10 with ``grace`` seconds: the API server
    sets deletionTimestamp to the request plus the grace period."""
    meta: dict = {"name": "kj-1", "deletionTimestamp": "2026-01-01T00:00:40Z"}
    if grace is not None:
        meta["deletionGracePeriodSeconds"] = grace
    return pod_body(
        {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "1"},
        {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 143, "finishedAt": finished}}}
            ],
        },
        **meta,
    )


def test_a_deletion_is_dated_from_its_request_not_its_deadline():
    from kinetic_operator.logic.attempts import _ended_before_deletion

    killed = summarize_pod(_deleted_while_running("2026-01-01T00:00:11Z", 30))
    assert killed is not None and killed.deleted_at == "2026-01-01T00:00:10Z"
    assert not _ended_before_deletion(killed)  # the deletion's SIGTERM ended it: a disruption
    failed_first = summarize_pod(_deleted_while_running("2026-01-01T00:00:05Z", 30))
    assert failed_first is not None and _ended_before_deletion(failed_first)  # its own failure
    unknown = summarize_pod(_deleted_while_running("2026-01-01T00:00:11Z", None))
    assert unknown is not None and unknown.deleted_at == "2026-01-01T00:00:40Z"
