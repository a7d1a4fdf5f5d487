"""The Python client end to end: @kinetic.run, JobHandle, attach, list_jobs, the CLI.

Runs against the operator on a real cluster with real storage (fake-gcs-server
on the local cluster). Functions here are defined in a test module, so they
are pickled by value like a user's own code.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.handle import ResultDeleted
from kinetic.api.jobs import JobFailed, JobStatus, new_job_id, submit_job
from kinetic.api.kube import KubeClient
from kinetic.model import digest, layout, names, payload
from kinetic.model import resources as r
from kube_helpers import Kube, run_client, wait_for
from kubernetes import watch

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context


def _counter_uri() -> str:
    """A storage object both the test and the job's process can reach."""
    return storage.join(resolve().storage_root, "test-counters", uuid.uuid4().hex)


# --------------------------------------------------------------------------- values


def test_sync_call_returns_the_value(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def scale(xs: list[int], by: int = 2) -> list[int]:
        return [x * by for x in xs]

    assert scale([1, 2, 3], by=10) == [10, 20, 30]


def test_lambda_and_closure_run_by_value(ns: str) -> None:
    offset = 41
    add_offset = kinetic.run(namespace=ns)(lambda x: x + offset)
    assert add_offset(1) == 42


def test_user_exception_is_reraised_with_the_remote_traceback(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def validate(lr: float) -> None:
        raise ValueError(f"learning rate {lr} is out of range")

    with pytest.raises(ValueError, match="learning rate 5 is out of range") as info:
        validate(5)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert notes.startswith("Remote traceback:")
    assert "in validate" in notes and "out of range" in notes


def test_unpicklable_return_value_is_reported_as_such(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def make_lock():
        return threading.Lock()

    job = make_lock.run_async()
    with pytest.raises(payload.RunnerError, match="could not be pickled"):
        job.result(timeout=120)
    assert job.status() is JobStatus.FAILED  # failed jobs are kept for their logs


# --------------------------------------------------------------------------- retries


def test_fails_twice_then_succeeds_with_retries_2(ns: str) -> None:
    counter = _counter_uri()

    @kinetic.run(namespace=ns, retries=2)
    def flaky(uri: str) -> str:
        from kinetic import storage as s

        try:
            n = int(s.read_bytes(uri))
        except s.NotFound:
            n = 0
        s.write_bytes(uri, str(n + 1).encode())
        if n < 2:
            raise RuntimeError(f"transient failure {n + 1}")
        return "third time lucky"

    job = flaky.run_async(counter)
    assert job.result(timeout=180, cleanup=False) == "third time lucky"
    status = job.describe()
    assert status["phase"] == "SUCCEEDED" and status["attempt"] == 3
    outcomes = [a["outcome"] for a in status["attempts"]]
    assert outcomes == ["failure", "failure", "success"]
    job.cleanup()
    storage.delete(counter)


def test_exhausted_retries_end_failed(ns: str) -> None:
    @kinetic.run(namespace=ns, retries=1)
    def always_fails() -> None:
        raise KeyError("missing-shard")

    job = always_fails.run_async()
    with pytest.raises(KeyError, match="missing-shard"):
        job.result(timeout=180)
    status = job.describe()
    assert status["phase"] == "FAILED" and status["attempt"] == 2
    assert [a["outcome"] for a in status["attempts"]] == ["failure", "failure"]


def test_pod_deleted_mid_run_is_retried_without_using_retries(ns: str, kube: Kube) -> None:
    marker = _counter_uri()

    @kinetic.run(namespace=ns, retries=0)
    def slow_once(uri: str) -> str:
        import time as t

        from kinetic import storage as s

        if not s.exists(uri):
            s.write_bytes(uri, b"started")
            t.sleep(600)  # the first pod is deleted while it sleeps
        return "second pod finished"

    job = slow_once.run_async(marker)
    wait_for(lambda: storage.exists(marker), timeout=120, what="the first attempt to start")
    pod = job.pod()
    kube.core.delete_namespaced_pod(pod, ns)
    assert job.result(timeout=180, cleanup=False) == "second pod finished"
    status = job.describe()
    # The deleted Pod is a disruption: attempt 2 runs without spending a retry.
    assert status["failures"] == 0 and status["disruptions"] >= 1
    assert [a["outcome"] for a in status["attempts"]] == ["disruption", "success"]
    assert status["attempts"][0]["pod"] == pod and job.pod() != pod
    job.cleanup()
    storage.delete(marker)


# --------------------------------------------------------------------------- waiting


def nap(seconds: float) -> str:
    """A job's function that rests a while: time for the test to act while it runs."""
    import time as t

    t.sleep(seconds)
    return "rested"


def test_result_timeout_leaves_the_job_running(ns: str) -> None:
    job = kinetic.run(namespace=ns)(nap).run_async(8)
    with pytest.raises(TimeoutError) as timed_out:
        job.result(timeout=1)
    # The kind in full and where the job is (it used to say "kineticjob …").
    said = str(timed_out.value)
    assert said.startswith(f"KineticJob {ns}/{job.job_id} did not finish in 1 s: it is "), said
    assert job.status() in (JobStatus.PENDING, JobStatus.RUNNING)
    seen: list[JobStatus] = []
    assert job.result(timeout=120, on_status_change=seen.append) == "rested"
    assert seen[-1] is JobStatus.SUCCEEDED


class BreaksOff(KubeClient):
    """The client's own calls, except that its first ``times`` watches are broken off
    after one event, as a reset connection does (the local API server does not drop a
    watch on demand)."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.breaks_left = times

    def _events(self, *args: Any) -> Iterator[tuple[str, dict]]:
        events = super()._events(*args)
        if self.breaks_left <= 0:
            yield from events
            return
        self.breaks_left -= 1
        with closing(events):
            for event in events:
                yield event
                raise ConnectionResetError("connection reset by peer (injected)")


def test_a_wait_whose_watch_breaks_off_goes_on_to_the_end(ns: str) -> None:
    job = kinetic.run(namespace=ns)(nap).run_async(3)
    kube = BreaksOff(times=1)  # the job's end is a change after the first read: one break is sure
    phases = [
        (obj.get("status") or {}).get("phase")
        for obj in itertools.takewhile(
            lambda obj: obj is not None and not _ended(obj),
            kube.watch_one(r.JOB_PLURAL, ns, job.job_id, timeout=120),
        )
    ]
    assert kube.breaks_left == 0, "the watch was never broken off: the test proves nothing"
    assert phases, "the wait saw nothing"
    assert job.status() is JobStatus.SUCCEEDED  # the watch followed it to its end
    assert job.result(timeout=30) == "rested"


class Compacted(KubeClient):
    """The client's own calls, except that every version up to its first read's counts as
    compacted away: a watch from one asks the real API server for version 1, which it
    refuses with 410 Gone as it does after a compaction (which the local cluster does not
    run on demand)."""

    def __init__(self) -> None:
        super().__init__()
        self.forgotten_up_to: int | None = None
        self.refused = 0

    def read_now(self, plural: str, namespace: str, name: str) -> tuple[dict | None, str]:
        obj, version = super().read_now(plural, namespace, name)
        if self.forgotten_up_to is None:
            self.forgotten_up_to = int(version)
        return obj, version

    def _events(self, plural: str, namespace: str, name: str, version: str, *rest: Any) -> Any:
        if int(version) <= (self.forgotten_up_to or 0):
            self.refused += 1
            version = "1"
        return super()._events(plural, namespace, name, version, *rest)


def test_a_wait_whose_version_was_compacted_away_reads_again_and_goes_on(ns: str) -> None:
    job = kinetic.run(namespace=ns)(nap).run_async(3)
    kube = Compacted()
    for obj in kube.watch_one(r.JOB_PLURAL, ns, job.job_id, timeout=120):
        if obj is None or _ended(obj):
            break
    assert kube.refused >= 1, "no watch was refused: the test proves nothing"
    assert job.status() is JobStatus.SUCCEEDED
    assert job.result(timeout=30) == "rested"


def _ended(obj: dict) -> bool:
    return r.Phase((obj.get("status") or {}).get("phase") or "PENDING").terminal


def test_cancel_ends_cancelled_and_stops_the_process(ns: str, kube: Kube) -> None:
    marker = _counter_uri()

    @kinetic.run(namespace=ns)
    def forever(uri: str) -> None:
        import time as t

        from kinetic import storage as s

        beat = 0
        while True:  # a heartbeat in storage: the witness that the process still runs
            beat += 1
            s.write_bytes(uri, str(beat).encode())
            t.sleep(0.5)

    job = forever.run_async(marker)
    wait_for(lambda: storage.exists(marker), timeout=120, what="the job to start")
    # Cancel what the cluster reports running: a Kubernetes 1.20 node that has not yet
    # reported the container running removes it on deletion without reporting its end.
    wait_for(lambda: job.status() is JobStatus.RUNNING, timeout=60, what="the job to run")
    ended: list[int] = []  # exit codes the Pod's container was seen to end with
    watching = threading.Event()

    def follow() -> None:
        for event in watch.Watch().stream(
            kube.core.list_namespaced_pod,
            ns,
            label_selector=f"kinetic.dev/job={job.job_id}",
            # Past every wait below (cancel 120 s, result 30 s, deletion 180 s): on a loaded
            # node a shorter watch can end before the container's end is reported.
            timeout_seconds=360,
        ):
            watching.set()
            for st in event["object"].status.container_statuses or []:
                if st.state.terminated is not None:
                    ended.append(st.state.terminated.exit_code)
            if event["type"] == "DELETED":
                return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert watching.wait(30), "no watch on the job's Pod"
    assert job.cancel(timeout=120) is JobStatus.CANCELLED
    with pytest.raises(kinetic.JobCancelled):
        job.result(timeout=30)
    wait_for(
        lambda: (
            not kube.core.list_namespaced_pod(
                ns, label_selector=f"kinetic.dev/job={job.job_id}"
            ).items
        ),
        timeout=180,  # a 1.20 node's status sync and kill retries: see test_cluster
        what="the cancelled job's pod to be deleted",
    )
    follower.join(timeout=30)
    # The runner (process 1 in its container) ended on the kubelet's SIGTERM, not on the
    # SIGKILL that follows the grace period.
    assert ended and ended[-1] == 143, ended
    last = storage.read_bytes(marker)
    time.sleep(3)  # six heartbeats, were the process still running
    assert storage.read_bytes(marker) == last, "the cancelled job's process still runs"
    storage.delete(marker)


# --------------------------------------------------------------------------- cleanup


def test_successful_result_cleans_up_by_default(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def one() -> int:
        return 1

    job = one.run_async()
    payload_uri = job.payload_uri
    assert payload_uri is not None and storage.exists(payload_uri)
    assert job.result(timeout=120) == 1
    assert job.status() is JobStatus.NOT_FOUND
    assert not storage.exists(payload_uri) and not storage.exists(job.result_uri)
    assert storage.list_prefix(job._home().prefix) == []
    # A second read says what happened and how to keep a result, not just "no longer exists".
    with pytest.raises(ResultDeleted) as again:
        job.result(timeout=10)
    said = str(again.value)
    assert "was cleaned up by an earlier result() on this handle" in said
    assert "pass cleanup=False to keep them" in said
    with pytest.raises(LookupError, match=r"result\(\) deletes the job and its result after"):
        kinetic.attach(job.job_id, namespace=ns)  # another process: nothing left to find


def test_cleanup_can_keep_artifacts_and_the_same_handle_still_reads_them(ns: str) -> None:
    """The deleting handle read the result's hash from the API server just before; a handle
    attached afterwards has nothing to check the kept bytes against and refuses them."""

    @kinetic.run(namespace=ns)
    def two() -> int:
        return 2

    job = two.run_async()
    job.wait(timeout=120)
    job.cleanup(k8s=True, gcs=False)
    assert job.status() is JobStatus.NOT_FOUND and storage.exists(job.result_uri)
    assert job.result(timeout=10, cleanup=False) == 2
    again = kinetic.attach(job.job_id, namespace=ns)  # from storage alone
    with pytest.raises(digest.Unverifiable, match="no longer exists") as refused:
        again.result(timeout=10)
    assert job.result_uri in str(refused.value)


# --------------------------------------------------------------------------- other processes


def test_attach_and_list_from_a_separate_process(ns: str, client_env: dict[str, str]) -> None:
    @kinetic.run(namespace=ns)
    def square(x: int) -> int:
        return x * x

    job = square.run_async(12)
    script = textwrap.dedent(
        f"""
        import json, kinetic
        job = kinetic.attach({job.job_id!r}, namespace={ns!r})
        listed = [h.job_id for h in kinetic.list_jobs(namespace={ns!r})]
        print(json.dumps({{"value": job.result(timeout=120), "listed": listed}}))
        """
    )
    seen = run_client(script, client_env, timeout=180)
    assert seen == {"value": 144, "listed": [job.job_id]}


def test_logs_and_tail_go_through_the_api_server(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def chatty(n: int) -> int:
        for i in range(n):
            print(f"line {i}", flush=True)
        return n

    job = chatty.run_async(30)
    job.wait(timeout=120)
    assert "line 0" in job.logs() and "line 29" in job.logs()
    tail = job.tail(3).splitlines()
    assert len(tail) == 3 and tail[-1].startswith("kinetic runner")  # the runner's last word
    assert "line 29" in job.tail(10)
    # One host, so one log: another rank is refused, naming why.
    with pytest.raises(ValueError) as refused:
        job.tail(10, rank=1)
    assert str(refused.value) == (
        f"rank=1: job {job.job_id} runs on 1 host, so its only rank is 0: "
        "leave rank out (or pass 0)"
    )
    job.cleanup()


def test_cli_lists_shows_and_collects(ns: str, client_env: dict[str, str]) -> None:
    @kinetic.run(namespace=ns)
    def greet(name: str) -> str:
        print(f"hello {name}")
        return f"hi {name}"

    job = greet.run_async("cli")
    job.wait(timeout=120)
    cli = [str(Path(sys.executable).with_name("kinetic")), "jobs"]

    def run(*args: str) -> str:
        out = subprocess.run(
            [*cli, *args], env=client_env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    listed = json.loads(run("list", "-n", ns, "-o", "json"))
    assert [row["job_id"] for row in listed] == [job.job_id]
    assert listed[0]["phase"] == "SUCCEEDED"
    status = json.loads(run("status", job.job_id, "-n", ns, "-o", "json"))
    assert status["attempts"][0]["outcome"] == "success", status
    assert status["attempts"][0]["pod"] == names.job_pod_name(job.job_id, 1)
    assert "hello cli" in run("logs", job.job_id, "-n", ns, "--tail", "20")
    kept = run("result", job.job_id, "-n", ns, "-o", "json", "--keep")
    assert json.loads(kept) == {"result": "hi cli"}
    run("cleanup", job.job_id, "-n", ns)
    assert job.status() is JobStatus.NOT_FOUND

    missing = subprocess.run(
        [*cli, "status", "no-such-job", "-n", ns], env=client_env, capture_output=True, text=True
    )
    assert missing.returncode == 1 and "No KineticJob 'no-such-job'" in missing.stderr


# --------------------------------------------------------------------------- bad input


def test_tampered_payload_fails_and_is_never_unpickled(ns: str) -> None:
    """A payload whose bytes do not match the spec's hash never reaches pickle.loads."""
    cfg = resolve(namespace=ns)
    job_id = new_job_id("tampered")
    artifacts = layout.new_upload_dir(cfg.storage_root, cfg.namespace, job_id)
    marker = _counter_uri()

    class Trap:
        def __reduce__(self):
            return (storage.write_bytes, (marker, b"unpickled!"))

    import cloudpickle

    evil = cloudpickle.dumps(Trap())
    storage.write_bytes(storage.join(artifacts, "payload.pkl"), evil)
    spec = r.KineticJobSpec(
        function=r.FunctionSpec(
            payload_uri=storage.join(artifacts, "payload.pkl"),
            sha256=payload.sha256(b"what the client signed"),
            name="tampered",
        )
    )
    job = submit_job(cfg, spec, job_id)
    with pytest.raises(payload.RunnerError, match="payload hash mismatch"):
        job.result(timeout=120)
    assert job.status() is JobStatus.FAILED
    assert "payload hash mismatch" in job.describe()["message"]
    assert not storage.exists(marker)


def test_bad_arguments_are_refused_before_anything_is_uploaded() -> None:
    with pytest.raises(Exception, match="accelerator"):
        kinetic.run(accelerator="quantum-9000")
    with pytest.raises(ValueError, match="retries"):
        kinetic.run(retries=-1)


def test_a_job_that_died_without_a_result_says_why(ns: str) -> None:
    cfg = resolve(namespace=ns)
    job_id = new_job_id("container")
    spec = r.KineticJobSpec(container=r.ContainerSpec(command=["sh", "-c", "echo dying; exit 7"]))
    job = submit_job(cfg, spec, job_id)
    with pytest.raises(JobFailed, match="FAILED"):
        job.result(timeout=120)
    assert job.describe()["attempts"][-1]["exitCode"] == 7
    assert kinetic_kube.get(r.JOB_PLURAL, ns, job_id) is not None  # kept for debugging
