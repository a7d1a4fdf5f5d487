"""Job Pods run as a ServiceAccount of their own, which the operator makes on first use."""

from __future__ import annotations

from typing import Any

import pytest
from kinetic_operator.kube import Kube
from kinetic_operator.settings import OperatorSettings
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError


class Accounts:
    """The ServiceAccount calls of the CoreV1Api over a set of existing accounts."""

    def __init__(self, existing: set[tuple[str, str]], race: bool = False) -> None:
        self.existing, self.race = existing, race
        self.calls: list[tuple[str, str, str]] = []
        self.created: list[dict[str, Any]] = []

    def read_namespaced_service_account(self, name: str, namespace: str, **_: Any) -> dict:
        self.calls.append(("get", namespace, name))
        if (namespace, name) not in self.existing:
            raise ApiException(status=404, reason="Not Found")
        return {}

    def create_namespaced_service_account(self, namespace: str, body: dict, **_: Any) -> dict:
        name = body["metadata"]["name"]
        self.calls.append(("create", namespace, name))
        if self.race:  # another replica made it between our get and our create
            raise ApiException(status=409, reason="AlreadyExists")
        self.existing.add((namespace, name))
        self.created.append(body)
        return body


def kube_over(core: Accounts) -> Kube:
    kube = Kube.__new__(Kube)
    kube.core = core  # type: ignore[assignment]
    kube.accounts = set()
    return kube


def test_a_missing_account_is_created_without_a_token_once() -> None:
    core = Accounts(set())
    kube = kube_over(core)
    kube.ensure_service_account("team-a", "kinetic-runner")
    kube.ensure_service_account("team-a", "kinetic-runner")
    assert core.calls == [
        ("get", "team-a", "kinetic-runner"),
        ("create", "team-a", "kinetic-runner"),
    ]
    (body,) = core.created
    assert body["automountServiceAccountToken"] is False
    assert body["metadata"] == {
        "name": "kinetic-runner",
        "namespace": "team-a",
        "labels": {"app.kubernetes.io/managed-by": "kinetic-operator"},
    }


def test_an_existing_account_is_used_as_it_is() -> None:
    core = Accounts({("team-a", "kinetic-runner")})
    kube_over(core).ensure_service_account("team-a", "kinetic-runner")
    assert core.calls == [("get", "team-a", "kinetic-runner")] and core.created == []


def test_an_account_made_meanwhile_by_another_replica_is_fine() -> None:
    core = Accounts(set(), race=True)
    kube = kube_over(core)
    kube.ensure_service_account("team-b", "kinetic-runner")
    assert ("team-b", "kinetic-runner") in kube.accounts


def test_job_pods_never_run_as_the_default_account() -> None:
    assert OperatorSettings().runner_service_account == "kinetic-runner"
    with pytest.raises(ValidationError, match="may not be 'default'"):
        OperatorSettings(runner_service_account="default")
