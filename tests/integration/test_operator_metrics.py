"""The operator's Prometheus metrics, scraped as Prometheus would, after real work."""

from __future__ import annotations

import pytest
from kinetic_dev.operator import NAMESPACE, POD_SELECTOR
from kube_helpers import Kube, wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_operator_batches import apply, ns, sh, wait_phase  # noqa: F401 - ns is a fixture

pytestmark = pytest.mark.integration


def scrape(kube: Kube) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the operator's /metrics, by name and labels, fetched as Prometheus
    would through the API server: the operator Pod's port named ``metrics``, via its proxy."""
    pods = kube.core.list_namespaced_pod(NAMESPACE, label_selector=POD_SELECTOR).items
    running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    assert len(running) == 1, [p.metadata.name for p in pods]
    pod = running[0]
    ports = {p.name: p.container_port for c in pod.spec.containers for p in c.ports or []}
    path = (
        f"/api/v1/namespaces/{NAMESPACE}/pods/{pod.metadata.name}:{ports['metrics']}/proxy/metrics"
    )
    text = kube.kubectl("get", "--raw", path).stdout
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


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
