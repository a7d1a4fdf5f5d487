"""The thin API layer of the KineticBatch reconcile, against the fake API and real storage.

The batch lives on `FakeKube` (resourceVersions honoured: a write from a
stale copy gets a 409), its manifest under a ``file://`` storage root in
``tmp_path``. `Batch.reconcile` plays what Kopf does around
`reconcile_batch_sync`: the Pod index (`FakeKube.views`), the Pod event
handler's bookkeeping (`deliver`), and the reaper (`reap`).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from kinetic import storage
from kinetic.model import digest
from kinetic.model.resources import BATCH_PLURAL
from kinetic_operator.handlers import batches
from kinetic_operator.handlers.batches import BatchMemory, reconcile_batch_sync
from kinetic_operator.kube import Conflict
from kinetic_operator.logic import batch_logic
from kinetic_operator.logic.manifest_records import Debouncer
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.bodies import GRP, SHA, container_batch, pod_name
from kinetic_testing.fake_kube import NOW, FakeKube, reap_due
from kinetic_testing.reconcilers import Batch


@pytest.fixture
def settings(batch_settings: OperatorSettings) -> OperatorSettings:
    return batch_settings


# ----------------------------------------------------------------------- launching


def test_the_manifest_and_the_reservation_come_before_any_pod(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(5, maxConcurrent=2))
    checks: list[tuple[bool, str]] = []
    kube.on_create = lambda m: checks.append(
        (batch.header() is not None, batch.status.get("activeIndexes", ""))
    )
    batch.reconcile()
    assert sorted(batch.created()) == [pod_name(0), pod_name(1)]
    assert checks == [(True, "0-1"), (True, "0-1")]
    st = batch.status
    assert st["launched"] == 2 and st["manifestURI"] == batch.home.manifest_uri
    manifest = next(c for c in st["conditions"] if c["type"] == "ManifestWritten")
    assert manifest["status"] == "True"
    assert storage.exists(batch.home.accepted_spec_uri)
    pod = kube.pods[pod_name(1)]
    assert pod["metadata"]["labels"]["kinetic.dev/index"] == "1"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "KineticBatch"
    assert batch.events() == ["Launching"]


def test_a_stale_copy_gets_409_and_no_pod_is_created_from_it(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(4, maxConcurrent=2))
    batch.mem.body.set(kube.get_kinetic_batch("ns", GRP))  # the watch's copy
    kube.someone_writes(BATCH_PLURAL, GRP, cancel=True)  # not delivered yet
    kube.calls.clear()
    batch.reconcile()
    assert kube.calls[:2] == [("conflict", GRP), ("get", GRP)]
    assert sorted(batch.created()) == [] and kube.pods == {}
    assert batch.status["phase"] == "CANCELLED"
    assert batch.status["cancelledIndexes"] == "0-3"


def test_acting_on_a_cached_copy_without_a_status_change_reads_afresh_first(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(2, maxConcurrent=None))
    batch.reconcile()
    batch.deliver()
    kube.run_pod(pod_name(0))
    kube.run_pod(pod_name(1))
    batch.reconcile()
    kube.calls.clear()
    kube.someone_writes(BATCH_PLURAL, GRP, cancelIndexes="1")  # not delivered yet
    batch.reconcile()  # the cached copy: nothing to do
    assert pod_name(1) in kube.pods
    batch.mem.body.set(kube.get_kinetic_batch("ns", GRP))  # the watch delivers the edit
    batch.reconcile()
    assert pod_name(1) not in kube.pods and batch.status["cancelledIndexes"] == "1"


def test_endless_conflicts_give_up_for_a_retry_later(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(2))
    kube.interfere = lambda plural, name: kube.someone_writes(plural, name)
    with pytest.raises(Conflict):
        batch.reconcile()
    assert kube.pods == {}


def test_a_pod_that_could_not_be_created_for_a_moment_is_created_on_the_next_try(settings):
    """A timeout or a 500 on create raises (the serializer retries the reconcile with
    backoff); the retry must create the Pod, not wait forever for the watch to show it."""
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(1))
    kube.transient = 1
    with pytest.raises(RuntimeError):
        batch.reconcile()
    assert kube.pods == {}
    batch.reconcile()
    assert pod_name(0) in kube.pods


def test_a_pod_kubernetes_rejects_fails_its_input_once_its_retries_are_spent(settings):
    kube = FakeKube()
    kube.reject[pod_name(0)] = "spec.containers[0].resources: bad quantity"
    kube.reject[pod_name(0, 2)] = "spec.containers[0].resources: bad quantity"
    batch = Batch(kube, settings, container_batch(2, maxConcurrent=None, retries=1))
    assert batch.reconcile() == 0.0  # look again at once: the refusal is a failed attempt
    assert batch.reconcile() == 0.0  # the retry, refused too
    batch.reconcile()
    st = batch.status
    assert st["failedIndexes"] == "0" and st["activeIndexes"] == "1"
    failed = next(m for _, r, m in kube.events if r == "InputsFailed")
    assert "could not be launched" in failed and "bad quantity" in failed


def test_invalid_batches_fail_at_once_and_create_nothing(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(2, chunkSize=2))
    batch.reconcile()
    assert batch.status["phase"] == "FAILED" and "spec.chunkSize is 2" in batch.status["message"]
    assert batch.events() == ["InvalidSpec"] and kube.pods == {}
    kube = FakeKube()
    rootless = settings.model_copy(update={"storage_root": None})
    batch = Batch(kube, rootless, container_batch(2))
    batch.reconcile()
    assert "no storage root" in batch.status["message"] and kube.pods == {}


def test_gone_or_deleting_batches_are_left_alone(settings):
    kube = FakeKube()
    assert reconcile_batch_sync(kube, settings, BatchMemory(), "ns", GRP, {}, NOW) is None
    assert kube.calls == [("get", GRP)]
    kube = FakeKube()
    Batch(kube, settings, container_batch(2), deletionTimestamp="2026-01-01T00:00:00Z").reconcile()
    assert kube.calls == [("get", GRP)]


# ----------------------------------------------------------------------- running to the end


def run_all(batch: Batch, ok=lambda i: True, rounds: int = 20) -> None:
    """Reconcile, start and end every Pod, until the batch ends."""
    for _ in range(rounds):
        batch.reconcile()
        if batch.status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return
        for name, pod in list(batch.kube.pods.items()):
            if pod["status"]["phase"] == "Pending":
                index = int(pod["metadata"]["labels"]["kinetic.dev/index"])
                good = ok(index)
                batch.kube.end_pod(name, ok=good, message=f"out {index}" if good else "boom")
    raise AssertionError(f"the batch did not end: {batch.status}")


def test_a_whole_batch_posts_no_event_per_input(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(12, maxConcurrent=4))
    run_all(batch)
    assert batch.status["phase"] == "SUCCEEDED" and batch.status["progress"] == "12/12"
    assert batch.events() == ["Launching", "Succeeded"]
    assert sorted(batch.created()) == sorted(pod_name(i) for i in range(12))
    records = batch.shard()
    assert {i: r.outcome for i, r in records.items()} == dict.fromkeys(range(12), "SUCCEEDED")
    assert records[7].result == "out 7"  # a container's result outlives its Pod
    header = batch.header()
    assert header is not None and header.succeeded_indexes == "0-11" and header.phase == "SUCCEEDED"


def test_finished_pods_go_after_their_ttl_once_their_shard_is_written(settings):
    kube = FakeKube()
    ttl0 = settings.model_copy(update={"pod_ttl_seconds": 0})
    batch = Batch(kube, ttl0, container_batch(3, maxConcurrent=None))
    batch.reconcile()
    batch.deliver()
    for i in range(3):
        kube.logs[pod_name(i)] = f"log {i}\n".encode()
        kube.end_pod(pod_name(i), message=f"out {i}")
    seen_at_delete: list[tuple[str, bytes]] = []

    def on_delete(name: str) -> None:
        index = int(name.rsplit("-", 2)[1].removeprefix("i"))
        log = storage.read_bytes(batch.home.log_uri(name))
        seen_at_delete.append((batch.shard()[index].outcome, log))

    kube.on_delete = on_delete
    batch.reconcile()
    assert batch.status["phase"] == "SUCCEEDED"
    assert sorted(p for p, _, _ in batch.mem.due) == [pod_name(i) for i in range(3)]
    reap_due(kube, batch.mem.due)
    assert sorted(seen_at_delete) == [("SUCCEEDED", f"log {i}\n".encode()) for i in range(3)]
    assert kube.pods == {}
    # The tombstones that follow change nothing, and nothing runs again.
    kube.calls.clear()
    batch.reconcile()
    assert sorted(batch.created()) == [] and batch.status["phase"] == "SUCCEEDED"


def test_finished_pods_within_their_ttl_are_kept(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(2, maxConcurrent=None))
    batch.reconcile()
    batch.deliver()
    kube.end_pod(pod_name(0), finished=NOW - timedelta(seconds=20))
    kube.end_pod(pod_name(1), finished=NOW - timedelta(seconds=50))
    wait = batch.reconcile()
    assert batch.mem.due == [] and wait == pytest.approx(70)
    batch.reconcile(NOW + timedelta(seconds=71))
    assert [p for p, _, _ in batch.mem.due] == [pod_name(1)]


def test_pods_of_inputs_not_recorded_in_the_manifest_are_never_handed_out(settings):
    """Input 0 ended long ago, the status has it, the manifest (debounced) not yet."""
    kube = FakeKube()
    ttl0 = settings.model_copy(update={"pod_ttl_seconds": 0})
    batch = Batch(kube, ttl0, container_batch(3, maxConcurrent=None))
    batch.reconcile()  # the first manifest write: the debounce interval starts now
    batch.deliver()
    kube.end_pod(pod_name(0), finished=NOW - timedelta(hours=1))
    batch.reconcile()
    assert batch.status["succeededIndexes"] == "0"
    assert 0 not in batch.shard() and batch.mem.due == []
    batch.mem.timers.debouncer.last_write = -1e9  # the interval has passed
    wait = batch.reconcile()
    assert batch.shard()[0].outcome == "SUCCEEDED"
    # Written, but the status does not vouch for it yet: the Pod stays until it does,
    # with the next status write (asked for at once: status_interval is 0 here).
    assert batch.mem.due == [] and wait == 0
    assert batch.status["manifestSHA256"] != batch.mem.outcomes.book.latest.sha256
    batch.reconcile()
    assert batch.status["manifestSHA256"] == batch.mem.outcomes.book.latest.sha256
    assert batch.status["manifestURI"] == batch.mem.outcomes.book.latest.uri
    assert [p for p, _, _ in batch.mem.due] == [pod_name(0)]


def test_cancelling_one_running_input_stops_only_its_pod(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(3, maxConcurrent=None))
    batch.reconcile()
    batch.deliver()
    for i in range(3):
        kube.run_pod(pod_name(i))
    batch.reconcile()
    kube.someone_writes(BATCH_PLURAL, GRP, cancelIndexes="1")
    batch.mem.body.set(kube.get_kinetic_batch("ns", GRP))
    kube.calls.clear()
    batch.reconcile()
    assert ("delete", pod_name(1)) in kube.calls and set(kube.pods) == {pod_name(0), pod_name(2)}
    st = batch.status
    assert (
        st["cancelledIndexes"] == "1" and st["activeIndexes"] == "0,2" and st["phase"] == "RUNNING"
    )
    for i in (0, 2):
        kube.end_pod(pod_name(i))
    batch.reconcile()
    assert batch.status["phase"] == "CANCELLED"  # done, with an input cancelled
    record = batch.shard()[1]
    assert record.outcome == "CANCELLED"
    assert record.attempts[-1].outcome not in ("pending", "running")


def test_a_truncated_status_never_makes_a_recorded_input_run_again(settings, monkeypatch):
    """Once the status's ranges are cut (`truncated`), the operator must still know every
    outcome, in the same process as after a restart."""
    small = lambda status: batch_logic.compact_status(status, cap=20)  # noqa: E731
    monkeypatch.setattr(batches, "compact_status", small)
    kube = FakeKube()
    ttl0 = settings.model_copy(update={"pod_ttl_seconds": 0})
    batch = Batch(kube, ttl0, container_batch(24, maxConcurrent=20))
    batch.reconcile()
    batch.mem.timers.debouncer = Debouncer(interval=0)  # every manifest change written at once
    batch.deliver()
    assert len(kube.pods) == 20
    for i in range(20):  # outcomes alternate: the ranges get long
        kube.end_pod(pod_name(i), ok=i % 2 == 0)
    batch.reconcile()
    st = batch.status
    assert st["truncated"] is True
    assert (st["counts"]["succeeded"], st["counts"]["failed"]) == (10, 10)
    reap_due(kube, batch.mem.due)  # their outcomes are in the manifest: the Pods go
    assert not any(pod_name(i) in kube.pods for i in range(20))
    kube.calls.clear()
    counts = []
    for _ in range(4):
        batch.reconcile()
        st = batch.status
        counts.append((st["counts"]["succeeded"], st["counts"]["failed"]))
    assert sorted(batch.created()) == [], "inputs recorded before were launched again"
    assert counts == [(10, 10)] * 4, "recorded outcomes went back"
    assert "Adopted" not in batch.events()


def test_a_restart_right_after_a_truncated_status_write_forgets_nothing(settings, monkeypatch):
    """The status was written with cut ranges, and the manifest (debounced) does not have
    the newest outcomes yet when the operator restarts: they must not be forgotten."""
    small = lambda status: batch_logic.compact_status(status, cap=20)  # noqa: E731
    monkeypatch.setattr(batches, "compact_status", small)
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(24, maxConcurrent=20))
    batch.reconcile()  # the first manifest write; routine ones wait for the interval
    batch.deliver()
    for i in range(20):
        kube.end_pod(pod_name(i), ok=i % 2 == 0)
    batch.reconcile()
    st = batch.status
    assert st["truncated"] is True
    assert (st["counts"]["succeeded"], st["counts"]["failed"]) == (10, 10)
    batch.restart()
    kube.calls.clear()
    batch.reconcile()
    st = batch.status
    assert (st["counts"]["succeeded"], st["counts"]["failed"]) == (10, 10), "outcomes went back"
    assert "Adopted" not in batch.events() and batch.created() == []


def test_after_a_restart_a_truncated_status_is_completed_from_the_manifest(settings, monkeypatch):
    small = lambda status: batch_logic.compact_status(status, cap=20)  # noqa: E731
    monkeypatch.setattr(batches, "compact_status", small)
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(24, maxConcurrent=None))
    run_all(batch, ok=lambda i: i % 2 == 0)
    assert batch.status["truncated"] is True and batch.status["phase"] == "FAILED"
    batch.restart()
    kube.pods.clear()  # every Pod expired
    kube.calls.clear()
    batch.reconcile()
    assert sorted(batch.created()) == [] and batch.status["counts"]["failed"] == 12


def test_the_manifest_interval_setting_paces_routine_manifest_writes(settings):
    """KINETIC_MANIFEST_INTERVAL: with 0.01 s, a change is in the shard a moment later."""
    kube = FakeKube()
    quick = settings.model_copy(update={"manifest_interval": 0.01})
    batch = Batch(kube, quick, container_batch(2, maxConcurrent=None))
    batch.reconcile()
    batch.deliver()
    kube.run_pod(pod_name(0))
    time.sleep(0.05)
    batch.reconcile()
    assert batch.shard().get(0) is not None and batch.shard()[0].outcome == "RUNNING"


def test_a_restart_adopts_pods_and_creates_nothing_twice(settings):
    kube = FakeKube()
    batch = Batch(kube, settings, container_batch(6, maxConcurrent=3))
    batch.reconcile()
    batch.deliver()
    kube.run_pod(pod_name(0))
    kube.end_pod(pod_name(1), message="one")
    batch.restart()
    kube.calls.clear()
    batch.reconcile()
    assert sorted(batch.created()) == [
        pod_name(3)
    ]  # 1's slot; 2 is seen Pending: not created again
    assert batch.status["succeededIndexes"] == "1"
    assert ("exists", pod_name(2)) not in kube.calls


def test_a_chunked_function_batch_records_each_input(settings, tmp_path):
    kube = FakeKube()
    spec = {
        "template": {
            "function": {
                "payloadURI": f"{settings.storage_root}/namespaces/ns/u/f.pkl",
                "sha256": SHA,
            }
        },
        "inputs": {"items": list(range(5))},
        "chunkSize": 2,
        "maxConcurrent": None,
    }
    batch = Batch(kube, settings, spec)
    batch.reconcile()
    assert sorted(batch.created()) == [pod_name(0), pod_name(2), pod_name(4)]
    assert kube.pods[pod_name(0)]["metadata"]["labels"]["kinetic.dev/chunk"] == "2"
    batch.deliver()

    def report(pod: str, hashes: dict[int, str], lie: bool = False) -> str:
        """What the runner does: the hashes in a report, the report's hash in the message."""
        data = json.dumps({str(i): h for i, h in hashes.items()}).encode()
        storage.write_bytes(batch.home.report_uri(pod), data)
        return "f" * 64 if lie else digest.sha256(data)

    r0 = report(pod_name(0), {1: "1" * 64, 3: "9" * 64})  # 3 is not in its unit: ignored
    r2 = report(pod_name(2), {2: "2" * 64, 3: "3" * 64})
    # The report does not match what its Pod reported: its results cannot be checked, so
    # the chunk's attempt is a failure (it used to succeed with no hash to check against).
    r4 = report(pod_name(4), {4: "4" * 64}, lie=True)
    kube.end_pod(pod_name(0), ok=False, message=f'{{"succeeded":"1","failed":"0","report":"{r0}"}}')
    kube.end_pod(pod_name(2), message=f'{{"succeeded":"2-3","failed":"","report":"{r2}"}}')
    kube.end_pod(pod_name(4), message=f'{{"succeeded":"4","failed":"","report":"{r4}"}}')
    batch.reconcile()
    hashes = {i: r.result_sha256 for i, r in batch.shard().items()}
    assert hashes == {0: None, 1: "1" * 64, 2: "2" * 64, 3: "3" * 64, 4: None}
    st = batch.status
    assert (st["succeededIndexes"], st["failedIndexes"]) == ("1-3", "0,4")
    assert st["phase"] == "FAILED"
    shard = batch.shard()
    outcomes = {i: r.outcome for i, r in shard.items()}
    assert outcomes == {0: "FAILED", 1: "SUCCEEDED", 2: "SUCCEEDED", 3: "SUCCEEDED", 4: "FAILED"}
    assert shard[4].message is not None and "its results cannot be checked" in shard[4].message
    assert batch.home.report_uri(pod_name(4)) in shard[4].message
    assert "report hash mismatch" in shard[4].message
