"""What a batch reads back from storage counts only as far as its status vouches for it.

The batch reconcile against the fake API and real ``file://`` storage, with
storage changed behind the operator's back, as any Pod or bucket writer
could: the accepted spec, a manifest shard or header, a chunk's report.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from kinetic import storage
from kinetic.model import digest
from kinetic.model.resources import BATCH_PLURAL, KineticBatchSpec
from kinetic_operator.accepted import judge_stored
from kinetic_operator.handlers import batches
from kinetic_operator.logic import batch_logic
from kinetic_operator.logic.policy import Policy
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.bodies import GRP, container_batch, pod_name
from kinetic_testing.fake_kube import FakeKube
from kinetic_testing.reconcilers import Batch


@pytest.fixture
def settings(batch_settings: OperatorSettings) -> OperatorSettings:
    return batch_settings


BUSYBOX = {"template": {"container": {"command": ["echo"]}, "image": "busybox:1.36"}}


def running(kube: FakeKube, settings: Any, n: int = 3, **extra: Any) -> Batch:
    batch = Batch(kube, settings, {**container_batch(n, maxConcurrent=1), **BUSYBOX, **extra})
    batch.reconcile()
    batch.deliver()
    kube.run_pod(pod_name(0))
    batch.reconcile()
    assert batch.status["phase"] == "RUNNING"
    return batch


# --------------------------------------------------------------------------- the accepted spec


def test_the_status_vouches_for_the_stored_accepted_spec(settings):
    kube = FakeKube()
    batch = running(kube, settings)
    stored = storage.read_bytes(batch.home.accepted_spec_uri)
    assert batch.status["acceptedSpecSHA256"] == digest.sha256(stored)


def test_a_tampered_accepted_spec_stops_the_batch_after_a_restart(settings):
    kube = FakeKube()
    batch = running(kube, settings)
    doc = json.loads(storage.read_bytes(batch.home.accepted_spec_uri))
    doc["spec"]["template"]["image"] = "evil:latest"
    forged = json.dumps(doc).encode()
    storage.write_bytes(batch.home.accepted_spec_uri, forged)
    batch.restart()
    kube.end_pod(pod_name(0))  # an input to launch next: not from the forged spec
    batch.reconcile()
    status = batch.status
    assert status["phase"] == "FAILED" and batch.created() == [pod_name(0)]
    message = status["message"]
    assert batch.home.accepted_spec_uri in message and digest.sha256(forged) in message
    assert status["acceptedSpecSHA256"] in message
    assert "differs from the batch's own spec in spec.template" in message
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "InvalidSpec" in batch.events()


def test_a_forged_accepted_spec_nothing_vouches_for_is_written_over(settings):
    """Planted before the batch's first status write: no Pod exists, nothing is believed."""
    kube = FakeKube()
    batch = Batch(kube, settings, {**container_batch(2), **BUSYBOX})
    planted = KineticBatchSpec.model_validate(
        {**container_batch(2), "template": {"container": {"command": ["rm", "-rf", "/"]}}}
    )
    data = json.dumps({"uid": "b-uid", "spec": planted.wire()}).encode()
    storage.write_bytes(batch.home.accepted_spec_uri, data)
    batch.reconcile()
    pod = kube.pods[pod_name(0)]
    assert pod["spec"]["containers"][0]["command"] == ["echo"]
    assert batch.status["acceptedSpecSHA256"] != digest.sha256(data)


def test_an_accepted_spec_from_before_digests_is_taken_only_if_it_agrees(settings):
    kube = FakeKube()
    batch = running(kube, settings)
    obj = kube.objects[(BATCH_PLURAL, GRP)]
    del obj["status"]["acceptedSpecSHA256"]  # as an older operator left it
    batch.restart()
    batch.reconcile()
    assert batch.status["phase"] == "RUNNING"
    assert batch.status["acceptedSpecSHA256"]  # recorded from now on

    kube = FakeKube()
    other = running(kube, settings)
    obj = kube.objects[(BATCH_PLURAL, GRP)]
    del obj["status"]["acceptedSpecSHA256"]
    doc = json.loads(storage.read_bytes(other.home.accepted_spec_uri))
    doc["spec"]["inputs"]["items"] = [9, 9, 9]
    storage.write_bytes(other.home.accepted_spec_uri, json.dumps(doc).encode())
    other.restart()
    other.reconcile()
    assert other.status["phase"] == "FAILED"
    assert "differs from the batch's own spec in spec.inputs" in other.status["message"]


def test_the_stored_spec_is_judged_again_before_it_is_used(settings):
    """Even vouched for, it adds nothing the policy refuses to what the object shows."""
    stored = KineticBatchSpec.model_validate({**container_batch(2), **BUSYBOX})
    live = KineticBatchSpec.model_validate(container_batch(2))
    home = Batch(FakeKube(), settings, container_batch(2)).home
    policy = Policy(allowed_images=("registry.example/",))
    problems = judge_stored(stored, live, home, settings, policy)
    assert problems == [
        f"the accepted spec {home.accepted_spec_uri}: spec.template.image 'busybox:1.36' is not "
        "an allowed image; allowed images: registry.example/ (kinetic-policy in "
        "kinetic-system): use an image under one of them (an entry allows what is below it by "
        "whole path parts, or exactly its tag or digest)"
    ]
    outside = stored.model_copy(
        update={"template": stored.template.model_copy(update={"output_dir": "file:///etc/x"})}  # type: ignore[union-attr]
    )
    (problem,) = judge_stored(outside, outside, home, settings, None)
    assert "spec.template.outputDir: file:///etc/x is outside" in problem


