"""A fromBatch rerun through the batch reconcile: fake API, real file:// storage.

The source batch is an object on the fake API server: its spec says what it
ran, its status which inputs failed, and storage is read only where its
status vouches for it. The rerun is resolved once; after an operator
restart it runs from its own accepted spec (vouched for by its own status)
even when the source and its records are gone. A source that is gone
before the rerun is resolved is not rerun.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.manifest import ManifestHeader
from kinetic.model.resources import BATCH_PLURAL, KineticBatchSpec
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.bodies import container_batch, pod_name
from kinetic_testing.fake_kube import FakeKube
from kinetic_testing.reconcilers import Batch


@pytest.fixture
def settings(batch_settings: OperatorSettings) -> OperatorSettings:
    return batch_settings


SOURCE = "grp-src"


def put_source(
    kube: FakeKube,
    cfg: OperatorSettings,
    *,
    failed: str = "1,4",
    phase: str = "FAILED",
    spec: dict[str, Any] | None = None,
    **status: Any,
) -> layout.Home:
    """A batch grp-src (6 items) as the API server holds it once it ended."""
    kube.put(
        BATCH_PLURAL,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticBatch",
            "metadata": {"name": SOURCE, "namespace": "ns", "uid": "src-uid", "generation": 1},
            "spec": spec or container_batch(6),
            "status": {"phase": phase, "total": 6, "failedIndexes": failed, **status},
        },
    )
    return layout.batch_home(cfg.storage_root or "", "ns", SOURCE, "src-uid")


def env_of(kube: FakeKube, name: str) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in kube.pods[name]["spec"]["containers"][0]["env"]}


RERUN = {"inputs": {"fromBatch": {"name": SOURCE}}, "maxConcurrent": 1}


def test_a_rerun_launches_its_failed_inputs_as_their_original_indexes(settings):
    kube = FakeKube()
    put_source(kube, settings)
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["total"] == 2
    assert batch.created() == [pod_name(0)]
    env = env_of(kube, pod_name(0))
    assert (env["KINETIC_INDEX"], env["KINETIC_INPUT"]) == ("1", "1")  # items are 0..5


def test_after_a_restart_the_rerun_keeps_its_inputs_though_the_source_is_gone(settings):
    kube = FakeKube()
    home = put_source(kube, settings)
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["acceptedSpecSHA256"] == digest.sha256(
        storage.read_bytes(batch.home.accepted_spec_uri)
    )
    batch.deliver()
    kube.end_pod(pod_name(0), message="done")
    del kube.objects[(BATCH_PLURAL, SOURCE)]  # the source was deleted meanwhile
    storage.delete_prefix(home.prefix)
    batch.restart()
    batch.reconcile()
    assert batch.status["phase"] == "RUNNING", batch.status
    assert batch.created()[-1] == pod_name(1)
    assert env_of(kube, pod_name(1))["KINETIC_INDEX"] == "4"


def test_a_source_that_is_gone_is_not_rerun(settings):
    """Its records may still be in storage, but nothing vouches for them any more."""
    kube = FakeKube()
    home = put_source(kube, settings)
    spec = KineticBatchSpec.model_validate(container_batch(6)).wire()
    storage.write_bytes(
        home.accepted_spec_uri, json.dumps({"uid": "src-uid", "spec": spec}).encode()
    )
    del kube.objects[(BATCH_PLURAL, SOURCE)]
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED"
    message = batch.status["message"]
    assert "spec.inputs.fromBatch.name: there is no batch grp-src in namespace ns" in message
    assert "rerun a batch before deleting it" in message
    assert batch.created() == []


def test_a_rerun_of_the_failed_inputs_of_a_running_batch_is_refused(settings):
    kube = FakeKube()
    put_source(kube, settings, phase="RUNNING", failed="1")
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED"
    assert "batch grp-src is still RUNNING" in batch.status["message"]
    assert batch.created() == []


def test_a_cut_status_is_completed_from_the_manifest_it_vouches_for(settings):
    kube = FakeKube()
    home = layout.batch_home(settings.storage_root or "", "ns", SOURCE, "src-uid")
    header = ManifestHeader(group_id=SOURCE, total=6, phase="FAILED", failed_indexes="1,3,5")
    storage.write_bytes(home.manifest_uri, header.encode())
    vouched = {"manifestURI": home.manifest_uri, "manifestSHA256": digest.sha256(header.encode())}
    put_source(kube, settings, failed="1", truncated=True, **vouched)
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["total"] == 3


def test_a_forged_manifest_of_the_source_is_refused(settings):
    kube = FakeKube()
    home = layout.batch_home(settings.storage_root or "", "ns", SOURCE, "src-uid")
    header = ManifestHeader(group_id=SOURCE, total=6, phase="FAILED", failed_indexes="1")
    vouched = {"manifestURI": home.manifest_uri, "manifestSHA256": digest.sha256(header.encode())}
    forged = header.model_copy(update={"failed_indexes": "0-5"})
    storage.write_bytes(home.manifest_uri, forged.encode())
    put_source(kube, settings, failed="1", truncated=True, **vouched)
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED" and batch.created() == []
    assert "was changed in storage" in batch.status["message"]
    assert digest.sha256(forged.encode()) in batch.status["message"]


def test_a_rerun_of_a_rerun_takes_its_inputs_only_as_its_status_vouches(settings):
    """The source is itself a rerun: its resolved inputs are in its accepted spec."""
    kube = FakeKube()
    home = layout.batch_home(settings.storage_root or "", "ns", SOURCE, "src-uid")
    resolved = KineticBatchSpec.model_validate(
        {**container_batch(6), "inputs": {"items": list(range(6)), "indexes": "2-5"}}
    )
    data = json.dumps({"uid": "src-uid", "spec": resolved.wire()}).encode()
    storage.write_bytes(home.accepted_spec_uri, data)
    put_source(
        kube,
        settings,
        failed="0,2",
        spec={"inputs": {"fromBatch": {"name": "grp-first", "indexes": "2-5"}}},
        acceptedSpecSHA256=digest.sha256(data),
    )
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["total"] == 2
    assert env_of(kube, pod_name(0))["KINETIC_INDEX"] == "2"  # position 0 of 2-5

    # The same, with the accepted spec swapped in storage for one with other inputs.
    kube = FakeKube()
    tampered = resolved.model_copy(
        update={"inputs": resolved.inputs.model_copy(update={"indexes": "0-3"})}  # type: ignore[union-attr]
    )
    storage.write_bytes(
        home.accepted_spec_uri, json.dumps({"uid": "src-uid", "spec": tampered.wire()}).encode()
    )
    put_source(
        kube,
        settings,
        failed="0,2",
        spec={"inputs": {"fromBatch": {"name": "grp-first", "indexes": "2-5"}}},
        acceptedSpecSHA256=digest.sha256(data),
    )
    batch = Batch(kube, settings, RERUN)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED" and batch.created() == []
    assert "status.acceptedSpecSHA256 says" in batch.status["message"]
