"""KineticBatch end to end: run_async_map, BatchHandle, attach_batch, kubectl, the operator.

Every behaviour of the upstream batch page, run against the real operator
on a real cluster. Functions defined here are pickled by value, like a
user's. Side effects that must be counted (how many times an input ran)
go to storage objects, which both the test and the pods can reach.

There is no object per input: what a user sees of an input comes from the
batch status, its Pods and the manifest, and that is what is asserted here
(per-input handles have their own tests in test_client_inputs.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import kinetic
import pytest
from kinetic import storage
from kinetic.api.batches import BatchError, BatchHandle, read_manifest, read_shard
from kinetic.api.config import resolve
from kinetic.api.handle import ResultDeleted
from kinetic.api.jobs import JobCancelled, JobStatus
from kinetic.api.kube import KubeClient
from kinetic.model import digest, names
from kinetic.model import resources as r
from kube_helpers import Kube, kill_operator, run_client, wait_for, wait_operator_ready
from kubernetes import watch

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context

TIMEOUT = 240


def _scratch() -> str:
    """A storage folder both the test and the jobs' processes can reach."""
    return storage.join(resolve().storage_root, "test-counters", uuid.uuid4().hex)


def _batch(ns: str, group_id: str) -> dict:
    obj = kinetic_kube.get(r.BATCH_PLURAL, ns, group_id)
    assert obj is not None, f"batch {group_id} is gone"
    return obj


def _pods(ns: str, group_id: str) -> list:
    """The batch's attempt Pods that exist now (finished ones go after the operator's TTL)."""
    return kinetic_kube.list_pods(ns, f"{names.LABEL_BATCH}={group_id}")


def _final_header(batch: BatchHandle, phase: str):
    """The manifest header once the operator has written the batch's end into it."""
    return wait_for(
        lambda: (h := read_manifest(batch._home())) is not None and h.phase == phase and h,
        timeout=30,
        what=f"the manifest of {batch.group_id} to record {phase}",
    )


def _record_run(prefix: str, index: int) -> None:
    """In a pod: leave one storage object per execution of an input."""
    import os as o

    from kinetic import storage as s

    attempt = o.environ.get("KINETIC_ATTEMPT", "?")
    s.write_if_generation(f"{prefix}/{index}/{attempt}-{o.getpid()}-{o.urandom(4).hex()}", b"", 0)


