"""The operator's Prometheus metrics, scraped as Prometheus would, after real work."""

from __future__ import annotations

import pytest
from kinetic_testing.cluster import apply_batch as apply
from kinetic_testing.cluster import running_pods, scrape, sh
from kinetic_testing.cluster import wait_batch_phase as wait_phase
from kube_helpers import Kube, leader_pod_name, wait_for, wait_operator_ready

pytestmark = pytest.mark.integration


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


def test_metrics_show_the_inputs_a_batch_just_ran(kube: Kube, ns: str) -> None:
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
