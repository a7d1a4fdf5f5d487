"""Bounds at admission, and again in the operator, on the real API server.

Each bad object is refused by the validating webhook (create, update and
`kubectl apply --dry-run=server`) with a message naming the field and the
limit. Stored while the webhook is out of the way (its configuration
deleted, as when the operator is not installed yet or failing open), the
same objects end FAILED with reason InvalidSpec, while objects in another
namespace keep being served — also across an operator restart, when the
operator lists them all at start.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kinetic_testing.cluster import batch_text, kubectl_in, nested_json, webhook_off
from kube_helpers import OPERATOR_NAMESPACE, Kube, wait_for, wait_operator_ready
from kubernetes import client

pytestmark = pytest.mark.integration

API = "kinetic.dev/v1alpha1"
DEEP = 3000  # lists inside lists: past what Python's json decodes (~1,500)


def job_text(name: str, namespace: str, function: str | None = None) -> str:
    spec = (
        f'{{"function": {function}}}'
        if function
        else '{"container": {"command": ["sh", "-c", "echo done"]}}'
    )
    return (
        f'{{"apiVersion": "{API}", "kind": "KineticJob", '
        f'"metadata": {{"name": "{name}", "namespace": "{namespace}"}}, "spec": {spec}}}'
    )


def grid_63() -> str:
    return json.dumps({"grid": {f"k{i:02d}": [0, 1] for i in range(63)}})


def function(extra: str = "") -> str:
    return '{"payloadURI": "gs://kinetic/p.pkl", "sha256": "' + "0" * 64 + '"' + extra + "}"


def storage_root(kube: Kube) -> str:
    out = kube.kubectl(
        "get", "configmap", "kinetic-config", "-n", "kinetic-system", "-o", "json"
    ).stdout
    return json.loads(out)["data"]["storageRoot"]


def cases(ns: str, root: str) -> dict[str, tuple[str, str]]:
    """name -> (object as JSON text, what the refusal must say)."""
    fn_template = '{"function": ' + function() + "}"
    return {
        "deep-item": (
            batch_text("deep-item", '{"items": [' + nested_json(DEEP) + "]}", ns),
            "spec.inputs.items[0] is nested more than 32 levels deep",
        ),
        "huge-grid": (
            batch_text("huge-grid", grid_63(), ns),
            "spec.inputs.grid makes more than 1,000,000 inputs",
        ),
        "too-many": (
            batch_text(
                "too-many",
                json.dumps({"count": 1_000_001, "uriPrefix": f"{root}/in"}),
                ns,
                fn_template,
            ),
            "spec.inputs.count is 1,000,001 inputs; the limit is 1,000,000",
        ),
        "endless-hashes": (
            batch_text(
                "endless-hashes",
                json.dumps(
                    {
                        "count": 3,
                        "uriPrefix": f"{root}/in",
                        "sha256URI": "file:///dev/zero",
                        "sha256": "0" * 64,
                    }
                ),
                ns,
                fn_template,
            ),
            f"spec.inputs.sha256URI must be under the storage root {root}/",
        ),
        "hashes-unverified": (
            batch_text(
                "hashes-unverified",
                json.dumps({"count": 3, "uriPrefix": f"{root}/in", "sha256URI": f"{root}/h.json"}),
                ns,
                fn_template,
            ),
            "spec.inputs.sha256 is required with spec.inputs.sha256URI",
        ),
        "deep-job": (
            job_text("deep-job", ns, function(', "inputJSON": ' + nested_json(DEEP))),
            "spec.function.inputJSON is nested more than 32 levels deep",
        ),
    }


def get(kube: Kube, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    """The object's status ({} before the first write), or None when it is not stored.

    Only the status is fetched: the objects here are too deep for Python's json.
    """
    out = kube.kubectl("get", kind, name, "-n", ns, "-o", "jsonpath={.status}", check=False)
    return (json.loads(out.stdout) if out.stdout.strip() else {}) if out.returncode == 0 else None


def ended(kube: Kube, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    status = get(kube, kind, ns, name) or {}
    return status if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def failed_condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == "Failed")


@pytest.fixture
def two_namespaces(kube: Kube, operator: None) -> Iterator[tuple[str, str]]:
    names = [f"kt-adm-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for name in names:
        kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(
        lambda: all(kube.core.read_namespaced_service_account("default", n).secrets for n in names),
        what="the namespaces' service account tokens",
    )
    yield names[0], names[1]
    for name in names:
        kube.core.delete_namespace(name, propagation_policy="Background")


# ----------------------------------------------------------------------- admission


def test_each_bad_object_is_refused_naming_the_field_and_limit(
    kube: Kube, two_namespaces: tuple[str, str]
) -> None:
    ns = two_namespaces[0]
    for name, (text, message) in cases(ns, storage_root(kube)).items():
        for args in (("create",), ("apply", "--dry-run=server")):
            out = kubectl_in(kube, text, *args)
            assert out.returncode != 0, f"{name} {args} was admitted"
            assert "denied the request" in out.stderr and message in out.stderr, (
                name,
                out.stderr[:500],
            )
        kind = "kineticjobs" if name.endswith("job") else "kineticbatches"
        assert get(kube, kind, ns, name) is None, f"{name} must not be stored"


def test_an_update_is_judged_too(kube: Kube, two_namespaces: tuple[str, str]) -> None:
    ns = two_namespaces[0]
    created = kubectl_in(kube, batch_text("fine", '{"items": [1]}', ns), "create")
    assert created.returncode == 0, created.stderr
    patch = '{"spec": {"inputs": {"items": [' + nested_json(DEEP) + "]}}}"
    out = kube.kubectl(
        "patch", "kineticbatch", "fine", "-n", ns, "--type=merge", "-p", patch, check=False
    )
    assert out.returncode != 0
    assert "spec.inputs.items[0] is nested more than 32 levels deep" in out.stderr
    grow = kube.kubectl(
        "patch",
        "kineticbatch",
        "fine",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec": {"inputs": {"items": [1, 2]}}}',
        check=False,
    )
    assert grow.returncode != 0 and "spec.inputs cannot change" in grow.stderr


@pytest.mark.parametrize(
    "patch,field,limit",
    [
        ({"env": [{"name": f"V{i}", "value": ""} for i in range(257)]}, "spec.template.env", "256"),
        ({"deadlineSeconds": 10**9}, "spec.template.deadlineSeconds", "2592000"),
        ({"image": "i" * 1025}, "spec.template.image", "1024"),
    ],
)
def test_the_schema_bounds_every_field(
    kube: Kube, two_namespaces: tuple[str, str], patch: dict, field: str, limit: str
) -> None:
    ns = two_namespaces[0]
    template = json.dumps({"container": {"command": ["true"]}, **patch})
    out = kubectl_in(kube, batch_text("bounded", '{"items": [1]}', ns, template), "create")
    assert out.returncode != 0
    assert field in out.stderr and limit in out.stderr, out.stderr[:500]


# ----------------------------------------------------------------------- the operator


def restart_operator(kube: Kube) -> None:
    """Restart the operator as an administrator would: a rollout of its Deployment."""
    kube.kubectl("rollout", "restart", "-n", OPERATOR_NAMESPACE, "deploy/kinetic-operator")
    kube.kubectl(
        "rollout",
        "status",
        "-n",
        OPERATOR_NAMESPACE,
        "deploy/kinetic-operator",
        "--timeout=180s",
        timeout=200,
    )
    wait_operator_ready(kube)


def test_objects_stored_without_the_webhook_fail_and_others_keep_running(
    kube: Kube, two_namespaces: tuple[str, str]
) -> None:
    bad_ns, good_ns = two_namespaces
    bad = cases(bad_ns, storage_root(kube))
    with webhook_off(kube, two_namespaces):
        for name, (text, _) in bad.items():
            out = kubectl_in(kube, text, "create")
            assert out.returncode == 0, (name, out.stderr[:300])

    def served(tag: str) -> None:
        job, grp = f"fine-{tag}", f"fine-batch-{tag}"
        assert kubectl_in(kube, job_text(job, good_ns), "create").returncode == 0
        assert (
            kubectl_in(kube, batch_text(grp, '{"items": [1, 2]}', good_ns), "create").returncode
            == 0
        )
        for kind, name in (("kineticjobs", job), ("kineticbatches", grp)):
            status = wait_for(
                lambda k=kind, n=name: ended(kube, k, good_ns, n),
                timeout=120,
                what=f"{kind}/{name} in another namespace to finish",
            )
            assert status["phase"] == "SUCCEEDED", status

    served("a")
    for name, (_, message) in bad.items():
        kind = "kineticjobs" if name.endswith("job") else "kineticbatches"
        status = wait_for(
            lambda k=kind, n=name: ended(kube, k, bad_ns, n),
            timeout=60,
            what=f"{name} to be failed by the operator",
        )
        assert status["phase"] == "FAILED", (name, status)
        assert message in status["message"], (name, status["message"])
        cond = failed_condition(status)
        assert cond["status"] == "True" and cond["reason"] == "InvalidSpec", (name, cond)
        assert status.get("launched", 0) == 0 and status.get("attempt", 0) == 0
    pods = kube.core.list_namespaced_pod(bad_ns).items
    assert pods == [], "nothing may run for a refused object"

    # The objects are still stored: a restarted operator lists them all and keeps serving.
    restart_operator(kube)
    served("b")


@pytest.mark.parametrize(
    "verb,resource,allowed",
    [
        ("patch", "validatingwebhookconfigurations/kinetic.dev", False),
        ("patch", "validatingwebhookconfigurations/someone-else", False),
        ("create", "validatingwebhookconfigurations", False),
        ("delete", "validatingwebhookconfigurations/kinetic.dev", False),
        ("create", "mutatingwebhookconfigurations", False),
        ("patch", "mutatingwebhookconfigurations/kinetic.dev", False),
    ],
)
def test_the_operator_may_not_touch_webhook_configurations(
    kube: Kube, operator: None, verb: str, resource: str, allowed: bool
) -> None:
    """`kubectl auth can-i` as the operator's ServiceAccount, with the chart's RBAC."""
    out = kube.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        "--as=system:serviceaccount:kinetic-system:kinetic-operator",
        check=False,
    )
    assert out.stdout.strip() == ("yes" if allowed else "no"), out.stdout + out.stderr
