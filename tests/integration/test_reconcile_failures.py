"""A reconcile the API server refuses is shown where users look, then recovers (issue 8, part 4).

A ResourceQuota is a real way for the server to refuse what the operator
does: creating an attempt's Pod is answered 403. The job stays PENDING with
condition ReconcileFailed=True and a Warning Event quoting the server
(which quota, how much), is retried with backoff, and succeeds once the
quota allows it; a batch over a tight quota completes every input.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kinetic.model import resources as r
from kube_helpers import Kube, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration


def _quota(kube: Kube, ns: str, name: str, pods: int) -> None:
    kube.core.create_namespaced_resource_quota(
        ns,
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1ResourceQuotaSpec(hard={"pods": str(pods)}),
        ),
    )
    # The quota admits nothing until the quota controller has counted usage.
    wait_for(
        lambda: (
            (kube.core.read_namespaced_resource_quota(name, ns).status.used or {}).get("pods")
            is not None
        ),
        timeout=60,
        what=f"quota {name} to be counted",
    )


def _get(kube: Kube, ns: str, plural: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
        r.GROUP, r.VERSION, ns, plural, name
    )


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    found = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in found if c["type"] == type_), None)


def _warnings(kube: Kube, ns: str, name: str) -> list[str]:
    out = kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    return [
        e["message"]
        for e in json.loads(out)["items"]
        if e["involvedObject"]["name"] == name and e["type"] == "Warning"
    ]


def test_a_refused_pod_is_reported_on_the_job_and_retried_until_it_is_allowed(
    kube: Kube, operator: None, namespace: str
) -> None:
    _quota(kube, namespace, "no-pods", 0)
    kube.apply(
        namespace,
        {
            "apiVersion": r.API_VERSION,
            "kind": r.JOB_KIND,
            "metadata": {"name": "quota"},
            "spec": {"container": {"command": ["true"]}},
        },
    )
    failed = wait_for(
        lambda: _condition(_get(kube, namespace, r.JOB_PLURAL, "quota"), "ReconcileFailed"),
        timeout=60,
        what="the ReconcileFailed condition",
    )
    assert failed["status"] == "True"
    assert "exceeded quota: no-pods" in failed["message"]
    assert any("exceeded quota: no-pods" in m for m in _warnings(kube, namespace, "quota"))
    assert _get(kube, namespace, r.JOB_PLURAL, "quota")["status"]["phase"] == "PENDING"

    kube.core.delete_namespaced_resource_quota("no-pods", namespace)
    wait_for(
        lambda: _get(kube, namespace, r.JOB_PLURAL, "quota")["status"]["phase"] == "SUCCEEDED",
        timeout=120,
        what="the job to succeed once the quota is gone",
    )
    recovered = _condition(_get(kube, namespace, r.JOB_PLURAL, "quota"), "ReconcileFailed")
    assert recovered is not None
    assert (recovered["status"], recovered["reason"]) == ("False", "Recovered")


def test_a_batch_over_a_tight_quota_completes_every_input(
    kube: Kube, operator: None, namespace: str
) -> None:
    _quota(kube, namespace, "two-pods", 2)
    kube.apply(
        namespace,
        {
            "apiVersion": r.API_VERSION,
            "kind": r.BATCH_KIND,
            "metadata": {"name": "grp-quota0001"},
            "spec": {
                "template": {"container": {"command": ["sh", "-c", "sleep 1"]}},
                "inputs": {"items": list(range(6))},
                "maxConcurrent": 4,
            },
        },
    )
    wait_for(
        lambda: (
            _get(kube, namespace, r.BATCH_PLURAL, "grp-quota0001")["status"]["phase"]
            in ("SUCCEEDED", "FAILED")
        ),
        timeout=180,
        what="the batch to end",
    )
    status = _get(kube, namespace, r.BATCH_PLURAL, "grp-quota0001")["status"]
    assert status["phase"] == "SUCCEEDED"
    assert status["counts"]["succeeded"] == 6
    # The quota did refuse Pods (the test exercised what it claims to).
    assert any("exceeded quota: two-pods" in m for m in _warnings(kube, namespace, "grp-quota0001"))
