"""The reference API as documented, on the local cluster (issue 11, parts 3 and 4).

Each test is one behaviour the reference describes: per-slot submission
failures keeping their exception, runner failures as RuntimeError, list
order, the CLI's cleanup defaults and flags, streamed logs, accelerator
names, BatchError's count of cancelled inputs, and capture_env_vars and
output_dir for a single job and for every input of a batch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import kinetic
import pytest
from kinetic import storage
from kinetic.api.accelerators import (
    AUTOSCALER_STATUS,
    AcceleratorNotChecked,
    AcceleratorUnavailable,
)
from kinetic.api.batches import BatchError
from kinetic.api.config import resolve
from kinetic.api.jobs import JobStatus
from kinetic.api.kube import KubeClient
from kinetic.api.submission import SubmissionError
from kinetic.model import digest, layout, names
from kinetic.model import resources as r
from kinetic.model.data import DataError
from kube_helpers import Kube, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context

TIMEOUT = 240
CLI = str(Path(sys.executable).with_name("kinetic"))


def _scratch() -> str:
    """A storage folder both the test and the jobs' processes can reach."""
    return storage.join(resolve().storage_root, "test-counters", uuid.uuid4().hex)


def _own_scratch(ns: str) -> str:
    """A storage folder under the namespace's own prefix (where an outputDir must lie)."""
    root = resolve(namespace=ns).storage_root
    return f"{layout.namespace_prefix(root, ns)}chosen-outputs/{uuid.uuid4().hex}"


def _uploads(ns: str) -> list[str]:
    cfg = resolve(namespace=ns)
    return storage.list_prefix(f"{layout.namespace_prefix(cfg.storage_root, ns)}uploads/")


