"""Two operator replicas, one leading by a Lease: what `helm install` renders for it.

Every case installs the chart with the real Helm library (helm_render), so the
Deployment, the budget and the Lease's RBAC checked here are the objects Helm
would create, and a refusal is the chart's own `fail` as Helm reports it.
"""

from __future__ import annotations

from typing import Any

import helm_sdkpy as helm
import pytest
from helm_render import NAMESPACE, install, of_kind
from kinetic.model.names import LEADER_LEASE

BASE: dict[str, Any] = {"storageRoot": "gs://bucket/kinetic"}
PROGRAM = ["python", "-m", "kinetic_operator"]
LIVENESS = "--liveness=http://0.0.0.0:8080/healthz"
LEASE_ROLE = "kinetic-operator-leader-election"


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in of_kind(objects, kind) if name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind}s named {name} rendered"
    return found[0]


def _pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def _command(objects: list[dict[str, Any]]) -> list[str]:
    (container,) = _pod_spec(objects)["containers"]
    command: list[str] = container["command"]
    return command


def _budget(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec = _one(objects, "PodDisruptionBudget")["spec"]
    return {k: spec[k] for k in ("minAvailable", "maxUnavailable") if k in spec}


# (values over BASE, replicas, the flags after the program, the budget, a Lease Role?)
CASES = {
    "default": (
        {},
        2,
        ["--leader-election", LIVENESS, "--all-namespaces"],
        {"minAvailable": 1},
        True,
    ),
    "watched namespaces": (
        {"watchNamespaces": ["team-a", "team-b"]},
        2,
        ["--leader-election", LIVENESS, "--namespace=team-a", "--namespace=team-b"],
        {"minAvailable": 1},
        True,
    ),
    "one replica": (
        {"operator": {"replicas": 1}},
        1,
        ["--leader-election", LIVENESS, "--all-namespaces"],
        {"maxUnavailable": 1},
        True,
    ),
    "one replica without election": (
        {"operator": {"replicas": 1, "leaderElection": False}},
        1,
        [LIVENESS, "--all-namespaces"],
        {"maxUnavailable": 1},
        False,
    ),
    "three replicas, another health port": (
        {"operator": {"replicas": 3, "healthPort": 9090}},
        3,
        ["--leader-election", "--liveness=http://0.0.0.0:9090/healthz", "--all-namespaces"],
        {"minAvailable": 1},
        True,
    ),
}


@pytest.mark.parametrize(
    ("values", "replicas", "flags", "budget", "lease_role"), CASES.values(), ids=CASES.keys()
)
def test_replicas_command_budget_and_lease_role(
    values: dict[str, Any],
    replicas: int,
    flags: list[str],
    budget: dict[str, int],
    lease_role: bool,
) -> None:
    objects = install({**BASE, **values})
    deployment = _one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == replicas
    assert _command(objects) == PROGRAM + flags
    assert _budget(objects) == budget
    roles = [r for r in of_kind(objects, "Role") if r["metadata"]["name"] == LEASE_ROLE]
    assert len(roles) == int(lease_role)


def test_rollout_keeps_one_replica_serving() -> None:
    """A new Pod comes up (as standby) before an old one goes: the webhook always has a server."""
    strategy = _one(install(BASE), "Deployment")["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_without_election_the_old_pod_goes_before_the_new_one_comes() -> None:
    """A surge Pod without leader election would reconcile beside the old one."""
    values = {**BASE, "operator": {"replicas": 1, "leaderElection": False}}
    strategy = _one(install(values), "Deployment")["spec"]["strategy"]
    assert strategy == {"type": "Recreate"}


def test_replicas_prefer_different_nodes() -> None:
    objects = install(BASE)
    deployment = _one(objects, "Deployment")
    anti = _pod_spec(objects)["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti  # one node still runs both
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]


def test_affinity_value_replaces_the_default_verbatim() -> None:
    zones = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}
                ]
            }
        }
    }
    objects = install({**BASE, "operator": {"affinity": zones}})
    assert _pod_spec(objects)["affinity"] == zones


def test_command_value_names_the_program_the_flags_follow() -> None:
    objects = install(
        {**BASE, "operator": {"command": ["/venv/bin/python", "-m", "kinetic_operator"]}}
    )
    assert _command(objects) == [
        "/venv/bin/python",
        "-m",
        "kinetic_operator",
        "--leader-election",
        LIVENESS,
        "--all-namespaces",
    ]


def test_lease_rights_are_in_the_release_namespace_only() -> None:
    """get/list/watch/update of the one Lease by name, and create, bound to the operator's
    account; no ClusterRole mentions Leases, and every other Role may only read the one
    Lease by name (anyone authenticated may see which replica leads)."""
    objects = install({**BASE, "watchNamespaces": ["team-a"]})
    role = _one(objects, "Role", LEASE_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    by_verbs = {
        tuple(sorted(rule["verbs"])): rule.get("resourceNames")
        for rule in role["rules"]
        if rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
    }
    assert by_verbs == {("get", "list", "update", "watch"): [LEADER_LEASE], ("create",): None}
    # and a list of the operator's own Pods (an older, unelected operator blocks the lead)
    others = [r for r in role["rules"] if r["resources"] != ["leases"]]
    assert others == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]

    binding = _one(objects, "RoleBinding", LEASE_ROLE)
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": LEASE_ROLE,
    }
    deployment = _one(objects, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]

    for kind in ("ClusterRole", "Role"):
        for other in of_kind(objects, kind):
            if other["metadata"]["name"] == LEASE_ROLE:
                continue
            for rule in other["rules"]:
                if "leases" in rule["resources"]:
                    assert kind == "Role", other["metadata"]
                    assert rule["verbs"] == ["get"], other["metadata"]
                    assert rule["resourceNames"] == [LEADER_LEASE], other["metadata"]


@pytest.mark.parametrize("replicas", [2, 3])
def test_more_replicas_without_election_is_refused(replicas: int) -> None:
    """Each would reconcile the same objects: the chart says which two values to change."""
    values = {**BASE, "operator": {"replicas": replicas, "leaderElection": False}}
    with pytest.raises(helm.InstallError) as refused:
        install(values)
    message = str(refused.value)
    assert "operator.replicas" in message and "operator.leaderElection" in message, message
    assert f"operator.replicas is {replicas}" in message


def test_zero_replicas_is_refused_by_the_schema() -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "operator": {"replicas": 0}})
    assert "/operator/replicas" in str(refused.value)
