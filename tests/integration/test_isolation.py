"""Results belong to one object, and are verified (issue 8, parts 1 and 2).

On the real local cluster: a same-named job in another namespace, or a job
deleted and re-applied under its name, runs afresh and reports its own
result; a spec naming storage outside its namespace's prefix ends FAILED
with InvalidSpec naming the field; cleanup deletes nothing outside the
object's own prefix whatever resultURI says; a result changed in storage
after success is refused by the client before it is unpickled.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.jobs import JobHandle, JobStatus, submit_job
from kinetic.api.kube import KubeClient
from kinetic.model import digest, layout, payload
from kinetic.model import resources as r
from kube_helpers import Kube, fresh_namespace

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context


@pytest.fixture
def other_ns(kube: Kube, client_env: dict[str, str]) -> Iterator[str]:
    """A second tenant's namespace."""
    with fresh_namespace(kube) as name:
        yield name


def count_and_tag(counter: str, tag: str) -> str:
    """Counts its executions in storage, so a test can tell a run from a stale result."""
    from kinetic import storage as s

    found = s.read_if_exists(counter)
    n = int(found[0]) if found else 0
    s.write_bytes(counter, str(n + 1).encode())
    return tag


def _counter() -> str:
    return storage.join(resolve().storage_root, "test-counters", uuid.uuid4().hex)


def _runs(counter: str) -> int:
    found = storage.read_if_exists(counter)
    return int(found[0]) if found else 0


def _function_job(ns: str, name: str, *args: Any) -> JobHandle:
    """What `f.run_async()` does, under a chosen name: upload, then create the KineticJob."""
    cfg = resolve(namespace=ns)
    data = payload.build_job_payload(count_and_tag, args, {})
    uri = layout.job_payload_uri(layout.new_upload_dir(cfg.storage_root, ns, name))
    storage.write_bytes(uri, data)
    fn = r.FunctionSpec(payload_uri=uri, sha256=payload.sha256(data), name="count_and_tag")
    return submit_job(cfg, r.KineticJobSpec(function=fn), name)


def _wait_gone(ns: str, name: str) -> None:
    for obj in kinetic_kube.watch_one(r.JOB_PLURAL, ns, name, 60):
        if obj is None:
            return


def test_a_same_named_job_in_another_namespace_runs_afresh(ns: str, other_ns: str) -> None:
    counter = _counter()
    first = _function_job(ns, "train", counter, "tenant a")
    assert first.result(timeout=120, cleanup=False) == "tenant a"
    second = _function_job(other_ns, "train", counter, "tenant b")
    assert second.result(timeout=120, cleanup=False) == "tenant b"
    assert _runs(counter) == 2  # it ran; it did not report the other tenant's result
    assert first.result_uri != second.result_uri
    assert second.result_uri.startswith(layout.namespace_prefix(resolve().storage_root, other_ns))


