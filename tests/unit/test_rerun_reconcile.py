"""A fromBatch rerun through the batch reconcile: fake API, real file:// storage.

The source batch exists only as records in storage (as after it was
deleted). The rerun is resolved once; after an operator restart it runs
from its own accepted spec even when the source's records are gone.
"""

from __future__ import annotations

import json
from typing import Any

from kinetic import layout, storage
from kinetic.manifest import ManifestHeader
from kinetic.resources import KineticBatchSpec
from kinetic_operator.settings import OperatorSettings
from test_batch_reconcile import Batch, container_batch, pod_name, settings  # noqa: F401
from test_operator_reconcile import FakeKube


def write_source(cfg: OperatorSettings, namespace: str = "ns", failed: str = "1,4") -> str:
    """Records of a finished batch grp-src (6 items) as the operator leaves them."""
    root = cfg.storage_root or ""
    home = layout.batch_home(root, namespace, "grp-src", "src-uid")
    spec = KineticBatchSpec.model_validate(container_batch(6)).wire()
    storage.write_bytes(home.current_uri, json.dumps({"uid": "src-uid"}).encode())
    storage.write_bytes(
        home.accepted_spec_uri, json.dumps({"uid": "src-uid", "spec": spec}).encode()
    )
    header = ManifestHeader(group_id="grp-src", total=6, phase="FAILED", failed_indexes=failed)
    storage.write_bytes(home.manifest_uri, header.encode())
    return home.prefix


def env_of(kube: FakeKube, name: str) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in kube.pods[name]["spec"]["containers"][0]["env"]}


RERUN = {"inputs": {"fromBatch": {"name": "grp-src"}}, "maxConcurrent": 1}


def test_a_rerun_launches_its_failed_inputs_as_their_original_indexes(settings):  # noqa: F811
    write_source(settings)
    kube = FakeKube()
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["total"] == 2
    assert batch.created() == [pod_name(0)]
    env = env_of(kube, pod_name(0))
    assert (env["KINETIC_INDEX"], env["KINETIC_INPUT"]) == ("1", "1")  # items are 0..5


def test_after_a_restart_the_rerun_keeps_its_inputs_though_the_source_is_gone(settings):  # noqa: F811
    prefix = write_source(settings)
    kube = FakeKube()
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    batch.deliver()
    kube.end_pod(pod_name(0), message="done")
    storage.delete_prefix(prefix)  # the source was cleaned up meanwhile
    batch.restart()
    batch.reconcile()
    assert batch.status["phase"] == "RUNNING", batch.status
    assert batch.created()[-1] == pod_name(1)
    assert env_of(kube, pod_name(1))["KINETIC_INDEX"] == "4"


def test_a_source_in_another_namespace_is_not_found(settings):  # noqa: F811
    write_source(settings, namespace="other")
    kube = FakeKube()
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED"
    assert (
        "spec.inputs.fromBatch.name: no batch named grp-src has run in namespace ns"
        in (batch.status["message"])
    )
    assert batch.created() == []


def test_a_rerun_of_the_failed_inputs_of_a_running_batch_is_refused(settings):  # noqa: F811
    root = settings.storage_root or ""
    write_source(settings)
    home = layout.batch_home(root, "ns", "grp-src", "src-uid")
    running = ManifestHeader(group_id="grp-src", total=6, phase="RUNNING", failed_indexes="1")
    storage.write_bytes(home.manifest_uri, running.encode())
    kube = FakeKube()
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED"
    assert "batch grp-src is still RUNNING" in batch.status["message"]
    assert batch.created() == []
