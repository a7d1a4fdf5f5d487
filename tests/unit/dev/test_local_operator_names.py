"""The dev cluster imports no client, so it spells two of the model's names itself: the
copies must say what the model says, or `kinetic local up` would wait for the wrong Lease
or miss the replicas' leader election."""

from __future__ import annotations

from kinetic.model import names
from kinetic_dev import operator as local_operator


def test_the_leader_lease_is_the_models() -> None:
    assert local_operator.LEADER_LEASE == names.LEADER_LEASE


def test_the_leader_election_flag_is_the_models() -> None:
    assert local_operator.LEADER_ELECTION_FLAG == names.LEADER_ELECTION_FLAG


def test_a_deployment_with_the_flag_is_elected_and_one_without_is_not() -> None:
    def deployment(command: list[str]) -> dict:
        return {"spec": {"template": {"spec": {"containers": [{"command": command}]}}}}

    elected = deployment(["python", "-m", "kinetic_operator", names.LEADER_ELECTION_FLAG])
    assert local_operator.runs_elected(elected) is True
    assert local_operator.runs_elected(deployment(["kopf", "run"])) is False
