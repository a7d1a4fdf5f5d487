"""GitOps health on the real cluster: kstatus conditions and the Argo CD check on live objects."""

from __future__ import annotations

import pytest
from argocd_lua import ArgoHealth
from kinetic_testing.cluster import apply_batch as apply
from kinetic_testing.cluster import read_batch as batch
from kinetic_testing.cluster import sh
from kinetic_testing.cluster import wait_batch_phase as wait_phase
from kube_helpers import Kube

pytestmark = pytest.mark.integration


def conditions(obj: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj["status"].get("conditions", [])}


def test_a_batch_reports_progress_then_health_as_gitops_tools_read_it(
    kube: Kube,
    ns: str,
    argo_health: ArgoHealth,
) -> None:
    apply(kube, ns, "slow", {"template": sh("sleep 3"), "inputs": {"items": [0, 1]}})
    apply(kube, ns, "broken", {"template": sh("exit 3"), "inputs": {"items": [0, 1]}})
    wait_phase(kube, ns, "slow", "RUNNING")
    running = batch(kube, ns, "slow")
    assert conditions(running) | {
        "Ready": "False",
        "Reconciling": "True",
        "Stalled": "False",
    } == conditions(running)
    assert argo_health(running)[0] == "Progressing"

    wait_phase(kube, ns, "slow", "SUCCEEDED")
    done = batch(kube, ns, "slow")
    assert done["status"]["observedGeneration"] == done["metadata"]["generation"]
    assert conditions(done) | {
        "Ready": "True",
        "Reconciling": "False",
        "Stalled": "False",
    } == conditions(done)
    health, message = argo_health(done)
    assert health == "Healthy" and "2/2 succeeded" in message, message

    wait_phase(kube, ns, "broken", "FAILED")
    failed = batch(kube, ns, "broken")
    assert conditions(failed)["Stalled"] == "True" and conditions(failed)["Ready"] == "False"
    health, message = argo_health(failed)
    assert health == "Degraded" and "2 failed" in message, message
