"""Reference code as written, on the real cluster (issue 32, items 1, 4, 7 and 8).

Each reference signature is called positionally, in the reference's order,
and by keyword (the order is `test_reference_signatures.REFERENCE`, checked
against every signature in the unit tests); a reference-style wait loop ends
after `cancel()`; `results(cleanup=True)` keeps the KineticBatch; and a
blocking ``debug=True`` call says what to attach to, forwards a port itself
and says when a debugger connected.
"""

from __future__ import annotations

import re
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import kinetic
import pytest
import yaml
from dap_client import DapClient
from kinetic.api.handle import JobCancelled, ResultDeleted
from kinetic.api.reference import ArgumentMoved
from kinetic.job_status import JobStatus
from kube_helpers import Kube, wait_for

pytestmark = pytest.mark.integration

TIMEOUT = 240
# The reference's terminal statuses: what a loop written for it waits for.
REFERENCE_TERMINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.NOT_FOUND)


@pytest.fixture
def ns(client_env: dict[str, str], namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's namespace as the reference finds it: from KINETIC_NAMESPACE."""
    monkeypatch.setenv("KINETIC_NAMESPACE", namespace)
    return namespace


@pytest.fixture
def cluster(client_env: dict[str, str]) -> str:
    """The name `cluster=` takes here: the kubeconfig's context (the reference's cluster)."""
    return str(yaml.safe_load(Path(client_env["KUBECONFIG"]).read_text())["current-context"])


def double(x: int) -> int:
    return 2 * x


def test_every_reference_signature_positionally_and_by_keyword(
    ns: str, cluster: str, kube: Kube
) -> None:
    # kinetic.run(accelerator, container_image, base_image_repo, zone, project,
    #             capture_env_vars, cluster, backend, namespace, ...)
    with pytest.warns(ArgumentMoved):  # positions 7 and 8 meant retries and spot before
        by_position = kinetic.run("cpu", None, None, None, None, ["HOME"], cluster, "gke", ns)
    by_keyword = kinetic.run(accelerator="cpu", cluster=cluster, backend="gke", namespace=ns)
    fn, same = by_position(double), by_keyword(double)
    job, other = fn.run_async(21), same.run_async(4)
    assert (job.namespace, job.context) == (ns, cluster)

    # result(timeout, cleanup, cleanup_timeout, cleanup_poll_interval, stream_logs,
    #        on_status_change)
    seen: list[JobStatus] = []
    with pytest.warns(ArgumentMoved):  # the third position was on_status_change before
        assert job.result(TIMEOUT, False, 120, None, False, seen.append) == 42
    assert seen[-1] is JobStatus.SUCCEEDED
    assert other.result(timeout=TIMEOUT, cleanup=False, on_status_change=seen.append) == 8

    # attach(job_id, project, cluster) and list_jobs(project, zone, cluster, namespace)
    assert kinetic.attach(job.job_id, None, cluster).status() is JobStatus.SUCCEEDED
    assert kinetic.attach(job_id=other.job_id, cluster=cluster).job_id == other.job_id
    listed = {h.job_id for h in kinetic.list_jobs(None, None, cluster, ns)}
    assert listed == {job.job_id, other.job_id}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = kinetic.list_jobs(project=None, zone="us-central1-a", cluster=cluster)
    assert {h.job_id for h in again} == listed  # KINETIC_NAMESPACE, as the reference's
    assert any("kinetic.list_jobs(): zone= is accepted" in str(w.message) for w in caught)

    # The handle's methods: status(), logs(follow), tail(n), to_dict(), from_dict(d).
    assert "Traceback" not in job.logs(False)
    assert job.tail(5) == job.tail(n=5)
    assert kinetic.JobHandle.from_dict(job.to_dict()).job_id == job.job_id

    # run_async_map(inputs, **options); attach_batch(group_id, project, cluster,
    # poll_interval, poll_timeout); BatchHandle's keyword-only methods.
    batch = fn.run_async_map([1, 2, 3], max_concurrent=2, retries=0, name="sweep")
    with pytest.warns(DeprecationWarning, match="poll_interval=, poll_timeout="):
        found = kinetic.attach_batch(batch.group_id, None, cluster, 1.0, 60.0)
    assert kinetic.attach_batch(group_id=batch.group_id, cluster=cluster).name == "sweep"
    found.wait(timeout=TIMEOUT)
    assert sorted(j.group_index for j in found.as_completed(poll_interval=1, timeout=60)) == [
        0,
        1,
        2,
    ]
    assert found.status_counts() == {"SUCCEEDED": 3} and found.failures() == []
    assert [s for _, s in found.statuses()] == [JobStatus.SUCCEEDED] * 3
    first = found.jobs[0]
    assert first is not None and first.result(TIMEOUT, False) == 2  # positional, kept

    # results(cleanup=True), the default: each stored result is deleted once read, and the
    # KineticBatch stays (the reference deletes each child's Kubernetes Job).
    assert found.results(timeout=TIMEOUT, ordered=True, return_exceptions=False) == [2, 4, 6]
    assert kube.kubectl("get", "kineticbatch", batch.group_id, "-n", ns).returncode == 0
    assert [s for _, s in found.statuses()] == [JobStatus.SUCCEEDED] * 3  # not NOT_FOUND
    with pytest.raises(ResultDeleted):
        found.jobs[1].result(timeout=60)  # type: ignore[union-attr]
    found.cleanup(k8s=True, gcs=True)
    assert found.statuses() == []

    # cleanup(k8s, gcs, cleanup_timeout, cleanup_poll_interval)
    job.cleanup(True, True, 120, None)
    other.cleanup(k8s=True, gcs=True, cleanup_timeout=120)
    assert job.status() is JobStatus.NOT_FOUND and other.status() is JobStatus.NOT_FOUND


def nap(seconds: float) -> str:
    import time as t

    t.sleep(seconds)
    return "woke"


def test_a_reference_wait_loop_ends_after_cancel(ns: str) -> None:
    """cancel() deletes the job once it has stopped, as the reference's does: a loop that
    waits for SUCCEEDED, FAILED or NOT_FOUND ends, with NOT_FOUND. keep=True keeps it."""
    sleeper = kinetic.run(namespace=ns)(nap)
    job, kept = sleeper.run_async(600), sleeper.run_async(600)
    wait_for(lambda: job.status() is JobStatus.RUNNING, timeout=TIMEOUT, what="the job to run")

    threading.Timer(1.0, lambda: job.cancel(120, None)).start()  # (cleanup_timeout, interval)
    deadline = time.monotonic() + TIMEOUT
    while (status := job.status()) not in REFERENCE_TERMINAL:  # as reference code waits
        assert time.monotonic() < deadline, f"the loop did not end: {status}"
        time.sleep(1)
    assert status is JobStatus.NOT_FOUND
    with pytest.raises(LookupError):  # another process cannot find it either: it was deleted
        kinetic.attach(job.job_id, namespace=ns)

    assert kept.cancel(keep=True) is JobStatus.CANCELLED
    assert kept.status() is JobStatus.CANCELLED  # kept: its status and logs stay readable
    with pytest.raises(JobCancelled):
        kept.result(timeout=60)
    kept.cleanup(cleanup_timeout=120)


def add(a: int, b: int) -> int:
    return a + b


def test_a_blocking_debug_call_attaches_by_itself(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """fn(...) with debug=True prints the job and the attach command, forwards a port once
    the Pod is ready, says when a debugger connected, and returns the value."""
    debugged = kinetic.run(namespace=ns, debug=True)(add)
    got: list[Any] = []
    call = threading.Thread(target=lambda: got.append(debugged(2, 3)), daemon=True)
    call.start()
    printed = ""

    def forwarded() -> re.Match[str] | None:
        nonlocal printed
        printed += capsys.readouterr().out
        return re.search(r"debugpy is forwarded to localhost:(\d+)", printed)

    port = int(wait_for(forwarded, timeout=TIMEOUT, what="the forward").group(1))
    said = re.search(r"Job (\S+) runs with debug=True", printed)
    assert said is not None, printed
    job_id = said.group(1)
    assert f"kinetic jobs debug {job_id} -n {ns}" in printed
    with DapClient("127.0.0.1", port) as dap:
        assert dap.initialize()["success"] is True
        dap.attach_and_go()
        call.join(TIMEOUT)
    assert got == [5]
    printed += capsys.readouterr().out
    assert f"A debugger connected to job {job_id} (localhost:{port})" in printed
    kinetic.attach(job_id, namespace=ns).cleanup(cleanup_timeout=120)  # a debug job is kept
