"""The operator's Prometheus metrics, scraped as Prometheus would, after real work."""

from __future__ import annotations

import urllib.request

import pytest
from kinetic.local.operator import metrics_port
from kube_helpers import Kube, wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_operator_batches import apply, ns, sh, wait_phase  # noqa: F401 - ns is a fixture

pytestmark = pytest.mark.integration


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the operator's /metrics, by name and labels."""
    url = f"http://127.0.0.1:{metrics_port()}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def inputs(samples: dict, what: str) -> float:
    return samples.get((f"kinetic_inputs_{what}_total", (("kind", "KineticBatch"),)), 0.0)


def test_metrics_show_the_inputs_a_batch_just_ran(kube: Kube, ns: str) -> None:  # noqa: F811
    before = scrape()
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
        lambda: (s := scrape()) and inputs(s, "failed") > inputs(before, "failed") and s,
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
