"""Heterogeneous batches (spec.jobs) on the local cluster: kubectl and `kinetic.batch([...])`.

Each input runs its own job spec: the Pod of input i carries jobs[i]'s image
(the process node runs every image as a local process, so the image is
checked on the Pod, as `kubectl get pod` shows it) and its environment
(checked in what each job returns). Fail-fast and cancel behave as for any
batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import kinetic
import pytest
import yaml
from kinetic.api.batches import BatchError, SubmissionError, read_manifest
from kinetic.api.jobs import JobCancelled, JobStatus
from kinetic.api.kube import KubeClient
from kinetic.model import digest, names
from kube_helpers import REPO, Kube, wait_for

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context

TIMEOUT = 240
TERM_LOG = "/dev/termination-log"
# Images users build FROM the runner (the local cluster serves one as kinetic-runner:custom-*),
# named two ways: each job of a batch runs the image it names.
CUSTOM = f"kinetic-runner:custom-py{sys.version_info.major}.{sys.version_info.minor}"
CUSTOM_LONG = f"docker.io/library/{CUSTOM}"
EXAMPLE = REPO / "examples" / "heterogeneous.yaml"


def _images(ns: str, group_id: str) -> dict[int, str]:
    """Index -> image of the batch's attempt Pods (first attempt), as the API server has them."""
    pods = kinetic_kube.list_pods(ns, f"{names.LABEL_BATCH}={group_id}")
    return {
        int(p.metadata.labels[names.LABEL_INDEX]): p.spec.containers[0].image
        for p in pods
        if p.metadata.labels.get(names.LABEL_ATTEMPT) == "1"
    }


def _stage(stage: str) -> str:
    """In a pod: this job's stage and environment, as its result."""
    print(f"running stage {stage}", flush=True)
    return f"{stage}:{os.environ.get('WHO')}:{os.environ.get('KINETIC_INDEX')}"


def _boom(_: int) -> None:
    raise ValueError("job 0 is bad")


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def test_the_example_yaml_runs_each_job_with_its_own_image_and_env(ns: str, kube: Kube) -> None:
    applied = kube.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
    assert "created" in applied.stdout
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    kube.kubectl(
        "wait", "-n", ns, "--for=condition=Complete", f"kb/{name}", "--timeout=180s", timeout=200
    )
    assert "3/3" in kube.kubectl("get", "kb", name, "-n", ns).stdout
    assert _images(ns, name) == {0: "busybox:1.36", 1: "python:3.12-slim", 2: "debian:12-slim"}
    handle = kinetic.attach_batch(name, namespace=ns)
    assert handle.results(timeout=30) == [
        "stage=prepare index=0",
        "stage=train index=1 lr=0.01",
        "stage=report index=2",
    ]
    one = kinetic.attach(f"{name}-1", namespace=ns)
    assert one.result(timeout=30) == "stage=train index=1 lr=0.01"
    status = kube.kubectl("get", "kb", name, "-n", ns, "-o", "jsonpath={.status.succeededIndexes}")
    assert status.stdout == "0-2"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    kinetic_cli = str(Path(sys.executable).with_name("kinetic"))
    return subprocess.run(
        [kinetic_cli, *args], env=env, capture_output=True, text=True, timeout=180
    )


