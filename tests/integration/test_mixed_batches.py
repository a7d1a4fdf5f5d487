"""Heterogeneous batches (spec.jobs) on the local cluster: kubectl and `kinetic.batch([...])`.

Each input runs its own job spec: the Pod of input i carries jobs[i]'s image
(the process node runs every image as a local process, so the image is
checked on the Pod, as `kubectl get pod` shows it) and its environment
(checked in what each job returns). Fail-fast and cancel behave as for any
batch.
"""

from __future__ import annotations

import os
import time

import kinetic
import pytest
import yaml
from kinetic import kube as kinetic_kube
from kinetic import names
from kinetic.batches import BatchError
from kinetic.jobs import JobCancelled
from kube_helpers import REPO, Kube, wait_for

pytestmark = pytest.mark.integration

TIMEOUT = 240
TERM_LOG = '"${KINETIC_TERMINATION_LOG:-/dev/termination-log}"'
EXAMPLE = REPO / "examples" / "heterogeneous.yaml"


@pytest.fixture
def ns(client_env: dict[str, str], namespace: str) -> str:
    return namespace


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
    assert _images(ns, name) == {0: "busybox:1.36", 1: "alpine:3.20", 2: "debian:12-slim"}
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


def test_a_mixed_python_batch_returns_each_jobs_own_result(ns: str) -> None:
    stage = kinetic.run(namespace=ns, image="python:3.12-slim", env={"WHO": "first"})(_stage)
    batch = kinetic.batch(
        [
            stage.call("prepare"),
            stage.with_options(image="trainer:2", env={"WHO": "second"}).call("train"),
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
    assert _images(ns, batch.group_id) == {0: "python:3.12-slim", 1: "trainer:2", 2: "busybox:1.36"}
    assert batch.jobs[1].result(timeout=30, cleanup=False) == "train:second:1"
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
