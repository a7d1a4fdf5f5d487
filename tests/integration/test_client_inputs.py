"""One input of a batch, from the client, on the real operator: there is no object per input.

`batch.jobs[i]`, `kinetic.attach("<grp>-<i>")` and `kinetic jobs ... <grp>-<i>`
answer from the batch status, the input's Pods and the manifest. These tests
check what a user sees while the Pods exist and after the operator deleted
them (after its Pod TTL, `KINETIC_POD_TTL_SECONDS`), cancelling one input of a
running batch, attaching from another process, and `chunk_size=`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.inputs import InputHandle
from kinetic.api.jobs import JobCancelled, JobStatus
from kinetic.api.kube import KubeClient
from kinetic.model import names
from kube_helpers import Kube, run_client, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context

TIMEOUT = 240
SETTINGS = ("kinetic-system", "kinetic-operator-settings")  # the chart's operator settings
DEFAULT_POD_TTL = 120


def _pod_ttl(kube: Kube) -> float:
    """The operator's Pod TTL as installed (the chart's settings), else its default."""
    try:
        data = kube.core.read_namespaced_config_map(SETTINGS[1], SETTINGS[0]).data or {}
    except client.ApiException:
        data = {}
    return float(data.get("KINETIC_POD_TTL_SECONDS") or DEFAULT_POD_TTL)


def _wait_pods_gone(kube: Kube, ns: str, selector: str) -> None:
    """Until the operator has deleted every Pod matching `selector` (after its TTL)."""
    ttl = _pod_ttl(kube)
    wait_for(
        lambda: not kinetic_kube.list_pods(ns, selector),
        timeout=ttl + 90,
        interval=1.0,
        what=f"the operator to delete the finished Pods ({selector}; Pod TTL {ttl:.0f}s)",
    )


def _scratch() -> str:
    return storage.join(resolve().storage_root, "test-counters", uuid.uuid4().hex)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    kinetic_cli = str(Path(sys.executable).with_name("kinetic"))
    return subprocess.run(
        [kinetic_cli, "jobs", *args], env=env, capture_output=True, text=True, timeout=180
    )


# --------------------------------------------------------------------------- after the Pods


def test_input_handles_after_their_pods_are_gone(ns: str, kube: Kube) -> None:
    @kinetic.run(namespace=ns)
    def shout(word: str) -> str:
        for n in range(3):
            print(f"{word} line {n}", flush=True)
        if word == "bad":
            raise ValueError("bad word")
        return word.upper()

    batch = shout.run_async_map(["hello", "bad", "world"], max_concurrent=None)
    batch.wait(timeout=TIMEOUT)
    hello, bad, world = batch.jobs
    assert isinstance(hello, InputHandle) and hello.job_id == f"{batch.group_id}-0"
    assert "hello line 2" in hello.logs()  # from the live Pod (or already the archive)

    _wait_pods_gone(kube, ns, f"{names.LABEL_BATCH}={batch.group_id}")
    assert [s for _, s in batch.statuses()] == [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.SUCCEEDED,
    ]
    assert hello.status() is JobStatus.SUCCEEDED and bad.status() is JobStatus.FAILED
    assert "hello line 0" in hello.logs() and "hello line 2" in hello.logs()  # the archive
    assert "world line 2" in world.tail(20)
    assert "bad word" in bad.tail(50)  # the traceback the runner printed
    attempts = bad.attempts()
    assert [a["outcome"] for a in attempts] == ["failure"]
    assert attempts[0]["pod"] == names.input_pod_name(batch.group_id, 1, 1)
    with pytest.raises(ValueError, match="bad word"):
        bad.result(timeout=30)
    assert world.result(timeout=30, cleanup=False) == "WORLD"
    assert hello.result(timeout=30) == "HELLO"  # and its stored result is deleted
    assert not storage.exists(hello.result_uri)
    assert hello.status() is JobStatus.SUCCEEDED  # still recorded in the batch
    assert [j.group_index for j in batch.failures()] == [1]

    world.cleanup()  # its result goes; the manifest stays
    assert not storage.exists(world.result_uri)
    assert storage.exists(batch._home().manifest_uri)
    assert kinetic.attach_batch(batch.group_id, namespace=ns).total == 3


def test_container_input_results_outlive_their_pods(ns: str, kube: Kube) -> None:
    body = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {"name": "echoes"},
        "spec": {
            "template": {
                "container": {
                    "command": [
                        "sh",
                        "-c",
                        'echo "working on $KINETIC_INPUT"; '
                        'printf "got %s" "$KINETIC_INPUT" > /dev/termination-log',
                    ]
                }
            },
            "inputs": {"items": ["a", "b"]},
        },
    }
    kube.apply(ns, body)
    batch = kinetic.attach_batch("echoes", namespace=ns)
    batch.wait(timeout=TIMEOUT)
    first = kinetic.attach("echoes-1", namespace=ns)
    assert first.result(timeout=30) == "got b"  # from the Pod's termination message
    _wait_pods_gone(kube, ns, f"{names.LABEL_BATCH}=echoes")
    assert batch.results(timeout=30) == ["got a", "got b"]  # from the manifest
    assert first.result(timeout=30) == "got b"
    assert "working on b" in first.logs()
    assert first.describe()["result"] == "got b"


def test_a_jobs_log_outlives_its_pod(ns: str, kube: Kube) -> None:
    @kinetic.run(namespace=ns)
    def chatty() -> int:
        print("from the job", flush=True)
        return 1

    job = chatty.run_async()
    job.wait(timeout=TIMEOUT)
    _wait_pods_gone(kube, ns, f"{names.LABEL_JOB}={job.job_id}")
    assert "from the job" in job.logs()
    assert job.result(timeout=30) == 1


# --------------------------------------------------------------------------- cancelling one input


def test_cancel_one_input_of_a_running_batch(ns: str, kube: Kube, client_env: dict) -> None:
    scratch = _scratch()

    @kinetic.run(namespace=ns)
    def step(i: int, prefix: str) -> int:
        import time

        from kinetic import storage as s

        for beat in range(7200 if i in (1, 3) else 8):  # a heartbeat: the witness it runs
            s.write_bytes(f"{prefix}/{i}", str(beat).encode())
            time.sleep(0.5)
        return i

    batch = step.run_async_map([[i, scratch] for i in range(5)], max_concurrent=None)
    wait_for(lambda: batch.jobs[3] is not None, timeout=60, what="the inputs to be launched")
    one, three = batch.jobs[1], batch.jobs[3]
    wait_for(lambda: one.status() is JobStatus.RUNNING, timeout=120, what="input 1 to run")
    wait_for(lambda: storage.exists(f"{scratch}/1"), timeout=60, what="input 1's process")
    assert one.cancel(timeout=120) is JobStatus.CANCELLED

    # The CLI cancels another one the same way.
    out = _cli(client_env, "cancel", three.job_id, "-n", ns)
    assert out.returncode == 0 and "CANCELLED" in out.stdout, out.stderr

    values = batch.results(timeout=TIMEOUT, return_exceptions=True)
    assert [values[i] for i in (0, 2, 4)] == [0, 2, 4]
    assert isinstance(values[1], JobCancelled) and isinstance(values[3], JobCancelled)
    counts = batch.status()["counts"]
    assert (counts["succeeded"], counts["cancelled"], counts["failed"]) == (3, 2, 0)
    assert batch.status()["cancelledIndexes"] == "1,3"
    assert [s for _, s in batch.statuses()] == [
        JobStatus.SUCCEEDED,
        JobStatus.CANCELLED,
        JobStatus.SUCCEEDED,
        JobStatus.CANCELLED,
        JobStatus.SUCCEEDED,
    ]
    # The cancelled inputs' processes were stopped: their heartbeats stand still.
    wait_for(
        lambda: (
            not kube.core.list_namespaced_pod(
                ns,
                label_selector=f"{names.LABEL_BATCH}={batch.group_id},{names.LABEL_INDEX} in (1,3)",
            ).items
        ),
        timeout=60,
        what="the cancelled inputs' Pods to go",
    )
    beats = [storage.read_bytes(f"{scratch}/{i}") for i in (1, 3)]
    time.sleep(3)
    assert [storage.read_bytes(f"{scratch}/{i}") for i in (1, 3)] == beats
    storage.delete_prefix(scratch + "/")


# --------------------------------------------------------------------------- other processes


def test_attach_one_input_from_another_process(ns: str, client_env: dict) -> None:
    @kinetic.run(namespace=ns)
    def cube(x: int) -> int:
        print(f"cubing {x}", flush=True)
        return x**3

    batch = cube.run_async_map([2, 3, 4])
    script = textwrap.dedent(
        f"""
        import json, kinetic
        h = kinetic.attach("{batch.group_id}-1", namespace={ns!r})
        value = h.result(timeout={TIMEOUT}, cleanup=False)
        print(json.dumps({{
            "type": type(h).__name__, "job_id": h.job_id, "index": h.group_index,
            "value": value, "status": h.status().value, "log": h.logs(),
            "saved": h.to_dict(),
        }}))
        """
    )
    seen = run_client(script, client_env, timeout=TIMEOUT + 60)
    assert seen["type"] == "InputHandle" and seen["job_id"] == f"{batch.group_id}-1"
    assert (seen["index"], seen["value"], seen["status"]) == (1, 27, "SUCCEEDED")
    assert "cubing 3" in seen["log"]
    again = kinetic.JobHandle.from_dict(seen["saved"])  # a saved handle still works
    assert isinstance(again, InputHandle) and again.result(timeout=30) == 27

    with pytest.raises(LookupError, match="has 3 inputs"):
        kinetic.attach(f"{batch.group_id}-3", namespace=ns)


def test_cli_jobs_commands_for_one_input(ns: str, client_env: dict) -> None:
    @kinetic.run(namespace=ns)
    def greet(name: str) -> str:
        print(f"hello {name}", flush=True)
        return f"hi {name}"

    batch = greet.run_async_map(["ann", "bob"])
    batch.wait(timeout=TIMEOUT)
    input_id = f"{batch.group_id}-1"

    out = _cli(client_env, "status", input_id, "-n", ns, "-o", "json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["phase"] == "SUCCEEDED" and status["index"] == 1
    assert status["attempts"][-1]["outcome"] == "success"
    assert status["attempts"][-1]["pod"] == names.input_pod_name(batch.group_id, 1, 1)

    out = _cli(client_env, "logs", input_id, "-n", ns, "--tail", "20")
    assert out.returncode == 0 and "hello bob" in out.stdout, out.stderr
    out = _cli(client_env, "result", input_id, "-n", ns, "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"result": "hi bob"}

    # The inputs are listed among the jobs, with their batch and index (the reference's
    # group fields); --no-batches lists KineticJobs only, and there are none here.
    listed = _cli(client_env, "list", "-n", ns, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = [(r["job_id"], r["group"], r["index"], r["phase"]) for r in json.loads(listed.stdout)]
    assert rows == [(f"{batch.group_id}-{i}", batch.group_id, i, "SUCCEEDED") for i in (0, 1)]
    only_jobs = _cli(client_env, "list", "-n", ns, "--no-batches", "-o", "json")
    assert only_jobs.returncode == 0 and json.loads(only_jobs.stdout) == []
    missing = _cli(client_env, "status", f"{batch.group_id}-7", "-n", ns)
    assert missing.returncode == 1 and "there is no input 7" in missing.stderr


# --------------------------------------------------------------------------- chunk_size


def test_chunked_batch_results_equal_the_unchunked_ones(ns: str, kube: Kube) -> None:
    @kinetic.run(namespace=ns)
    def check(x: int) -> int:
        if x == 7:
            raise ValueError(f"{x} is unlucky")
        return x * x + 1

    inputs = list(range(23))
    plain = check.run_async_map(inputs, max_concurrent=8)
    chunked = check.run_async_map(inputs, max_concurrent=8, chunk_size=5)
    assert kinetic_kube.get("kineticbatches", ns, chunked.group_id)["spec"]["chunkSize"] == 5

    def shown(values: list) -> list:
        return [f"{type(v).__name__}: {v}" if isinstance(v, Exception) else v for v in values]

    want = shown(plain.results(timeout=TIMEOUT, return_exceptions=True, cleanup=False))
    got = shown(chunked.results(timeout=TIMEOUT, return_exceptions=True, cleanup=False))
    assert got == want
    assert want[7] == "ValueError: 7 is unlucky" and want[22] == 22 * 22 + 1
    assert chunked.statuses() == plain.statuses()
    assert [j.group_index for j in chunked.failures()] == [7]
    assert chunked.jobs[8].result(timeout=30, cleanup=False) == 65
    with pytest.raises(ValueError, match="7 is unlucky"):
        chunked.jobs[7].result(timeout=30)
    # One Pod per unit of 5 inputs: the attempt of input 8 ran in the unit starting at 5.
    assert chunked.jobs[8].attempts()[-1]["pod"] == names.input_pod_name(chunked.group_id, 5, 1)

    with pytest.raises(ValueError, match="chunk_size must be 'auto' or an integer from 1 to 256"):
        check.run_async_map(inputs, chunk_size=0)


def test_plain_scalar_inputs_travel_inline_and_others_are_pickled(ns: str) -> None:
    """range(N), floats, strings: the batch carries them as items (no upload per input,
    no download per Pod); a tuple among them keeps the whole batch pickled, exactly."""

    @kinetic.run(namespace=ns)
    def kind(x: object) -> str:
        return f"{type(x).__name__}:{x!r}"

    plain = kind.run_async_map([3, 0.5, "a b", None, True], max_concurrent=5)
    spec = kinetic_kube.get("kineticbatches", ns, plain.group_id)["spec"]["inputs"]
    assert spec == {"items": [3, 0.5, "a b", None, True]}
    assert plain.results(timeout=TIMEOUT) == [
        "int:3",
        "float:0.5",
        "str:'a b'",
        "NoneType:None",
        "bool:True",
    ]

    mixed = kind.run_async_map([3, (1, 2)], max_concurrent=2, input_mode="single")
    spec = kinetic_kube.get("kineticbatches", ns, mixed.group_id)["spec"]["inputs"]
    assert spec["count"] == 2 and "items" not in spec
    assert mixed.results(timeout=TIMEOUT) == ["int:3", "tuple:(1, 2)"]