def test_a_mixed_python_batch_returns_each_jobs_own_result(ns: str, client_env: dict) -> None:
    stage = kinetic.run(namespace=ns, image=CUSTOM, env={"WHO": "first"})(_stage)
    batch = kinetic.batch(
        [
            stage.call("prepare"),
            stage.with_options(image=CUSTOM_LONG, env={"WHO": "second"}).call("train"),
            kinetic.container(
                ["sh", "-c", f'printf "report:%s:%s" "$WHO" "$KINETIC_INDEX" > {TERM_LOG}'],
                image="busybox:1.36",
                env={"WHO": "third"},
            ),
        ],
        max_concurrent=2,
        name="mixed",
    )
    assert batch.total == 3
    assert batch.results(timeout=TIMEOUT, cleanup=False) == [
        "prepare:first:0",
        "train:second:1",
        "report:third:2",
    ]
    assert _images(ns, batch.group_id) == {0: CUSTOM, 1: CUSTOM_LONG, 2: "busybox:1.36"}
    assert batch.jobs[1].result(timeout=30, cleanup=False) == "train:second:1"
    # Per-input handles from the CLI: a function input and a container input.
    out = _cli(client_env, "jobs", "status", f"{batch.group_id}-1", "-n", ns, "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["phase"] == "SUCCEEDED"
    out = _cli(client_env, "jobs", "logs", f"{batch.group_id}-1", "-n", ns, "--tail", "20")
    assert out.returncode == 0 and "running stage train" in out.stdout, out.stderr
    out = _cli(client_env, "jobs", "result", f"{batch.group_id}-2", "-n", ns, "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"result": "report:third:2"}
    out = _cli(client_env, "batches", "status", batch.group_id, "-n", ns)
    assert out.returncode == 0 and "SUCCEEDED" in out.stdout, out.stderr
    again = kinetic.attach_batch(batch.group_id, namespace=ns)  # another process's view
    assert again.results(timeout=30) == ["prepare:first:0", "train:second:1", "report:third:2"]


def test_fail_fast_cancels_the_rest_of_a_mixed_batch(ns: str) -> None:
    boom = kinetic.run(namespace=ns)(_boom)
    sleep = kinetic.run(namespace=ns)(_sleep)
    batch = kinetic.batch(
        [
            boom.call(0),
            sleep.call(60),
            kinetic.container(["sh", "-c", "sleep 60"]),
            sleep.call(1),
        ],
        max_concurrent=3,
        fail_fast=True,
        cancel_running_on_fail=True,
    )
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert [job.group_index for job in info.value.failures] == [0]
    status = kinetic_kube.get("kineticbatches", ns, batch.group_id)["status"]
    assert status["phase"] == "FAILED"
    counts = status["counts"]
    assert (counts["succeeded"], counts["failed"], counts["cancelled"]) == (0, 1, 3)
    assert status["launched"] == 3  # input 3 was never launched
    mine = batch.results(return_exceptions=True, timeout=30)
    assert isinstance(mine[0], ValueError) and "job 0 is bad" in str(mine[0])
    assert all(isinstance(v, JobCancelled) for v in mine[1:])


def test_cancel_stops_a_mixed_batch(ns: str) -> None:
    sleep = kinetic.run(namespace=ns)(_sleep)
    batch = kinetic.batch(
        [sleep.call(120), kinetic.container(["sh", "-c", "sleep 120"]), sleep.call(120)],
        max_concurrent=2,
    )
    wait_for(
        lambda: len(_images(ns, batch.group_id)) == 2, timeout=60, what="two Pods to be created"
    )
    batch.cancel()
    status = wait_for(
        lambda: (
            (
                s := (kinetic_kube.get("kineticbatches", ns, batch.group_id) or {}).get(
                    "status", {}
                )
            ).get("phase")
            == "CANCELLED"
            and s
        ),
        timeout=90,
        what="the batch to end CANCELLED",
    )
    assert status["counts"]["cancelled"] == 3
    assert status["launched"] == 2


def _kb(name: str, spec: dict) -> dict:
    return {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_both_forms_at_once_are_refused_on_apply(ns: str, kube: Kube) -> None:
    body = _kb(
        "both",
        {
            "template": {"container": {"command": ["true"]}},
            "inputs": {"items": [1]},
            "jobs": [{"container": {"command": ["true"]}}],
        },
    )
    for dry in ([], ["--dry-run=server"]):
        out = subprocess.run(
            ["kubectl", "--kubeconfig", kube.kubeconfig, "apply", "-n", ns, *dry, "-f", "-"],
            input=json.dumps(body),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0
        assert "spec" in out.stderr and "oneOf" in out.stderr, out.stderr
    assert kinetic_kube.get("kineticbatches", ns, "both") is None


def test_a_job_that_sets_cancel_fails_the_batch_with_a_readable_message(
    ns: str, kube: Kube
) -> None:
    """What the schema allows but cannot run: FAILED, InvalidSpec, a message naming the field."""
    body = _kb(
        "stopped",
        {
            "jobs": [
                {"container": {"command": ["true"]}},
                {"container": {"command": ["true"]}, "cancel": True},
            ]
        },
    )
    kube.apply(ns, body)
    kube.kubectl(
        "wait", "-n", ns, "--for=condition=Failed", "kb/stopped", "--timeout=60s", timeout=80
    )
    status = kinetic_kube.get("kineticbatches", ns, "stopped")["status"]
    assert "spec.jobs[1].cancel must be false; add 1 to spec.cancelIndexes" in status["message"]
    assert _images(ns, "stopped") == {}


def test_a_deleted_mixed_batch_is_still_attachable_from_its_manifest(ns: str) -> None:
    """Its outcomes, yes; its results no: nothing vouches for stored ones once it is gone."""
    stage = kinetic.run(namespace=ns, env={"WHO": "fn"})(_stage)
    batch = kinetic.batch(
        [stage.call("a"), kinetic.container(["sh", "-c", f'printf "box" > {TERM_LOG}'])]
    )
    batch.wait(timeout=TIMEOUT)
    wait_for(
        lambda: (h := read_manifest(batch._home())) is not None and h.phase == "SUCCEEDED",
        timeout=30,
        what="the manifest to record the end",
    )
    kinetic_kube.delete("kineticbatches", ns, batch.group_id)
    wait_for(
        lambda: kinetic_kube.get("kineticbatches", ns, batch.group_id) is None,
        timeout=30,
        what="the batch to be deleted",
    )
    gone = kinetic.attach_batch(batch.group_id, namespace=ns)
    assert [st for _, st in gone.statuses()] == [JobStatus.SUCCEEDED] * 2
    # Nothing vouches for its stored results any more: neither is taken from storage.
    values = gone.results(timeout=30, return_exceptions=True)
    assert [type(v) for v in values] == [digest.Unverifiable] * 2, values


def test_a_call_that_cannot_be_pickled_is_a_submission_failure_of_its_index(ns: str) -> None:
    stage = kinetic.run(namespace=ns, env={"WHO": "w"})(_stage)
    batch = kinetic.batch(
        [stage.call("a"), stage.call(threading.Lock()), kinetic.container(["true"], retries=0)]
    )
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert info.value.partial_results[0] == "a:w:0"
    assert isinstance(info.value.submission_failures[1], SubmissionError)
    assert "could not pickle the call of _stage" in str(info.value.submission_failures[1])
    assert info.value.failures == [] and "1 of 3 jobs failed" in str(info.value)
    assert batch.jobs[1] is None
    assert 1 not in _images(ns, batch.group_id)  # never launched


def test_each_job_keeps_its_own_retries(ns: str) -> None:
    """jobs[0] sets retries 1 (two attempts); jobs[1] has the batch's retries, 0 (one)."""
    batch = kinetic.batch(
        [kinetic.container(["sh", "-c", "exit 3"], retries=1), kinetic.container(["false"])],
        max_concurrent=None,
    )
    with pytest.raises(BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert sorted(job.group_index for job in info.value.failures) == [0, 1]
    first, second = batch.jobs
    assert first is not None and second is not None
    assert [a["outcome"] for a in first.attempts()] == ["failure", "failure"]
    assert [a["outcome"] for a in second.attempts()] == ["failure"]