def _cli(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if ok:
        assert out.returncode == 0, out.stderr
    return out


# --------------------------------------------------------------------------- submission failures


def test_a_wrong_typed_item_fails_its_own_slot_with_its_own_exception(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def add(a: int, b: int = 0) -> int:
        return a + b

    batch = add.run_async_map([{"a": 1}, [2], {"a": 3, "b": 4}], input_mode="kwargs")
    values = batch.results(timeout=TIMEOUT, return_exceptions=True)
    assert values[0] == 1 and values[2] == 7
    assert type(values[1]) is TypeError
    assert str(values[1]).startswith("input_mode='kwargs' needs a dict")
    assert batch.jobs[1] is None

    # Another process reading the batch sees the same type and message.
    again = kinetic.attach_batch(batch.group_id, namespace=ns)
    rebuilt = again.submission_failures[1]
    assert type(rebuilt) is TypeError and str(rebuilt) == str(values[1])
    with pytest.raises(TypeError, match="needs a dict"):
        again.child(1).result(timeout=TIMEOUT)


def test_an_unpicklable_input_keeps_the_pickling_error(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def ident(x: object) -> object:
        return x

    batch = ident.run_async_map([1, threading.Lock()])
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    error = info.value.submission_failures[1]
    assert type(error) is TypeError and "cannot pickle" in str(error)
    assert info.value.partial_results == [1, None]


def test_every_kind_of_input_failure_keeps_its_own_slot_and_the_rest_run(
    ns: str, tmp_path: Path
) -> None:
    """A local file or folder gone since `Data` checked it, a wrong-typed item and an
    unpicklable value: each fails its own input, nothing of it is uploaded, the rest run."""

    @kinetic.run(namespace=ns)
    def read(data: str | None = None, n: int = 0) -> object:
        return Path(data).read_text() if data else n

    kept, gone_file, gone_dir = tmp_path / "kept.txt", tmp_path / "gone.txt", tmp_path / "gone"
    kept.write_text("alpha")
    gone_file.write_text("beta")
    gone_dir.mkdir()
    items = [
        {"data": kinetic.Data(str(kept))},
        {"data": kinetic.Data(str(gone_file))},
        [2],
        {"n": threading.Lock()},
        {"data": kinetic.Data(str(gone_dir))},
        {"n": 5},
    ]
    gone_file.unlink()  # after Data() checked that they exist
    gone_dir.rmdir()
    batch = read.run_async_map(items, input_mode="kwargs")
    values = batch.results(timeout=TIMEOUT, return_exceptions=True)
    assert (values[0], values[5]) == ("alpha", 5)
    failed = {i: type(v) for i, v in enumerate(values) if isinstance(v, Exception)}
    assert failed == {1: DataError, 2: TypeError, 3: TypeError, 4: DataError}
    assert "gone.txt" in str(values[1]) and "gone" in str(values[4])
    assert [batch.jobs[i] for i in failed] == [None] * 4
    # Nothing of a failed input was uploaded; another process reads the same failures.
    inputs = [u for u in storage.list_prefix(_prefix(ns)) if u.endswith(".pkl") and "/inputs/" in u]
    assert sorted(u.rsplit("/", 1)[1] for u in inputs if batch.group_id in u) == ["0.pkl", "5.pkl"]
    # Another process reads the same failures: built-in types as themselves, the client's
    # own DataError as a SubmissionError naming it (nothing is imported from a spec's name).
    again = kinetic.attach_batch(batch.group_id, namespace=ns).submission_failures
    assert {i: type(e) for i, e in again.items()} == {
        1: SubmissionError,
        2: TypeError,
        3: TypeError,
        4: SubmissionError,
    }
    assert "kinetic.model.data.DataError: " in str(again[1]) and "gone.txt" in str(again[1])


def test_a_problem_of_the_whole_call_raises_from_it_and_creates_nothing(
    ns: str, tmp_path: Path
) -> None:
    """volumes= concern every input: their data gone is the call's error, nothing created."""

    @kinetic.run(namespace=ns)
    def size(n: int = 0) -> int:
        return n

    folder = tmp_path / "shared"
    folder.mkdir()
    mounted = size.with_options(volumes={"/data": kinetic.Data(str(folder))})
    folder.rmdir()
    with pytest.raises(DataError) as raised:
        mounted.run_async_map([{"n": 1}], input_mode="kwargs")
    assert "shared" in str(raised.value)
    assert (
        kinetic_kube.custom.list_namespaced_custom_object(r.GROUP, r.VERSION, ns, r.BATCH_PLURAL)[
            "items"
        ]
        == []
    )
    assert storage.list_prefix(_prefix(ns)) == []


def _prefix(ns: str) -> str:
    return layout.namespace_prefix(resolve(namespace=ns).storage_root, ns)


# --------------------------------------------------------------------------- runner failures


def test_a_runner_phase_failure_is_a_runtime_error(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def make_lock() -> object:
        return threading.Lock()

    with pytest.raises(RuntimeError, match="runner failed in phase pickle-result") as info:
        make_lock.run_async().result(timeout=TIMEOUT)
    assert isinstance(info.value, kinetic.RunnerError)


# --------------------------------------------------------------------------- listing


def test_list_jobs_is_newest_first(ns: str, client_env: dict[str, str]) -> None:
    @kinetic.run(namespace=ns)
    def noop(i: int) -> int:
        return i

    submitted = []
    for i in range(3):
        submitted.append(noop.run_async(i).job_id)
        time.sleep(1.1)  # creation timestamps have a resolution of one second
    newest_first = submitted[::-1]
    assert [h.job_id for h in kinetic.list_jobs(namespace=ns)] == newest_first
    listed = json.loads(_cli(client_env, "jobs", "list", "-n", ns, "-o", "json").stdout)
    assert [row["job_id"] for row in listed] == newest_first


# --------------------------------------------------------------------------- the CLI's cleanup


def test_cli_job_result_cleans_up_unless_kept(ns: str, client_env: dict[str, str]) -> None:
    @kinetic.run(namespace=ns)
    def double(x: int) -> int:
        return 2 * x

    kept, cleaned = double.run_async(1), double.run_async(2)
    out = _cli(client_env, "jobs", "result", kept.job_id, "-n", ns, "--keep", "-o", "json")
    assert json.loads(out.stdout) == {"result": 2}
    assert kept.status() is JobStatus.SUCCEEDED and storage.exists(kept.result_location())

    result_uri = cleaned.result_location()
    out = _cli(client_env, "jobs", "result", cleaned.job_id, "-n", ns, "-o", "json")
    assert json.loads(out.stdout) == {"result": 4}
    assert cleaned.status() is JobStatus.NOT_FOUND and not storage.exists(result_uri)


@pytest.mark.parametrize("flag", ["--no-gcs", "--no-storage"])
def test_cli_cleanup_no_gcs_keeps_the_artifacts(
    ns: str, client_env: dict[str, str], flag: str
) -> None:
    @kinetic.run(namespace=ns)
    def one() -> int:
        return 1

    job = one.run_async()
    job.wait(timeout=TIMEOUT)
    result_uri = job.result_location()
    _cli(client_env, "jobs", "cleanup", job.job_id, "-n", ns, flag)
    assert job.status() is JobStatus.NOT_FOUND and storage.exists(result_uri)
    # Kept, but nothing vouches for it once the job is gone: refused, then --gcs deletes it.
    with pytest.raises(digest.Unverifiable, match=re.escape(str(result_uri))):
        kinetic.attach(job.job_id, namespace=ns).result(timeout=30, cleanup=False)
    assert storage.exists(result_uri)
    _cli(client_env, "jobs", "cleanup", job.job_id, "-n", ns, "--gcs")
    assert not storage.exists(result_uri)


def test_cli_batch_results_clean_up_unless_kept(ns: str, client_env: dict[str, str]) -> None:
    @kinetic.run(namespace=ns)
    def square(x: int) -> int:
        return x * x

    kept, cleaned = square.run_async_map([1, 2]), square.run_async_map([3, 4])
    for batch, extra, expect_kept in ((kept, ["--keep"], True), (cleaned, [], False)):
        out = _cli(client_env, "batches", "results", batch.group_id, "-n", ns, "-o", "json", *extra)
        assert [row["result"] for row in json.loads(out.stdout)] == [
            x * x for x in ((1, 2) if batch is kept else (3, 4))
        ]
        stored = [storage.exists(batch.child(i).result_uri) for i in range(2)]
        assert stored == [expect_kept, expect_kept]


# --------------------------------------------------------------------------- streamed logs


def test_result_streams_every_attempts_log_while_waiting(ns: str, client_env: dict) -> None:
    """The log reaches the caller while the job still waits for us, attempt after attempt."""
    go = _scratch() + "/go"
    script = textwrap.dedent(
        f"""
        import json, os, time, kinetic
        from kinetic import storage

        @kinetic.run(namespace={ns!r}, retries=1)
        def chatty():
            attempt = os.environ["KINETIC_ATTEMPT"]
            print(f"hello from attempt {{attempt}}", flush=True)
            if attempt == "1":
                raise RuntimeError("first attempt fails")
            print("waiting for go", flush=True)
            while not storage.exists({go!r}):
                time.sleep(0.2)
            return 42

        value = chatty.run_async().result(timeout=200, stream_logs=True)
        print(json.dumps({{"value": value}}), flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=client_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "waiting for go" in line:
                storage.write_bytes(go, b"")  # only now can the job end
                break
        rest, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    seen = "".join(lines)
    assert "hello from attempt 1" in seen and "first attempt fails" in seen
    assert seen.index("hello from attempt 1") < seen.index("hello from attempt 2")
    assert json.loads(rest.strip().splitlines()[-1]) == {"value": 42}


def test_streaming_stops_when_result_times_out(ns: str, client_env: dict) -> None:
    """A TimeoutError leaves the job running, but the caller's terminal goes quiet."""
    script = textwrap.dedent(
        f"""
        import json, time, kinetic

        @kinetic.run(namespace={ns!r})
        def ticker():
            for i in range(600):
                print(f"tick {{i}}", flush=True)
                time.sleep(0.2)

        job = ticker.run_async()
        try:
            job.result(timeout=8, stream_logs=True)
        except TimeoutError:
            print("TIMED-OUT", flush=True)
        time.sleep(3)
        print(json.dumps({{"job": job.job_id, "status": job.status().value}}), flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=client_env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    before, _, after = out.stdout.partition("TIMED-OUT")
    assert "tick 0" in before
    assert "tick " not in after  # (the job id, "ticker-...", is printed after)
    seen = json.loads(after.strip().splitlines()[-1])
    assert seen["status"] == "RUNNING"
    kinetic.attach(seen["job"], namespace=ns).cancel()


# --------------------------------------------------------------------------- accelerators


@pytest.fixture
def autoscaled(kube: Kube) -> Iterator[None]:
    """This cluster as one with a cluster autoscaler: the status ConfigMap GKE's (and the
    upstream) autoscaler publishes. A node may then come, so the client submits work no node
    offers yet, saying once that it could not check."""
    status = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=AUTOSCALER_STATUS[1], namespace=AUTOSCALER_STATUS[0]),
        data={"status": "Cluster-autoscaler status: Health: Healthy"},
    )
    kube.core.create_namespaced_config_map(AUTOSCALER_STATUS[0], status)
    try:
        yield
    finally:
        kube.core.delete_namespaced_config_map(AUTOSCALER_STATUS[1], AUTOSCALER_STATUS[0])


@pytest.mark.parametrize(
    "typed, canonical", [("v5litepod-4", "tpu-v5e-4"), ("a100x4", "gpu-a100x4")]
)
def test_reference_accelerator_names_reach_the_spec_in_the_catalogs_spelling(
    ns: str, autoscaled: None, typed: str, canonical: str
) -> None:
    @kinetic.run(namespace=ns, accelerator=typed)
    def on_device() -> int:
        return 1

    with pytest.warns(AcceleratorNotChecked, match="the cluster's autoscaler may add one"):
        job = on_device.run_async()
    try:
        obj = kinetic_kube.get(r.JOB_PLURAL, ns, job.job_id)
        assert obj is not None and obj["spec"]["accelerator"] == canonical
        # The operator resolved it (no node offers it here, so it waits unscheduled).
        wait_for(
            lambda: (
                job.describe().get("phase") == "PENDING"
                and "cannot be scheduled yet" in (job.describe().get("message") or "")
            ),
            timeout=60,
            what=f"the scheduler's word on an attempt of {job.job_id}",
        )
        # A wait that times out says why the job waits: the scheduler's reason.
        with pytest.raises(TimeoutError) as timed_out:
            job.result(timeout=1)
        said = str(timed_out.value)
        assert said.startswith(
            f"KineticJob {ns}/{job.job_id} did not finish in 1 s: it is PENDING (Attempt 1 "
            "cannot be scheduled yet: 0/1 nodes are available: "
        ), said
    finally:
        job.cleanup()


def test_a_batch_that_waits_for_a_node_says_the_schedulers_reason(
    ns: str, autoscaled: None
) -> None:
    @kinetic.run(namespace=ns, accelerator="l4")
    def on_gpu(x: int) -> int:
        return x

    with pytest.warns(AcceleratorNotChecked):
        batch = on_gpu.run_async_map([1])
    try:
        pod = wait_for(
            lambda: next(
                (
                    p.metadata.name
                    for p in kinetic_kube.list_pods(ns, f"{names.LABEL_BATCH}={batch.group_id}")
                    if any(c.type == "PodScheduled" and c.status == "False"
                           for c in p.status.conditions or [])
                ),
                None,
            ),
            timeout=60,
            what="the scheduler to give up on the input's Pod for now",
        )  # fmt: skip
        with pytest.raises(TimeoutError) as timed_out:
            batch.results(timeout=1)
        said = str(timed_out.value)
        assert said.startswith(f"KineticBatch {ns}/{batch.group_id} did not finish in 1 s: it is")
        assert f"; input 0 (Pod {pod}) cannot be scheduled: 0/1 nodes are available: " in said
    finally:
        batch.cleanup()


def test_an_accelerator_no_node_offers_is_refused_before_anything_is_uploaded(ns: str) -> None:
    """This cluster has CPU nodes only and no autoscaler: a GPU is refused at submission,
    however it is submitted, and nothing is uploaded or created; cpu still runs."""
    prefix = layout.namespace_prefix(resolve(namespace=ns).storage_root, ns)
    before = storage.list_prefix(prefix)

    @kinetic.run(namespace=ns, accelerator="l4")
    def double(x: int) -> int:
        return 2 * x

    submissions = {
        "run_async": lambda: double.run_async(1),
        "run_async_map": lambda: double.run_async_map([1, 2]),
        "batch": lambda: kinetic.batch([double.call(1)]),
        "container": lambda: kinetic.batch(
            [kinetic.container(["true"], image="busybox", accelerator="gpu-l4")], namespace=ns
        ),
    }
    for how, submit in submissions.items():
        with pytest.raises(AcceleratorUnavailable) as refused:
            submit()
        text = str(refused.value)
        named = "'gpu-l4'" if how == "container" else "'l4' (gpu-l4)"
        assert text.startswith(
            f"accelerator {named}: no node of this cluster can run it, and the cluster "
            "cannot add nodes (it has no cluster autoscaler and no Karpenter)"
        ), how
        assert (
            "Each Pod needs 1 nvidia.com/gpu on a node labelled "
            "cloud.google.com/gke-accelerator=nvidia-l4; none of the cluster's 1 node has "
            "nvidia.com/gpu. Nothing was uploaded or created. Use an accelerator these nodes "
            "offer (cpu)"
        ) in text, how
        assert isinstance(refused.value, kinetic.UnknownAccelerator)
    assert storage.list_prefix(prefix) == before
    assert kinetic_kube.list_(r.JOB_PLURAL, ns) == []
    assert kinetic_kube.list_(r.BATCH_PLURAL, ns) == []
    assert double.with_options(accelerator="cpu")(21) == 42


def test_an_unknown_accelerator_is_refused_before_anything_is_uploaded(ns: str) -> None:
    before = _uploads(ns)

    @kinetic.run(namespace=ns, accelerator="v5litepod-3")
    def f(x: int) -> int:
        return x

    for submit in (lambda: f.run_async(1), lambda: f.run_async_map([1, 2])):
        with pytest.raises(kinetic.UnknownAccelerator) as info:
            submit()
        text = str(info.value)
        assert "unknown accelerator 'v5litepod-3'; did you mean 'tpu-v5e" in text
        assert "known accelerators: cpu" in text
    with pytest.raises(ValueError, match="unknown accelerator 'quantum-9000'"):
        kinetic.run(accelerator="quantum-9000")
    assert _uploads(ns) == before
    assert kinetic_kube.list_(r.JOB_PLURAL, ns) == []
    assert kinetic_kube.list_(r.BATCH_PLURAL, ns) == []


# --------------------------------------------------------------------------- BatchError


def test_batch_error_counts_the_cancelled_inputs(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def fail_first(i: int) -> int:
        if i == 0:
            raise ValueError("input 0 fails")
        return i

    batch = fail_first.run_async_map([0, 1, 2], max_concurrent=1, fail_fast=True)
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert str(info.value) == f"Batch {batch.group_id}: 1 of 3 jobs failed, 2 cancelled"
    assert info.value.cancelled == [1, 2]


# --------------------------------------------------------------------------- env and outputs


def _report(tag: object) -> dict:
    """In a pod: what a user's function sees of capture_env_vars and output_dir."""
    import os as o

    from kinetic import storage as s

    out = o.environ["KINETIC_OUTPUT_DIR"]
    s.write_bytes(s.join(out, "done.txt"), str(tag).encode())
    return {
        "tag": tag,
        "token": o.environ.get("REFAPI_TOKEN"),
        "extra": o.environ.get("REFAPI_EXTRA_ONE"),
        "out": out,
    }


def test_capture_env_vars_and_output_dir_for_a_single_job(ns: str) -> None:
    os.environ.update(REFAPI_TOKEN="t-1", REFAPI_EXTRA_ONE="x-1")
    out_dir = _own_scratch(ns) + "/single"
    explicit = kinetic.run(
        namespace=ns, capture_env_vars=["REFAPI_TOKEN", "REFAPI_EXTRA_*"], output_dir=out_dir
    )(_report)
    default = kinetic.run(namespace=ns, capture_env_vars=["REFAPI_TOKEN"])(_report)
    try:
        seen = explicit("a")
        assert seen == {"tag": "a", "token": "t-1", "extra": "x-1", "out": out_dir}
        job = default.run_async("b")
        seen = job.result(timeout=TIMEOUT)  # cleans up the job's artifacts
    finally:
        for var in ("REFAPI_TOKEN", "REFAPI_EXTRA_ONE"):
            os.environ.pop(var, None)
    root = resolve(namespace=ns).storage_root
    assert seen["token"] == "t-1" and seen["extra"] is None
    assert seen["out"].startswith(f"{layout.namespace_prefix(root, ns)}outputs/{job.job_id}/")
    # Outputs outlive the job's cleanup.
    assert storage.read_bytes(storage.join(out_dir, "done.txt")) == b"a"
    assert storage.read_bytes(storage.join(seen["out"], "done.txt")) == b"b"


@pytest.mark.parametrize("chunk_size", [1, 2])
def test_capture_env_vars_and_output_dir_for_every_input_of_a_batch(
    ns: str, chunk_size: int
) -> None:
    os.environ.update(REFAPI_TOKEN="t-2", REFAPI_EXTRA_ONE="x-2")
    out_dir = _own_scratch(ns) + "/batch"
    explicit = kinetic.run(
        namespace=ns, capture_env_vars=["REFAPI_TOKEN", "REFAPI_EXTRA_*"], output_dir=out_dir
    )(_report)
    default = kinetic.run(namespace=ns, capture_env_vars=["REFAPI_*"])(_report)
    try:
        given = explicit.run_async_map(range(3), chunk_size=chunk_size)
        defaulted = default.run_async_map(range(3), chunk_size=chunk_size)
    finally:
        for var in ("REFAPI_TOKEN", "REFAPI_EXTRA_ONE"):
            os.environ.pop(var, None)
    assert given.results(timeout=TIMEOUT) == [
        {"tag": i, "token": "t-2", "extra": "x-2", "out": f"{out_dir}/{i}"} for i in range(3)
    ]
    seen = defaulted.results(timeout=TIMEOUT)
    assert [(s["tag"], s["token"], s["extra"]) for s in seen] == [
        (i, "t-2", "x-2") for i in range(3)
    ]
    outs = [s["out"] for s in seen]
    assert len(set(outs)) == 3 and all(o.endswith(f"/{i}") for i, o in enumerate(outs))
    for i in range(3):  # every input's output is kept after results(cleanup=True)
        assert storage.read_bytes(storage.join(f"{out_dir}/{i}", "done.txt")) == str(i).encode()
        assert storage.read_bytes(storage.join(outs[i], "done.txt")) == str(i).encode()
