"""KineticBatch from kubectl, seen through its Pods: what a platform engineer would check.

One Pod per attempt of each input, and nothing else per input; Pods named
and labelled so `kubectl get pods -l kinetic.dev/batch=...` finds them;
finished Pods deleted after the operator's TTL with their logs archived;
one input cancelled on a running batch; Events only for transitions.
"""

from __future__ import annotations

import json
import time

import pytest
from kinetic import storage
from kinetic.api.inputs import read_manifest, read_shard
from kinetic.model import layout, names
from kinetic.model import resources as r
from kinetic_testing.cluster import apply_batch as apply
from kinetic_testing.cluster import read_batch as batch
from kinetic_testing.cluster import sh
from kinetic_testing.cluster import wait_batch_phase as wait_phase
from kube_helpers import Kube, local_env, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

TERM_LOG = "/dev/termination-log"


@pytest.fixture
def ns(operator: None, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in local_env().items():
        monkeypatch.setenv(key, value)
    return namespace


def pods(kube: Kube, ns: str, name: str) -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod(ns, label_selector=f"{names.LABEL_BATCH}={name}").items


def _home(kube: Kube, ns: str, name: str) -> layout.Home:
    """The batch's own storage prefix (namespace, name and UID)."""
    uid = client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
        r.GROUP, r.VERSION, ns, r.BATCH_PLURAL, name
    )["metadata"]["uid"]
    return layout.batch_home(local_env()["KINETIC_STORAGE_ROOT"], ns, name, uid)


def events(kube: Kube, ns: str, name: str) -> list[str]:
    items = kube.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [e.reason for e in items]


def test_each_input_is_one_pod_and_nothing_else(kube: Kube, ns: str) -> None:
    apply(
        kube,
        ns,
        "grid",
        {
            "template": sh(f'echo "input $KINETIC_INDEX"; printf "$KINETIC_PARAM_X" > {TERM_LOG}'),
            "inputs": {"grid": {"x": ["a", "b", "c"]}},
            "maxConcurrent": 2,
        },
    )
    status = wait_phase(kube, ns, "grid", "SUCCEEDED", "FAILED")
    assert status["phase"] == "SUCCEEDED", status
    assert (status["total"], status["succeededIndexes"]) == (3, "0-2")
    # No custom resource and no batch/v1 Job per input: only Pods.
    assert kube.kubectl("get", "kj", "-n", ns, "-o", "name").stdout.strip() == ""
    assert not kube.batch.list_namespaced_job(ns).items
    found = {p.metadata.name: p.metadata.labels for p in pods(kube, ns, "grid")}
    assert set(found) <= {names.input_pod_name("grid", i, 1) for i in range(3)}
    for pod_name, labels in found.items():
        index = labels[names.LABEL_INDEX]
        assert pod_name == names.input_pod_name("grid", int(index), 1)
        assert labels[names.LABEL_ATTEMPT] == "1"
    # Events say what happened to the batch, not to every input.
    wait_for(lambda: "Succeeded" in events(kube, ns, "grid"), what="the Succeeded event")
    assert sorted(events(kube, ns, "grid")) == ["Launching", "Succeeded"]
    # The manifest has each input's attempt and its result.
    home = _home(kube, ns, "grid")
    header = wait_for(
        lambda: (h := read_manifest(home)) and h.phase == "SUCCEEDED" and h,
        timeout=30,
        what="the final manifest",
    )
    assert header.succeeded_indexes == "0-2" and header.shards == [0]
    shard = read_shard(home, 0)
    assert shard is not None
    assert {k: (v.outcome, v.result) for k, v in shard.inputs.items()} == {
        "0": ("SUCCEEDED", "a"),
        "1": ("SUCCEEDED", "b"),
        "2": ("SUCCEEDED", "c"),
    }
    assert [a.pod for a in shard.inputs["1"].attempts] == [names.input_pod_name("grid", 1, 1)]


def test_cancelling_one_input_of_a_running_batch(kube: Kube, ns: str) -> None:
    script = 'if [ "$KINETIC_INDEX" = 1 ]; then exec sleep 300; fi; sleep 2; echo ok'
    apply(kube, ns, "one", {"template": sh(script), "inputs": {"items": [0, 1, 2, 3]}})
    wait_for(
        lambda: any(
            p.metadata.name == names.input_pod_name("one", 1, 1) and p.status.phase == "Running"
            for p in pods(kube, ns, "one")
        ),
        timeout=120,
        what="input 1 to run",
    )
    kube.kubectl(
        "patch", "kb", "one", "-n", ns, "--type", "merge", "-p", '{"spec":{"cancelIndexes":"1"}}'
    )
    status = wait_phase(kube, ns, "one", "SUCCEEDED", "FAILED", "CANCELLED")
    assert status["cancelledIndexes"] == "1" and status["succeededIndexes"] == "0,2-3", status
    assert status["phase"] == "CANCELLED"  # every input ended, one of them cancelled
    wait_for(
        lambda: all(
            p.metadata.name != names.input_pod_name("one", 1, 1) for p in pods(kube, ns, "one")
        ),
        timeout=60,
        what="the cancelled input's Pod to be stopped",
    )


def test_finished_pods_are_deleted_after_the_ttl_and_logs_archived(kube: Kube, ns: str) -> None:
    if not kube.is_local:
        pytest.skip("relies on the local cluster's short Pod TTL")
    apply(
        kube,
        ns,
        "logs",
        {"template": sh('echo "hello from $KINETIC_INDEX"'), "inputs": {"items": [0, 1]}},
    )
    wait_phase(kube, ns, "logs", "SUCCEEDED")
    assert pods(kube, ns, "logs")  # kept for a while, for kubectl logs and describe
    wait_for(lambda: not pods(kube, ns, "logs"), timeout=90, what="the TTL to delete the Pods")
    home = _home(kube, ns, "logs")
    for i in (0, 1):
        uri = home.log_uri(names.input_pod_name("logs", i, 1))
        assert storage.read_bytes(uri) == f"hello from {i}\n".encode()


def test_a_200_input_container_batch_keeps_a_small_status(kube: Kube, ns: str) -> None:
    apply(kube, ns, "wide", {"template": sh("true"), "inputs": {"items": list(range(200))}})
    most = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = batch(kube, ns, "wide").get("status") or {}
        most = max(most, len(json.dumps(status)))
        if status.get("phase") == "SUCCEEDED":
            break
        time.sleep(0.5)
    assert status.get("phase") == "SUCCEEDED", status
    assert status["succeededIndexes"] == "0-199"
    assert most < 4096
