"""The operator as users install it: the chart's Deployment, its Pod, its identity.

On the local cluster `make cluster-up` installs the chart with the operator
enabled, and its Pod runs the operator image on the node like any other; on
kind the same chart and image. The fault test counts runs in storage, where
each run of an input leaves an object.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.model.names import LEADER_LEASE
from kube_helpers import (
    Kube,
    operator_pod,
    runs_in,
    wait_for,
    wait_operator_ready,
    witness_batch,
)

pytestmark = pytest.mark.integration

NAMESPACE = "kinetic-system"
DEPLOYMENT = "kinetic-operator"
SELECTOR = "app.kubernetes.io/name=kinetic"
IDENTITY = f"system:serviceaccount:{NAMESPACE}:{DEPLOYMENT}"


def _pods(kube: Kube) -> list[dict]:
    out = kube.kubectl("get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def test_the_operator_pod_is_ready_and_serves_through_its_service(
    kube: Kube, installed: None
) -> None:
    wait_operator_ready(kube)
    pods = [p for p in _pods(kube) if _ready(p)]
    assert len(pods) == 2  # the chart's default: a leader and a standby, both Ready
    assert all(p["spec"]["serviceAccountName"] == DEPLOYMENT for p in pods)
    # The Service's endpoints are both Pods (how the API server reaches the webhook):
    # a standby answers admission as the leader does.
    ep = json.loads(
        kube.kubectl("get", "endpoints", DEPLOYMENT, "-n", NAMESPACE, "-o", "json").stdout
    )
    ips = {a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []}
    assert ips == {p["status"]["podIP"] for p in pods}
    hooks = json.loads(
        kube.kubectl("get", "validatingwebhookconfiguration", "kinetic.dev", "-o", "json").stdout
    )["webhooks"]
    assert hooks and all(
        h["clientConfig"]["service"]["name"] == DEPLOYMENT
        and h["clientConfig"]["service"]["namespace"] == NAMESPACE
        for h in hooks
    )
    logs = kube.kubectl("logs", "-n", NAMESPACE, f"deploy/{DEPLOYMENT}").stdout
    assert "Kinetic operator: storage root" in logs
    # Ready means the readiness probe got answers; none of them is a log line.
    assert "/healthz" not in logs


@pytest.mark.parametrize(
    ("verb", "resource", "where", "allowed"),
    [
        ("create", "pods", "default", True),
        ("delete", "pods", "default", True),
        ("watch", "pods", "", True),
        ("get", "pods --subresource=log", "default", True),
        ("patch", "kineticbatches.kinetic.dev --subresource=status", "default", True),
        ("patch", "pods", "default", False),
        ("update", "pods", "default", False),
        ("create", "pods --subresource=exec", "default", False),
        ("get", "secrets", "default", False),
        ("list", "secrets", NAMESPACE, False),
        ("create", "kineticjobs.kinetic.dev", "default", False),
        ("create", "clusterrolebindings", "", False),
        ("update", f"leases/{LEADER_LEASE}", NAMESPACE, True),
        ("update", "leases", "default", False),
    ],
)
def test_the_operators_identity_has_what_the_chart_grants(
    kube: Kube, installed: None, verb: str, resource: str, where: str, allowed: bool
) -> None:
    scope = ["-n", where] if where else ["--all-namespaces"]
    what = resource.split()  # a subresource goes in its own flag
    got = kube.kubectl("auth", "can-i", verb, *what, *scope, "--as", IDENTITY, check=False)
    assert got.stdout.strip() == ("yes" if allowed else "no"), (got.stdout, got.stderr)


def test_deleting_the_operator_pod_mid_batch_loses_nothing(
    kube: Kube, installed: None, namespace: str, client_env: dict[str, str]
) -> None:
    """Deleting the leader's Pod: it hands the Lease over, the Deployment brings a new
    Pod; every input still runs exactly once."""
    runs = storage.join(resolve().storage_root, "test-runs", namespace)
    total = 20
    witness_batch(kube, namespace, "survivor", runs, total=total, concurrent=3, seconds=2)
    old = wait_for(lambda: operator_pod(kube), 60, what="the leader's operator Pod")
    wait_for(lambda: len(runs_in(runs)) >= 4, 120, what="some progress")
    kube.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--wait=false")
    new = wait_for(
        lambda: next(
            (
                p
                for p in _pods(kube)
                if _ready(p) and p["metadata"]["uid"] != old["metadata"]["uid"]
            ),
            None,
        ),
        120,
        what="the Deployment's new operator Pod to be Ready",
    )
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert len(runs_in(runs)) < total  # the batch was still running
    kube.kubectl(
        "wait",
        "-n",
        namespace,
        "--for=condition=Complete",
        "kb/survivor",
        "--timeout=300s",
        timeout=320,
    )
    time.sleep(2)  # a duplicate launch would have run by now
    assert Counter(runs_in(runs)) == {i: 1 for i in range(total)}
    storage.delete_prefix(runs + "/")


def test_values_the_schema_refuses_never_reach_the_cluster(kube: Kube, installed: None) -> None:
    """values.schema.json is enforced by Helm itself: a bad value is named, nothing is installed."""
    import asyncio

    import helm_sdkpy as helm

    chart = Path(__file__).resolve().parents[2] / "helm" / "kinetic"
    config = helm.Configuration(namespace="kinetic-bad-values", kubeconfig=kube.kubeconfig)
    bad = {"storageRoot": "gs://b", "metrics": {"port": 70000}}
    with pytest.raises(helm.HelmError) as refused:
        asyncio.run(helm.Install(config).run("bad-values", str(chart), values=bad, wait=False))
    assert "metrics.port" in str(refused.value) or "metrics/port" in str(refused.value)
    assert kube.kubectl("get", "ns", "kinetic-bad-values", check=False).returncode != 0
