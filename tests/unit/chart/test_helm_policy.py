"""The chart's kinetic-policy: what it renders parses on both sides, and every user may read it.

Installed with the real Helm library against a stand-in API server (helm_render), so
the objects checked are the ones Helm would create and a refusal is Helm's own
values-schema error.
"""

from __future__ import annotations

from typing import Any

import helm_sdkpy as helm
import pytest
from helm_render import NAMESPACE, install, of_kind
from kinetic.model.policy_keys import SubmissionPolicy, submission_policy
from kinetic_operator.logic.policy import parse_policy

BASE: dict[str, Any] = {"storageRoot": "gs://bucket/kinetic"}
SOURCE = f"kinetic-policy in {NAMESPACE}"


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def _policy_data(values: dict[str, Any]) -> dict[str, str]:
    data: dict[str, str] = _named(install(values), "ConfigMap", "kinetic-policy")["data"]
    return data


def test_the_default_policy_is_no_policy_for_the_operator_and_the_client() -> None:
    data = _policy_data(BASE)
    assert data["dryRunDefault"] == "true" and data["requireConfirmation"] == "false"
    assert data["defaultGpuType"] == "" and data["maxJobsPerRequest"] == ""
    parsed = parse_policy(data, SOURCE)
    assert parsed.dry_run_default and not parsed.require_confirmation  # a preview first
    assert parsed.default_gpu_type is None and parsed.max_jobs_per_request is None
    assert parsed.allows_namespace("any-namespace")
    assert submission_policy(data) == (SubmissionPolicy(), [])


def test_the_submission_keys_and_any_namespace_render_as_both_sides_read_them() -> None:
    values = {
        **BASE,
        "policy": {
            "allowedNamespaces": ["team-a", "*"],
            "dryRunDefault": False,
            "requireConfirmation": True,
            "defaultGpuType": "l4",
            "maxJobsPerRequest": 20,
        },
    }
    data = _policy_data(values)
    parsed = parse_policy(data, SOURCE)
    assert parsed.allowed_namespaces == ("team-a", "*")
    assert parsed.allows_namespace("team-z")
    assert not parsed.dry_run_default and parsed.require_confirmation
    assert submission_policy(data) == (
        SubmissionPolicy(
            dry_run_default=False,
            require_confirmation=True,
            default_gpu_type="l4",
            max_jobs_per_request=20,
        ),
        [],
    )


@pytest.mark.parametrize(
    "policy,where",
    [
        ({"allowedNamespaces": ["team-*"]}, "/policy/allowedNamespaces/0"),
        ({"dryRunDefault": "yes"}, "/policy/dryRunDefault"),
        ({"maxJobsPerRequest": 0}, "/policy/maxJobsPerRequest"),
        ({"defaultGpuType": "L4 GPU"}, "/policy/defaultGpuType"),
        ({"requireConfirmaton": True}, "requireConfirmaton"),
    ],
)
def test_a_mistyped_policy_value_is_refused_by_the_schema(
    policy: dict[str, Any], where: str
) -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "policy": policy})
    assert where in str(refused.value)


def test_every_authenticated_user_may_get_the_policy_and_the_leader_and_nothing_more() -> None:
    objects = install(BASE)
    role = _named(objects, "Role", "kinetic-config-reader")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["kinetic-config", "kinetic-policy"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["kinetic-operator-leader"],
            "verbs": ["get"],
        },
    ]
    binding = _named(objects, "RoleBinding", "kinetic-config-reader")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "kinetic-config-reader",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    ]
    # No other binding of the chart gives every user anything.
    everyone = [
        b["metadata"]["name"]
        for kind in ("RoleBinding", "ClusterRoleBinding")
        for b in of_kind(objects, kind)
        if any(s.get("name") == "system:authenticated" for s in b.get("subjects") or [])
    ]
    assert everyone == ["kinetic-config-reader"]