# --------------------------------------------------------------------------- the manifest


def test_every_status_write_vouches_for_what_was_written_last(settings):
    kube = FakeKube()
    batch = running(kube, settings)
    book = batch.mem.outcomes.book
    assert book is not None and book.latest is not None
    status = batch.status
    assert (status["manifestURI"], status["manifestSHA256"]) == (
        book.latest.uri,
        book.latest.sha256,
    )
    assert digest.sha256(storage.read_bytes(status["manifestURI"])) == status["manifestSHA256"]


def test_a_forged_shard_found_after_a_restart_is_reported_and_not_used(settings):
    kube = FakeKube()
    batch = running(kube, settings)
    kube.end_pod(pod_name(0), message="out 0")
    batch.mem.timers.debouncer.last_write = -1e9
    batch.reconcile()
    batch.reconcile()  # the status vouches for the shard holding input 0
    header = json.loads(storage.read_bytes(batch.status["manifestURI"]))
    ref = header["shardRefs"]["0"]
    uri = batch.home.manifest_shard_uri(0, ref["slot"])
    shard = json.loads(storage.read_bytes(uri))
    shard["inputs"]["0"]["result"] = "forged"
    storage.write_bytes(uri, json.dumps(shard).encode())
    batch.restart()
    batch.deliver()
    kube.run_pod(pod_name(1))
    batch.mem.timers.debouncer.last_write = -1e9
    batch.reconcile()
    assert "ManifestTampered" in batch.events()
    assert batch.status["phase"] == "RUNNING"
    assert batch.shard().get(0) is None or batch.shard()[0].result != "forged"


def test_a_cut_status_with_a_forged_header_stops_rather_than_run_inputs_twice(
    settings,
    monkeypatch,
):
    small = lambda status: batch_logic.compact_status(status, cap=20)  # noqa: E731
    monkeypatch.setattr(batches, "compact_status", small)
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(24, maxConcurrent=20))
    batch.reconcile()
    batch.deliver()
    for i in range(20):
        kube.end_pod(pod_name(i), ok=i % 2 == 0)
    batch.reconcile()
    batch.reconcile()
    assert batch.status["truncated"] is True
    storage.write_bytes(batch.status["manifestURI"], b'{"version":2,"groupId":"x"}')
    batch.restart()
    kube.pods.clear()
    kube.calls.clear()
    batch.reconcile()
    status = batch.status
    assert status["phase"] == "FAILED" and batch.created() == []
    assert "launch inputs that already ran" in status["message"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ManifestTampered"


# --------------------------------------------------------------------------- chunk reports


def test_a_2gb_chunk_report_fails_its_chunk_and_costs_nothing(settings, tmp_path: Path):
    kube = FakeKube()
    spec = {
        "template": {
            "function": {
                "payloadURI": f"{settings.storage_root}/namespaces/ns/u/f.pkl",
                "sha256": "a" * 64,
            }
        },
        "inputs": {"items": list(range(4))},
        "chunkSize": 2,
        "maxConcurrent": None,
    }
    batch = Batch(kube, settings, spec)
    batch.reconcile()
    batch.deliver()
    huge = batch.home.report_uri(pod_name(0))
    path = huge.removeprefix("file://")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(2 << 30)
    good = json.dumps({"2": "2" * 64, "3": "3" * 64}).encode()
    storage.write_bytes(batch.home.report_uri(pod_name(2)), good)
    claim = '{"succeeded":"0-1","failed":"","report":"' + "e" * 64 + '"}'
    kube.end_pod(pod_name(0), message=claim)
    kube.end_pod(
        pod_name(2),
        message=json.dumps({"succeeded": "2-3", "failed": "", "report": digest.sha256(good)}),
    )
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        batch.reconcile()
        grew = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert grew < 16 << 20  # the operator may grow by less than 100 MB; it grows by far less
    status = batch.status
    assert (status["succeededIndexes"], status["failedIndexes"]) == ("2-3", "0-1")
    shard = batch.shard()
    assert shard[0].message is not None and "2,147,483,648 bytes" in shard[0].message
    assert "65,536" in shard[0].message and "its results cannot be checked" in shard[0].message
    assert (shard[2].result_sha256, shard[3].result_sha256) == ("2" * 64, "3" * 64)


def test_a_chunks_retry_carries_the_checked_hashes_of_inputs_already_done(settings):
    kube = FakeKube()
    spec = {
        "template": {
            "function": {
                "payloadURI": f"{settings.storage_root}/namespaces/ns/u/f.pkl",
                "sha256": "a" * 64,
            }
        },
        "inputs": {"items": [0, 1]},
        "chunkSize": 2,
        "retries": 1,
    }
    batch = Batch(kube, settings, spec)
    batch.reconcile()
    batch.deliver()
    report = json.dumps({"0": "0" * 64}).encode()
    storage.write_bytes(batch.home.report_uri(pod_name(0)), report)
    message = json.dumps({"succeeded": "0", "failed": "1", "report": digest.sha256(report)})
    kube.end_pod(pod_name(0), ok=False, message=message)
    batch.reconcile()
    env = {e["name"]: e["value"] for e in kube.pods[pod_name(0, 2)]["spec"]["containers"][0]["env"]}
    entries = json.loads(env["KINETIC_CHUNK"])
    assert [e.get("resultSHA256") for e in entries] == ["0" * 64, None]
