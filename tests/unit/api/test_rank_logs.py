"""Logs by rank: `job.logs(rank=i)`, `job.tail(rank=i)` and `kinetic jobs logs ID --rank i`.

A multi-host attempt has one log per member. Whose log the user gets, from a
live gang's Pods and from the archive once they are gone, and what a rank the
job does not have says, is tested on the local cluster
(tests/integration/test_gangs.py). Here: the pure decisions under it (how
many hosts a job has, which Pod is a rank's, which member's archive to read,
what a refusal says) and what the CLI passes on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kinetic.api import handle as handles
from kinetic.api.handle import hosts_of, member_pod, pod_of_rank, rank_problem, recorded_hosts
from kinetic.api.inputs import input_job_spec
from kinetic.api.logstream import LogFollower
from kinetic.cli import jobs as jobs_cli
from kinetic.model import names
from kubernetes.client import V1ObjectMeta, V1Pod

NS = "team-a"


def pod(name: str, attempt: int, rank: int | None = None) -> V1Pod:
    labels = {names.LABEL_JOB: "train", names.LABEL_ATTEMPT: str(attempt)}
    if rank is not None:
        labels[names.LABEL_RANK] = str(rank)
    created = datetime(2025, 1, 1, tzinfo=UTC)
    return V1Pod(metadata=V1ObjectMeta(name=name, labels=labels, creation_timestamp=created))


def gang_attempt(attempt: int, hosts: int, outcome: str = "failed") -> dict[str, Any]:
    pod_name = names.job_pod_name("train", attempt)
    return {
        "attempt": attempt,
        "pod": pod_name,
        "outcome": "failure",
        "members": [
            {"rank": r, "pod": names.gang_pod_name(pod_name, r), "outcome": outcome}
            for r in range(hosts)
        ],
    }


# --------------------------------------------------------------------------- hosts


@pytest.mark.parametrize(
    ("spec", "attempt", "hosts"),
    [
        ({"accelerator": "gpu-l4", "hosts": 3}, None, 3),
        ({"hosts": 2}, None, 2),
        ({"accelerator": "gpu-l4"}, None, 1),  # one host, so only rank 0
        ({}, None, 1),
        # tpu-v5e-16 is 4 hosts: rank 3 exists though the spec does not say hosts.
        ({"accelerator": "tpu-v5e-16"}, None, 4),
        # A slice only the cluster's catalog has: its recorded members say how many.
        ({"accelerator": "tpu-v5e-64"}, None, 1),
        ({"accelerator": "tpu-v5e-64"}, gang_attempt(1, 16), 16),
        ({"hosts": 2}, gang_attempt(1, 2), 2),
    ],
)
def test_hosts_are_the_specs_or_more_when_the_attempt_recorded_more(
    spec: dict[str, Any], attempt: dict[str, Any] | None, hosts: int
) -> None:
    assert hosts_of(spec, attempt) == hosts


def test_an_inputs_hosts_come_from_its_own_job_or_the_template() -> None:
    mixed = {"jobs": [{"hosts": 2}, {"accelerator": "tpu-v5e-16"}, {}]}
    assert [hosts_of(input_job_spec(mixed, i), None) for i in range(3)] == [2, 4, 1]
    assert input_job_spec(mixed, 3) == {}  # past the end: nothing
    templated = {"template": {"hosts": 3}, "inputs": {"count": 5}}
    assert hosts_of(input_job_spec(templated, 4), None) == 3
    assert input_job_spec({}, 0) == {}


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "rank,hosts,says",
    [
        (0, 1, None),
        (3, 4, None),
        (4, 4, "runs on 4 hosts, ranks 0 to 3"),
        (1, 1, "runs on 1 host, so its only rank is 0: leave rank out (or pass 0)"),
        ("1", 4, "rank='1'"),
        (True, 4, "rank=True"),
    ],
)
def test_rank_problem(rank: Any, hosts: int, says: str | None) -> None:
    problem = rank_problem("j", rank, hosts)
    assert problem is None if says is None else says in (problem or "")


# --------------------------------------------------------------------------- pure helpers


def test_pod_of_rank_takes_the_newest_attempt_and_none_before_that_rank_exists() -> None:
    pods = handles.sort_by_attempt(
        [pod("j-a2-r0", 2, 0), pod("j-a1-r1", 1, 1), pod("j-a1-r0", 1, 0)]
    )
    assert pod_of_rank(pods, 0).metadata.name == "j-a2-r0"  # type: ignore[union-attr]
    assert pod_of_rank(pods, 1) is None  # rank 1 of attempt 2 is not created yet
    assert pod_of_rank([pod("j-a1", 1)], 0).metadata.name == "j-a1"  # type: ignore[union-attr]
    assert pod_of_rank([], 0) is None


def test_member_pod_prefers_the_record_then_the_naming_rule() -> None:
    recorded = {"pod": "j-a1", "members": [{"rank": 1, "pod": "j-a1-r1"}]}
    assert member_pod(recorded, 1, 2) == "j-a1-r1"
    assert member_pod({"pod": "j-a1"}, 0, 1) == "j-a1"
    assert member_pod({"pod": "j-a1"}, 0, 4) == "j-a1-r0"
    assert recorded_hosts(recorded) == 2
    assert recorded_hosts(None) == recorded_hosts({"pod": "x"}) == 1


# --------------------------------------------------------------------------- following


def test_following_a_gang_prints_rank_0_only() -> None:
    class Followed:
        namespace, context = NS, None

        def logs(self) -> str | None:
            return ""

        def _live_pods(self) -> list[V1Pod]:
            return [pod("j-a1-r0", 1, 0), pod("j-a1-r1", 1, 1), pod("j-a2", 2)]

    follower = LogFollower(Followed())
    assert [p.metadata.name for p in follower._unprinted()] == ["j-a1-r0", "j-a2"]


# --------------------------------------------------------------------------- the CLI


def test_status_lists_the_newest_gang_attempts_members() -> None:
    rows = jobs_cli.member_rows(gang_attempt(2, 2, outcome="succeeded"))
    assert [(m["rank"], m["pod"], m["outcome"]) for m in rows] == [
        (0, "train-a2-r0", "succeeded"),
        (1, "train-a2-r1", "succeeded"),
    ]