def test_a_job_copied_into_another_namespace_cannot_read_the_first_ones_files(
    ns: str, other_ns: str
) -> None:
    counter = _counter()
    original = _function_job(ns, "copied", counter, "original")
    assert original.result(timeout=120, cleanup=False) == "original"
    body = kinetic_kube.get(r.JOB_PLURAL, ns, "copied")
    assert body is not None
    copy = {
        "apiVersion": r.API_VERSION,
        "kind": r.JOB_KIND,
        "metadata": {"name": "copied", "namespace": other_ns},
        "spec": body["spec"],
    }
    kinetic_kube.create(r.JOB_PLURAL, other_ns, copy)
    handle = kinetic.attach("copied", namespace=other_ns)
    assert handle.wait(timeout=60) is JobStatus.FAILED
    status = handle.describe()
    prefix = layout.namespace_prefix(resolve().storage_root, other_ns)
    assert status["message"].startswith("spec.function.payloadURI: ")
    assert prefix in status["message"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidSpec")
    assert "resultSHA256" not in status and _runs(counter) == 1


def test_delete_and_reapply_under_the_same_name_runs_afresh(ns: str) -> None:
    counter = _counter()
    first = _function_job(ns, "resync", counter, "one")
    assert first.result(timeout=120, cleanup=False) == "one"
    body = kinetic_kube.get(r.JOB_PLURAL, ns, "resync")
    assert body is not None
    kinetic_kube.delete(r.JOB_PLURAL, ns, "resync")
    _wait_gone(ns, "resync")
    # A GitOps re-sync: the same manifest again, payload and all.
    again = {k: body[k] for k in ("apiVersion", "kind", "spec")}
    again["metadata"] = {"name": "resync", "namespace": ns}
    created = kinetic_kube.create(r.JOB_PLURAL, ns, again)
    assert created["metadata"]["uid"] != body["metadata"]["uid"]
    second = kinetic.attach("resync", namespace=ns)
    assert second.result(timeout=120, cleanup=False) == "one"
    assert _runs(counter) == 2  # it ran again instead of reporting the deleted job's result
    assert second.result_uri != first.result_uri
    # The first job's result is still its own, and still verifies against its own hash.
    assert storage.exists(first.result_uri)


def test_a_payload_outside_the_namespace_prefix_fails_naming_the_field(ns: str) -> None:
    cfg = resolve(namespace=ns)
    data = payload.build_job_payload(count_and_tag, (_counter(), "x"), {})
    outside = storage.join(cfg.storage_root, "jobs", "sneaky", "payload.pkl")
    storage.write_bytes(outside, data)
    fn = r.FunctionSpec(payload_uri=outside, sha256=payload.sha256(data))
    job = submit_job(cfg, r.KineticJobSpec(function=fn), "sneaky")
    assert job.wait(timeout=60) is JobStatus.FAILED
    message = job.describe()["message"]
    assert message.startswith(f"spec.function.payloadURI: {outside} is outside")
    assert layout.namespace_prefix(cfg.storage_root, ns) in message
    assert job.describe()["attempts"] == []  # no Pod was ever created


def test_a_batch_whose_inputs_are_outside_the_namespace_prefix_fails_naming_the_field(
    ns: str, other_ns: str
) -> None:
    cfg = resolve(namespace=ns)
    foreign = layout.namespace_prefix(cfg.storage_root, other_ns) + "uploads/x/inputs"
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": "grp-0badf00d", "namespace": ns},
        "spec": {
            "template": {"container": {"command": ["true"]}},
            "inputs": {"items": [1, 2]},
        },
    }
    kinetic_kube.create(r.BATCH_PLURAL, ns, body)
    fn_body = {
        **body,
        "metadata": {"name": "grp-0badf00e", "namespace": ns},
        "spec": {
            "template": {
                "function": {
                    "payloadURI": layout.namespace_prefix(cfg.storage_root, ns) + "u/f.pkl",
                    "sha256": "0" * 64,
                }
            },
            "inputs": {"count": 2, "uriPrefix": foreign},
        },
    }
    kinetic_kube.create(r.BATCH_PLURAL, ns, fn_body)
    batch = kinetic.attach_batch("grp-0badf00e", namespace=ns)
    deadline = time.monotonic() + 60
    while batch.status().get("phase") != "FAILED" and time.monotonic() < deadline:
        time.sleep(0.5)
    status = batch.status()
    assert status["phase"] == "FAILED"
    assert f"spec.inputs.uriPrefix: {foreign} is outside" in status["message"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"


def test_cleanup_with_a_hostile_result_uri_deletes_only_the_jobs_own_prefix(ns: str) -> None:
    cfg = resolve(namespace=ns)
    root = cfg.storage_root
    bucket_level = root.rsplit("/", 1)[0] + "/result.pkl" if root.count("/") > 2 else None
    keep = [
        storage.join(root, "keep-me.txt"),
        layout.namespace_prefix(root, ns) + "keep-me.txt",
        layout.namespace_prefix(root, ns) + "uploads/other-0123456789abcdef/payload.pkl",
    ]
    for uri in keep:
        storage.write_bytes(uri, b"precious")
    # Inside the namespace but pointing at another object's upload: accepted and ignored.
    counter = _counter()
    data = payload.build_job_payload(count_and_tag, (counter, "mine"), {})
    upload = layout.new_upload_dir(root, ns, "hostile-in")
    storage.write_bytes(layout.job_payload_uri(upload), data)
    fn = r.FunctionSpec(
        payload_uri=layout.job_payload_uri(upload),
        sha256=payload.sha256(data),
        result_uri=keep[2],
    )
    inside = submit_job(cfg, r.KineticJobSpec(function=fn), "hostile-in")
    assert inside.result(timeout=120, cleanup=False) == "mine"
    assert inside.result_uri != keep[2]  # the result went to the job's own prefix
    inside.cleanup()
    assert storage.list_prefix(inside._home().prefix) == []
    # Outside the root's namespaces altogether: refused, and cleanup still touches nothing.
    for hostile in filter(None, [bucket_level, storage.join(root, "result.pkl")]):
        name = f"hostile-{uuid.uuid4().hex[:6]}"
        fn = r.FunctionSpec(
            payload_uri=layout.job_payload_uri(upload),
            sha256=payload.sha256(data),
            result_uri=hostile,
        )
        job = submit_job(cfg, r.KineticJobSpec(function=fn), name)
        assert job.wait(timeout=60) is JobStatus.FAILED
        assert job.describe()["message"].startswith("spec.function.resultURI: ")
        job.cleanup()
    assert all(storage.read_bytes(uri) == b"precious" for uri in keep)


def test_cleanup_leaves_nothing_stored_under_the_jobs_name(ns: str) -> None:
    """After result() (which cleans up), no pointer is left to files that are gone."""

    @kinetic.run(namespace=ns)
    def value() -> str:
        return "once"

    job = value.run_async()
    assert job.result(timeout=120) == "once"
    named = layout.namespace_prefix(resolve().storage_root, ns) + f"jobs/{job.job_id}/"
    assert storage.list_prefix(named) == []
    with pytest.raises(LookupError, match="no result recorded for that name"):
        kinetic.attach(job.job_id, namespace=ns)


def test_a_result_changed_in_storage_after_success_is_refused(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def value() -> str:
        return "genuine"

    job = value.run_async()
    assert job.wait(timeout=120) is JobStatus.SUCCEEDED
    recorded = job.describe()["resultSHA256"]
    assert recorded == digest.sha256(storage.read_bytes(job.result_uri))
    forged = payload.dump_result(payload.success("forged"))
    storage.write_bytes(job.result_uri, forged)
    with pytest.raises(digest.ResultMismatch) as err:
        job.result(timeout=10)
    text = str(err.value)
    assert job.result_uri in text and recorded in text and digest.sha256(forged) in text
    assert job.status() is JobStatus.SUCCEEDED  # nothing was cleaned up on the way


def test_attach_after_deletion_unpickles_nothing_nobody_vouches_for(ns: str) -> None:
    """current.json, next to the result in storage, is rewritable by any Pod or bucket writer:
    once the job is gone, its result is not taken on its word (it used to be)."""

    @kinetic.run(namespace=ns)
    def value() -> int:
        return 7

    job = value.run_async()
    job.wait(timeout=120)
    job.cleanup(k8s=True, gcs=False)
    again = kinetic.attach(job.job_id, namespace=ns)  # found through current.json
    assert again.uid == job.uid
    with pytest.raises(digest.Unverifiable, match="no longer exists"):
        again.result(timeout=10, cleanup=False)
    storage.write_bytes(job.result_uri, payload.dump_result(payload.success(8)))
    with pytest.raises(digest.ResultMismatch):
        kinetic.attach(job.job_id, namespace=ns).result(timeout=10)


def test_a_batch_inputs_tampered_result_is_refused(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def double(x: int) -> int:
        return 2 * x

    batch = double.run_async_map([1, 2, 3], chunk_size=2)
    assert batch.results(timeout=180, cleanup=False) == [2, 4, 6]
    first = batch.jobs[0]
    assert first.result(cleanup=False) == 2  # verified against the manifest's record
    storage.write_bytes(first.result_uri, payload.dump_result(payload.success(99)))
    with pytest.raises(digest.ResultMismatch):
        batch.jobs[0].result(cleanup=False)
    assert batch.jobs[2].result(cleanup=False) == 6  # its own chunk, untouched