def _runs(prefix: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for uri in storage.list_prefix(prefix + "/"):
        index = int(uri[len(prefix) + 1 :].split("/")[0])
        counts[index] = counts.get(index, 0) + 1
    return counts


def _final_shard(batch: BatchHandle, inputs: int):
    """Manifest shard 0 once it records an outcome for each of its first `inputs` inputs."""
    return wait_for(
        lambda: (
            (sh := read_shard(batch._home(), 0)) is not None
            and all(
                sh.inputs.get(str(i)) is not None
                and sh.inputs[str(i)].outcome in ("SUCCEEDED", "FAILED", "CANCELLED")
                for i in range(inputs)
            )
            and sh
        ),
        timeout=30,
        what=f"the manifest shard of {batch.group_id} to record {inputs} outcomes",
    )


# --------------------------------------------------------------------------- results


def test_results_in_input_order_and_in_completion_order(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def slow_square(i: int) -> int:
        import time as t

        t.sleep((3 - i) * 1.5)  # input 0 finishes last
        return i * i

    batch = slow_square.run_async_map(range(4), max_concurrent=None)
    assert batch.group_id.startswith("grp-") and len(batch.group_id) == 12
    by_completion = batch.results(ordered=False, cleanup=False, timeout=TIMEOUT)
    assert sorted(by_completion) == [0, 1, 4, 9]
    assert by_completion[-1] == 0 and by_completion != [0, 1, 4, 9]
    assert batch.results(timeout=TIMEOUT) == [0, 1, 4, 9]  # input order; then cleaned up
    assert storage.list_prefix(batch._home().prefix + "results/") == []
    assert batch.status_counts() == {"SUCCEEDED": 4}  # the batch still knows each outcome
    assert batch.failures() == []
    assert kinetic_kube.list_(r.JOB_PLURAL, ns) == []  # no object per input


def _fail_fast_step(i: int) -> int:
    import time as t

    if i == 0:
        raise ValueError("input 0 is bad")
    if i == 1:
        t.sleep(8)  # still running when input 0 fails
    return i


@pytest.mark.parametrize(
    ("fail_fast", "cancel_running"),
    [(False, False), (True, False), (True, True), (False, True)],
    ids=["continue", "fail-fast", "fail-fast-cancel-running", "cancel-running-alone"],
)
def test_fail_fast_rows(ns: str, fail_fast: bool, cancel_running: bool) -> None:
    """The four rows of the upstream table, with input 0 failing while input 1 runs."""
    step = kinetic.run(namespace=ns)(_fail_fast_step)
    batch = step.run_async_map(  # a Pod per input: the table as upstream states it
        range(5),
        max_concurrent=2,
        fail_fast=fail_fast,
        cancel_running_on_fail=cancel_running,
        chunk_size=1,
    )
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    err = info.value
    status = _batch(ns, batch.group_id)["status"]
    counts = status["counts"]
    assert err.group_id == batch.group_id
    assert [job.group_index for job in err.failures] == [0]
    cancelled = f", {counts['cancelled']} cancelled" if counts["cancelled"] else ""
    assert str(err) == f"Batch {batch.group_id}: 1 of 5 jobs failed{cancelled}"
    assert status["phase"] == "FAILED"
    if not fail_fast:  # everything continues
        assert err.partial_results == [None, 1, 2, 3, 4]
        assert counts["succeeded"] == 4 and counts["failed"] == 1 and status["launched"] == 5
    elif not cancel_running:  # no new launches; input 1 runs to the end
        assert err.partial_results == [None, 1, None, None, None]
        assert (counts["succeeded"], counts["failed"], counts["cancelled"]) == (1, 1, 3)
        assert status["launched"] == 2
    else:  # no new launches; input 1 is cancelled
        assert err.partial_results == [None] * 5
        assert (counts["succeeded"], counts["failed"], counts["cancelled"]) == (0, 1, 4)
        assert status["launched"] == 2
    mine = batch.results(return_exceptions=True, timeout=30)
    assert isinstance(mine[0], ValueError) and "input 0 is bad" in str(mine[0])


def test_return_exceptions_and_failures(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def invert(x: float) -> float:
        return 1 / x

    batch = invert.run_async_map([1, 0, 4])
    values = batch.results(return_exceptions=True, timeout=TIMEOUT)
    assert values[0] == 1.0 and values[2] == 0.25
    assert isinstance(values[1], ZeroDivisionError)
    assert [job.job_id for job in batch.failures()] == [f"{batch.group_id}-1"]
    assert batch.failures()[0].status() is JobStatus.FAILED  # kept for its logs


def test_an_input_that_fails_twice_then_succeeds_with_retries_2(ns: str) -> None:
    scratch = _scratch()

    @kinetic.run(namespace=ns)
    def flaky(i: int, prefix: str) -> str:
        from kinetic import storage as s

        tries = len(s.list_prefix(f"{prefix}/{i}/"))
        s.write_bytes(f"{prefix}/{i}/{tries}", b"")
        if i == 1 and tries < 2:
            raise RuntimeError(f"transient failure {tries + 1}")
        return f"{i} after {tries + 1}"

    batch = flaky.run_async_map([[0, scratch], [1, scratch]], retries=2)
    assert batch.results(timeout=TIMEOUT, cleanup=False) == ["0 after 1", "1 after 3"]
    outcomes = [a["outcome"] for a in batch.jobs[1].attempts()]
    assert outcomes == ["failure", "failure", "success"]
    assert [a["outcome"] for a in batch.jobs[0].attempts()] == ["success"]
    assert [a["pod"] for a in batch.jobs[1].attempts()] == [
        names.input_pod_name(batch.group_id, 1, a) for a in (1, 2, 3)
    ]
    _final_header(batch, "SUCCEEDED")
    shard = _final_shard(batch, 2)
    assert [a.outcome for a in shard.inputs["1"].attempts] == ["failure", "failure", "success"]
    assert len(shard.inputs["0"].attempts) == 1
    batch.cleanup()
    storage.delete_prefix(scratch + "/")


def test_a_pod_deleted_by_hand_is_rerun_without_using_retries(ns: str, kube: Kube) -> None:
    scratch = _scratch()

    @kinetic.run(namespace=ns)
    def slow_once(i: int, prefix: str) -> str:
        import time as t

        from kinetic import storage as s

        if i == 1 and not s.exists(f"{prefix}/started"):
            s.write_bytes(f"{prefix}/started", b"")
            t.sleep(600)  # its Pod is deleted while it sleeps
        return f"done {i}"

    batch = slow_once.run_async_map([[0, scratch], [1, scratch]], retries=0)
    wait_for(lambda: storage.exists(f"{scratch}/started"), timeout=120, what="input 1 to start")
    first = names.input_pod_name(batch.group_id, 1, 1)
    kube.core.delete_namespaced_pod(first, ns)
    assert batch.results(timeout=TIMEOUT, cleanup=False) == ["done 0", "done 1"]
    attempts = wait_for(  # the deleted Pod's attempt is in the manifest (written debounced)
        lambda: len(a := batch.jobs[1].attempts()) == 2 and a,
        timeout=30,
        what="the manifest to record both attempts of input 1",
    )
    assert [a["outcome"] for a in attempts] == ["disruption", "success"]
    assert attempts[0]["pod"] == first
    assert batch.status()["counts"]["failed"] == 0
    storage.delete_prefix(scratch + "/")


# --------------------------------------------------------------------------- concurrency


class ActivePods:
    """Watch a namespace's batch Pods and remember the most that were unfinished at once."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.phase: dict[str, str] = {}
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ActivePods:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=70)

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            for event in w.stream(
                self.kube.core.list_namespaced_pod,
                self.ns,
                label_selector=names.LABEL_BATCH,
                timeout_seconds=2,
            ):
                name = event["object"].metadata.name
                if event["type"] == "DELETED":
                    self.phase.pop(name, None)
                else:
                    self.phase[name] = event["object"].status.phase or "Pending"
                active = sum(1 for p in self.phase.values() if p not in ("Succeeded", "Failed"))
                self.most = max(self.most, active)


def test_max_concurrent_is_never_exceeded(ns: str, kube: Kube) -> None:
    @kinetic.run(namespace=ns)
    def nap(i: int) -> int:
        import time as t

        t.sleep(1.5)
        return i

    with ActivePods(kube, ns) as sampler:
        batch = nap.run_async_map(range(8), max_concurrent=3)
        assert batch.results(timeout=TIMEOUT) == list(range(8))
    assert sampler.most == 3


def test_max_concurrent_none_launches_everything_at_once(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def nap(i: int) -> int:
        import time as t

        t.sleep(6)
        return i

    batch = nap.run_async_map(range(5), max_concurrent=None)
    status = wait_for(
        lambda: (s := _batch(ns, batch.group_id).get("status", {})).get("launched") == 5 and s,
        timeout=30,
        what="all five inputs to be launched",
    )
    assert status["counts"]["succeeded"] == 0  # launched before any finished
    # The launch is recorded before the Pods are created: they follow within moments.
    wait_for(lambda: len(_pods(ns, batch.group_id)) == 5, timeout=5, what="five Pods")
    assert batch.results(timeout=TIMEOUT) == list(range(5))


def test_bad_max_concurrent_is_a_value_error(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def ident(x: int) -> int:
        return x

    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_concurrent"):
            ident.run_async_map([1], max_concurrent=bad)


# --------------------------------------------------------------------------- waiting, cancelling


def test_a_timeout_does_not_cancel(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def nap(i: int) -> int:
        import time as t

        t.sleep(5)
        return i

    batch = nap.run_async_map(range(2))
    with pytest.raises(TimeoutError) as timed_out:
        batch.results(timeout=1)
    # The kind in full (it used to be cut to "kineticbatche").
    said = str(timed_out.value)
    assert said.startswith(f"KineticBatch {ns}/{batch.group_id} did not finish in 1 s: "), said
    assert _batch(ns, batch.group_id)["spec"]["cancel"] is False
    assert batch.results(timeout=TIMEOUT) == [0, 1]


def test_cancel_stops_launching_and_cancels_running_inputs(ns: str, kube: Kube) -> None:
    scratch = _scratch()

    @kinetic.run(namespace=ns)
    def forever(i: int, prefix: str) -> None:
        import time as t

        from kinetic import storage as s

        beat = 0
        while True:  # a heartbeat in storage: the witness that the input still runs
            beat += 1
            s.write_bytes(f"{prefix}/{i}", str(beat).encode())
            t.sleep(0.5)

    batch = forever.run_async_map(  # a Pod per input (units: test_sized_units.py)
        [[i, scratch] for i in range(4)], max_concurrent=2, chunk_size=1
    )
    wait_for(lambda: len(storage.list_prefix(scratch + "/")) == 2, timeout=120, what="2 to start")
    batch.cancel()
    batch.wait(timeout=120)
    status = _batch(ns, batch.group_id)["status"]
    assert status["phase"] == "CANCELLED" and status["counts"]["cancelled"] == 4
    assert status["launched"] == 2
    values = batch.results(return_exceptions=True, timeout=30)
    assert all(isinstance(v, JobCancelled) for v in values)
    wait_for(lambda: not _pods(ns, batch.group_id), timeout=60, what="the inputs' Pods to go")
    beats = {u: storage.read_bytes(u) for u in storage.list_prefix(scratch + "/")}
    time.sleep(3)  # six heartbeats each, were they still running
    assert {u: storage.read_bytes(u) for u in beats} == beats, "a cancelled input still runs"
    assert len(beats) == 2  # the two never launched never ran
    storage.delete_prefix(scratch + "/")


def test_results_cleanup_keeps_the_manifest_then_full_cleanup(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def double(x: int) -> int:
        return 2 * x

    batch = double.run_async_map([1, 2, 3], name="doubles", tags={"team": "ml"})
    assert batch.results(timeout=TIMEOUT) == [2, 4, 6]
    assert storage.list_prefix(batch._home().prefix + "results/") == []
    uri = batch._home().manifest_uri
    header = _final_header(batch, "SUCCEEDED")
    assert header.group_id == batch.group_id and header.total == 3
    assert header.name == "doubles" and header.tags == {"team": "ml"}
    assert header.function_name == "double" and header.succeeded_indexes == "0-2"
    shard = _final_shard(batch, 3)
    assert {k: v.outcome for k, v in shard.inputs.items()} == {
        "0": "SUCCEEDED",
        "1": "SUCCEEDED",
        "2": "SUCCEEDED",
    }
    again = kinetic.attach_batch(batch.group_id, namespace=ns)
    assert again.name == "doubles" and again.total == 3
    # Its results were read (and deleted) once: reading them again says so, and how to
    # keep them, rather than "0 of 3 jobs failed" with nothing failed.
    with pytest.raises(ResultDeleted) as read_twice:
        again.results(timeout=60)
    said = str(read_twice.value)
    assert said.startswith(f"Batch {batch.group_id}: inputs 0-2 (3 of 3) succeeded, but their")
    assert "Pass cleanup=False to keep results" in said

    batch.cleanup()
    assert kinetic_kube.get(r.BATCH_PLURAL, ns, batch.group_id) is None
    assert not storage.exists(uri)
    assert storage.list_prefix(batch._home().prefix) == []
    with pytest.raises(LookupError, match=batch.group_id):
        kinetic.attach_batch(batch.group_id, namespace=ns)


def test_attach_batch_after_the_resource_is_deleted_reads_the_manifest(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def triple(x: int) -> int:
        return 3 * x

    batch = triple.run_async_map([1, 2, 3, {"bad": threading.Lock()}], name="triples")
    batch.wait(timeout=TIMEOUT)
    _final_header(batch, "FAILED")
    batch.cleanup(k8s=True, gcs=False)  # resources gone, results and manifest kept
    assert kinetic_kube.get(r.BATCH_PLURAL, ns, batch.group_id) is None

    again = kinetic.attach_batch(batch.group_id, namespace=ns)
    assert (again.name, again.total) == ("triples", 4)
    assert [j is not None for j in again.jobs] == [True, True, True, False]
    assert list(again.submission_failures) == [3]
    assert again.statuses() == [(i, JobStatus.SUCCEEDED) for i in range(3)]
    assert again.jobs[1].status() is JobStatus.SUCCEEDED
    # With the batch gone nothing vouches for its stored results any more: they are not
    # unpickled, and each says why (outcomes and attempts still come from the manifest).
    values = again.results(timeout=60, cleanup=False, return_exceptions=True)
    assert [type(v) for v in values[:3]] == [digest.Unverifiable] * 3
    assert "no longer exists" in str(values[0]) and type(values[3]) is TypeError
    again.cleanup()
    with pytest.raises(LookupError, match="no manifest"):
        kinetic.attach_batch(batch.group_id, namespace=ns)


def test_results_of_a_deleted_batch_say_that_nothing_vouches_for_them(ns: str) -> None:
    """After `kubectl delete kb` no input failed, yet no value can be trusted: results()
    raises that reason for the batch (it used to be "BatchError: 0 of 2 jobs failed")."""

    @kinetic.run(namespace=ns)
    def halve(x: int) -> float:
        return x / 2

    batch = halve.run_async_map([2, 4])
    batch.wait(timeout=TIMEOUT)
    _final_header(batch, "SUCCEEDED")
    batch.cleanup(k8s=True, gcs=False)  # what kubectl delete does: results stay in storage

    again = kinetic.attach_batch(batch.group_id, namespace=ns)
    with pytest.raises(digest.Unverifiable) as refused:
        again.results(timeout=60, cleanup=False)
    said = str(refused.value)
    assert said.startswith(
        f"refusing to return the results of inputs 0-1 (2 of 2) of batch {batch.group_id} at "
        f"{batch._home().prefix}: batch {batch.group_id} no longer exists"
    )
    assert "Read results before deleting a batch" in said
    again.cleanup()


# --------------------------------------------------------------------------- other processes


def test_attach_batch_from_another_process_mid_batch(ns: str, client_env: dict) -> None:
    @kinetic.run(namespace=ns)
    def nap(x: object) -> str:
        import time as t

        t.sleep(5)
        return f"ok {x}"

    batch = nap.run_async_map([1, threading.Lock(), 3, 4], max_concurrent=1)
    assert list(batch.submission_failures) == [1]
    assert "cannot pickle" in str(batch.submission_failures[1])
    script = textwrap.dedent(
        f"""
        import json, kinetic
        b = kinetic.attach_batch({batch.group_id!r}, namespace={ns!r})
        slots = [None if j is None else j.group_index for j in b.jobs]
        values = b.results(return_exceptions=True, timeout={TIMEOUT})
        print(json.dumps({{
            "total": b.total, "first_slots": slots,
            "submission": sorted(b.submission_failures),
            "values": [v if isinstance(v, str) else type(v).__name__ for v in values],
            "slots": [None if j is None else j.group_index for j in b.jobs],
        }}))
        """
    )
    wait_for(lambda: _batch(ns, batch.group_id).get("status", {}).get("launched"), timeout=60)
    seen = run_client(script, client_env, timeout=TIMEOUT + 60)
    assert seen["total"] == 4 and seen["submission"] == [1]
    assert len(seen["first_slots"]) == 4 and seen["first_slots"][1] is None
    assert seen["first_slots"][3] is None  # not launched yet (one at a time, 5 s each)
    assert seen["values"] == ["ok 1", "TypeError", "ok 3", "ok 4"]
    assert seen["slots"] == [0, None, 2, 3]


def test_submitter_killed_right_after_submission(ns: str, client_env: dict) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, kinetic

        @kinetic.run(namespace={ns!r})
        def cube(x):
            return x ** 3

        batch = cube.run_async_map(range(5), max_concurrent=2)
        print(batch.group_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=client_env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    group_id = out.stdout.strip().splitlines()[-1]
    batch = kinetic.attach_batch(group_id, namespace=ns)
    assert batch.results(timeout=TIMEOUT) == [0, 1, 8, 27, 64]


def test_operator_killed_mid_batch_loses_nothing_and_runs_nothing_twice(
    ns: str, kube: Kube
) -> None:
    scratch = _scratch()

    @kinetic.run(namespace=ns)
    def counted(i: int, prefix: str) -> int:
        import time as t

        from kinetic import storage as s

        _record_run(prefix, i)
        t.sleep(1.0 + (i % 3) * 0.5)
        if i == 5 and len(s.list_prefix(f"{prefix}/{i}/")) < 2:
            raise RuntimeError("input 5 fails its first attempt")
        return i

    total = 14
    batch = counted.run_async_map([[i, scratch] for i in range(total)], max_concurrent=4, retries=1)
    try:
        for _ in range(3):
            wait_for(
                lambda: len(storage.list_prefix(scratch + "/")) > 0, timeout=120, what="progress"
            )
            time.sleep(2.0)
            kill_operator(kube)  # SIGKILL: no clean-up, no goodbye
            time.sleep(1.5)  # children finish while nobody is watching
            wait_operator_ready(kube)
    finally:
        wait_operator_ready(kube)
    assert batch.results(timeout=TIMEOUT) == list(range(total))
    runs = _runs(scratch)
    assert runs == {i: 2 if i == 5 else 1 for i in range(total)}
    storage.delete_prefix(scratch + "/")


# --------------------------------------------------------------------------- kubectl


def _container_batch(name: str, inputs: dict, command: list[str], **spec: object) -> dict:
    return {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": name},
        "spec": {"template": {"container": {"command": command}}, "inputs": inputs, **spec},
    }


def test_kubectl_grid_batch_runs_and_kubectl_wait_works(ns: str, kube: Kube) -> None:
    body = _container_batch(
        "sweep",
        {"grid": {"lr": [0.1, 0.01], "layers": [2, 4]}},
        [
            "sh",
            "-c",
            'printf "%s" "lr=$KINETIC_PARAM_LR layers=$(KINETIC_PARAM_LAYERS)" '
            "> /dev/termination-log",
        ],
        maxConcurrent=2,
    )
    kube.apply(ns, body)
    kube.kubectl(
        "wait", "-n", ns, "--for=condition=Complete", "kb/sweep", "--timeout=180s", timeout=200
    )
    table = kube.kubectl("get", "kb", "-n", ns).stdout
    assert "SUCCEEDED" in table and "4/4" in table
    expected = [  # keys sorted (layers, lr): the last one varies fastest
        "lr=0.1 layers=2",
        "lr=0.01 layers=2",
        "lr=0.1 layers=4",
        "lr=0.01 layers=4",
    ]
    handle = kinetic.attach_batch("sweep", namespace=ns)  # containers: termination messages
    assert handle.results(timeout=30) == expected
    one = kinetic.attach("sweep-2", namespace=ns)  # an input of a batch named by hand
    assert (one.group_id, one.group_index, one.result(timeout=30)) == ("sweep", 2, expected[2])
    described = kube.kubectl("describe", "kb", "sweep", "-n", ns).stdout
    assert "Succeeded" in described


def _webhook_on(kube: Kube) -> bool:
    """The operator's admission webhook is configured (KINETIC_WEBHOOK_ENABLED, the default)."""
    got = kube.kubectl(
        "get", "validatingwebhookconfiguration", "kinetic.dev", "-o", "json", check=False
    )
    return got.returncode == 0 and bool(json.loads(got.stdout).get("webhooks"))


def test_changing_inputs_of_a_running_batch_is_refused(ns: str, kube: Kube) -> None:
    body = _container_batch(
        "steady", {"items": [1, 2, 3]}, ["sh", "-c", "sleep 2"], maxConcurrent=1
    )
    kube.apply(ns, body)
    wait_for(lambda: _batch(ns, "steady").get("status", {}).get("launched"), timeout=60)
    accepted = _batch(ns, "steady")["spec"]
    change = json.dumps({"spec": {"inputs": {"items": [1, 2, 3, 4, 5]}}})
    if _webhook_on(kube):
        # Refused at admission: the user's kubectl fails and says why.
        patch = ["patch", "kb", "steady", "-n", ns, "--type", "merge"]
        refused = kube.kubectl(*patch, "-p", change, check=False)
        assert refused.returncode != 0
        assert "spec.inputs cannot change on an existing batch" in refused.stderr
        assert "create a new batch instead" in refused.stderr
        edited = {**body, "spec": {**body["spec"], "inputs": {"items": [1, 2]}}}
        applied = subprocess.run(
            ["kubectl", "--kubeconfig", kube.kubeconfig, "apply", "-n", ns, "-f", "-"],
            input=json.dumps(edited),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert applied.returncode != 0 and "spec.inputs cannot change" in applied.stderr
        assert _batch(ns, "steady")["spec"] == accepted  # nothing stored
        kube.kubectl(*patch, "-p", json.dumps({"spec": {"maxConcurrent": 3}}))  # allowed
        assert _batch(ns, "steady")["spec"]["maxConcurrent"] == 3
    else:
        # KINETIC_WEBHOOK_ENABLED=false: the operator refuses after the fact.
        kinetic_kube.patch_spec(r.BATCH_PLURAL, ns, "steady", json.loads(change)["spec"])
        kinetic_kube.patch_spec(r.BATCH_PLURAL, ns, "steady", {"maxConcurrent": 3})  # allowed

        def refused_by_operator() -> str | None:
            conds = _batch(ns, "steady").get("status", {}).get("conditions", [])
            spec = next((c for c in conds if c["type"] == "SpecAccepted"), None)
            return spec and spec["status"] == "False" and spec["message"]

        message = wait_for(refused_by_operator, timeout=60, what="the change to be refused")
        assert "spec.inputs cannot change on an existing batch" in message
        events = kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout
        assert "SpecChangeRefused" in events
    kube.kubectl(
        "wait", "-n", ns, "--for=condition=Complete", "kb/steady", "--timeout=120s", timeout=140
    )
    status = _batch(ns, "steady")["status"]
    assert status["total"] == 3 and status["counts"]["succeeded"] == 3  # the accepted inputs


def test_invalid_batch_fails_with_a_readable_message(ns: str, kube: Kube) -> None:
    body = _container_batch("clash", {"grid": {"a-b": [1], "a_b": [2]}}, ["true"])
    kube.apply(ns, body)
    kube.kubectl(
        "wait", "-n", ns, "--for=condition=Failed", "kb/clash", "--timeout=60s", timeout=80
    )
    status = _batch(ns, "clash")["status"]
    assert "would both be exported as KINETIC_PARAM_A_B" in status["message"]
    assert _pods(ns, "clash") == []


def test_a_1000_input_batch_keeps_a_small_status(ns: str, kube: Kube, record_property) -> None:
    """1,000 inputs, each recorded on its own, in 50 Pods of 20 (a real node starts a Pod
    in about a second; the status must not grow with the inputs either way)."""
    total = 1000

    @kinetic.run(namespace=ns)
    def double(x: int) -> int:
        return 2 * x

    batch = double.run_async_map(range(total), max_concurrent=10, chunk_size=20)
    biggest = 0
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = _batch(ns, batch.group_id).get("status", {})
        biggest = max(biggest, len(json.dumps(status)))
        if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(2)
    assert status.get("phase") == "SUCCEEDED", status
    size = len(json.dumps(status))
    record_property("status_bytes_final", size)
    record_property("status_bytes_max", biggest)
    print(f"\n1000-input batch: status {size} bytes at the end, at most {biggest} bytes")
    assert status["succeededIndexes"] == f"0-{total - 1}"
    assert biggest < 4096
    assert batch.results(timeout=60) == [2 * x for x in range(total)]


# --------------------------------------------------------------------------- input modes


def test_input_modes(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def show(*args: object, **kwargs: object) -> list:
        return [list(args), kwargs]

    auto = show.run_async_map(
        [{"lr": 0.1, "wd": 1}, [1, 2], 3, {"not-an-id": 1}, {"class": 2}, "text"],
        max_concurrent=None,
    )
    single = show.run_async_map([[1, 2], {"a": 1}], input_mode="single")
    args = show.run_async_map([(1, 2)], input_mode="args")
    kwargs = show.run_async_map([{"a": 1}], input_mode="kwargs")
    assert auto.results(timeout=TIMEOUT) == [
        [[], {"lr": 0.1, "wd": 1}],
        [[1, 2], {}],
        [[3], {}],
        [[{"not-an-id": 1}], {}],
        [[{"class": 2}], {}],
        [["text"], {}],
    ]
    assert single.results(timeout=TIMEOUT) == [[[[1, 2]], {}], [[{"a": 1}], {}]]
    assert args.results(timeout=TIMEOUT) == [[[1, 2], {}]]
    assert kwargs.results(timeout=TIMEOUT) == [[[], {"a": 1}]]
    # A wrong-typed item fails its own slot with its TypeError; the others run.
    mixed = show.run_async_map([{"a": 1}, [1]], input_mode="kwargs")
    values = mixed.results(timeout=TIMEOUT, return_exceptions=True)
    assert values[0] == [[], {"a": 1}]
    assert type(values[1]) is TypeError and "input_mode='kwargs' needs a dict" in str(values[1])
    with pytest.raises(BatchError, match="1 of 1 jobs failed") as info:
        show.run_async_map([3], input_mode="args").results(timeout=TIMEOUT)
    assert "input_mode='args' needs a list or tuple" in str(info.value.submission_failures[0])


def test_submission_failures_count_as_failures(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def ident(x: object) -> object:
        return x

    batch = ident.run_async_map([1, threading.Lock(), 3])
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert info.value.partial_results == [1, None, 3]
    assert type(info.value.submission_failures[1]) is TypeError  # the pickling error itself
    assert info.value.failures == [] and "1 of 3 jobs failed" in str(info.value)
    assert batch.jobs[1] is None
