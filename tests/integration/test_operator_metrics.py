"""The operator's Prometheus metrics, scraped as Prometheus would, after real work."""

from __future__ import annotations

import pytest
from kinetic_dev.operator import NAMESPACE, POD_SELECTOR
from kube_helpers import Kube, leader_pod_name, wait_for, wait_operator_ready
from prometheus_client.parser import text_string_to_metric_families
from test_operator_batches import apply, ns, sh, wait_phase  # noqa: F401 - ns is a fixture

pytestmark = pytest.mark.integration


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def running_pods(kube: Kube) -> list:
    pods = kube.core.list_namespaced_pod(NAMESPACE, label_selector=POD_SELECTOR).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def scrape(kube: Kube, pod: object | None = None) -> Samples:
    """Every sample of an operator replica's /metrics (the leader's unless ``pod`` is
    given), by name and labels, fetched as Prometheus would through the API server: the
    Pod's port named ``metrics``, via its proxy."""
    if pod is None:
        leader = leader_pod_name(kube)
        found = [p for p in running_pods(kube) if p.metadata.name == leader]
        assert len(found) == 1, (leader, [p.metadata.name for p in running_pods(kube)])
        pod = found[0]
    ports = {p.name: p.container_port for c in pod.spec.containers for p in c.ports or []}  # type: ignore[attr-defined]
    name = pod.metadata.name  # type: ignore[attr-defined]
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:{ports['metrics']}/proxy/metrics"
    text = kube.kubectl("get", "--raw", path).stdout
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_exactly_one_replica_says_it_leads_and_it_holds_the_lease(kube: Kube) -> None:
    """`kinetic_leader` is 1 on the Lease's holder and 0 on every standby; the holder has
    become the leader at least once (`kinetic_leader_transitions_total`)."""
    wait_operator_ready(kube)
    pods = running_pods(kube)
    assert len(pods) == 2, [p.metadata.name for p in pods]
    leading = {p.metadata.name: scrape(kube, p)[("kinetic_leader", ())] for p in pods}
    leader = leader_pod_name(kube)
    assert leading == {name: (1.0 if name == leader else 0.0) for name in leading}
    assert scrape(kube)[("kinetic_leader_transitions_total", ())] >= 1


def inputs(samples: dict, what: str) -> float:
    return samples.get((f"kinetic_inputs_{what}_total", (("kind", "KineticBatch"),)), 0.0)


def test_metrics_show_the_inputs_a_batch_just_ran(kube: Kube, ns: str) -> None:  # noqa: F811
    before = scrape(kube)
    apply(
        kube,
        ns,
        "counted",
        {
            "template": sh('test "$KINETIC_INDEX" != 2'),
            "inputs": {"items": [0, 1, 2, 3]},
            "retries": 1,
            "maxConcurrent": 2,
        },
    )
    assert wait_phase(kube, ns, "counted", "SUCCEEDED", "FAILED")["phase"] == "FAILED"
    after = wait_for(
        lambda: (s := scrape(kube)) and inputs(s, "failed") > inputs(before, "failed") and s,
        timeout=30,
        what="the failed input in the metrics",
    )
    assert inputs(after, "launched") - inputs(before, "launched") == 4
    assert inputs(after, "retried") - inputs(before, "retried") == 1  # input 2's second try
    assert inputs(after, "succeeded") - inputs(before, "succeeded") == 3
    assert inputs(after, "failed") - inputs(before, "failed") == 1
    assert after[("kinetic_objects", (("kind", "KineticBatch"), ("phase", "FAILED")))] >= 1
    reconciles = ("kinetic_reconcile_duration_seconds_count", (("kind", "KineticBatch"),))
    assert after[reconciles] > before.get(reconciles, 0)
    assert ("kinetic_work_queue_depth", ()) in after
    assert after[("process_resident_memory_bytes", ())] > 0
