"""Only Pods the operator made count: tests as a namespace-mate who may create Pods.

Anyone who may create Pods in a namespace can give one the labels of a job's
attempt or a batch's input, and an owner reference to the object. Each test
here makes such Pods beside genuine work and checks what a user sees: the
outcome is the genuine Pod's, the forged Pod is left alone (not counted, not
deleted), and the object says so in a Warning Event. Names squatted before
the operator gets to them stall nothing, objects of different kinds whose
Pod names used to clash both run, and the Pods of the previous operator
version, which carry no seal, still count after an upgrade mid-batch.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
from kinetic import storage
from kinetic.model import names
from kube_helpers import (
    OPERATOR_NAMESPACE,
    Kube,
    PodWatch,
    assert_each_ran_once,
    ended_status,
    runs_in,
    wait_for,
    wait_operator_ready,
    witness_command,
)

pytestmark = pytest.mark.integration

BUSYBOX = "busybox:1.36"
TERM_LOG = "/dev/termination-log"
TIMEOUT = 180
OPERATOR = "deployment/kinetic-operator"
SEAL_SECRET = "kinetic-operator-seal"  # the chart's sealSecret


def uid_of(kube: Kube, kind: str, ns: str, name: str) -> str:
    got = kube.kubectl("get", kind, name, "-n", ns, "-o", "json")
    return str(json.loads(got.stdout)["metadata"]["uid"])


def container(script: str) -> dict[str, Any]:
    return {"container": {"image": BUSYBOX, "command": ["sh", "-c", script]}}


def forged_pod(
    name: str, labels: dict[str, str], owner: tuple[str, str, str] | None, script: str
) -> dict[str, Any]:
    """A bare Pod with Kinetic's labels and an owner reference to ``owner`` (kind, name, uid),
    as anyone allowed to create Pods in the namespace can make one."""
    meta: dict[str, Any] = {
        "name": name,
        "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY, **labels},
    }
    if owner is not None:
        kind, owner_name, uid = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": "kinetic.dev/v1alpha1",
                "kind": kind,
                "name": owner_name,
                "uid": uid,
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX,
                    "command": ["sh", "-c", script],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def phase_of(kube: Kube, ns: str, pod: str) -> str | None:
    got = kube.kubectl("get", "pod", pod, "-n", ns, "-o", "jsonpath={.status.phase}", check=False)
    return got.stdout.strip() if got.returncode == 0 else None


def warnings(kube: Kube, ns: str, reason: str) -> list[str]:
    events = json.loads(kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout)
    return [e.get("message", "") for e in events["items"] if e.get("reason") == reason]


def test_forged_pods_decide_nothing_for_a_job_a_batch_input_or_a_gang_member(
    kube: Kube, ns: str
) -> None:
    """Three genuine objects run; forged Pods that end at once with FORGED, on a later
    attempt number than the genuine one, are made beside each. The job, the input and the
    gang end with their genuine results; every forged Pod is still there, untouched."""
    slow = f"sleep 12; printf GENUINE > {TERM_LOG}"
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticJob",
            "metadata": {"name": "victim"},
            "spec": container(slow),
        },
    )
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticBatch",
            "metadata": {"name": "grp-0f0f0f0f"},
            "spec": {"template": container(slow), "inputs": {"items": [0, 1]}},
        },
    )
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticJob",
            "metadata": {"name": "pair"},
            "spec": {**container(f'[ "$RANK" = 1 ] && exit 0; {slow}'), "hosts": 2},
        },
    )
    forged = f"printf FORGED > {TERM_LOG}"
    job_uid = uid_of(kube, "kj", ns, "victim")
    batch_uid = uid_of(kube, "kb", ns, "grp-0f0f0f0f")
    pair_uid = uid_of(kube, "kj", ns, "pair")
    fakes = {
        "forged-job": forged_pod(
            "forged-job",
            {names.LABEL_JOB: "victim", names.LABEL_ATTEMPT: "9"},
            ("KineticJob", "victim", job_uid),
            forged,
        ),
        "forged-input": forged_pod(
            "forged-input",
            {names.LABEL_BATCH: "grp-0f0f0f0f", names.LABEL_INDEX: "1", names.LABEL_ATTEMPT: "9"},
            ("KineticBatch", "grp-0f0f0f0f", batch_uid),
            forged,
        ),
        "forged-rank": forged_pod(
            "forged-rank",
            {names.LABEL_JOB: "pair", names.LABEL_ATTEMPT: "1", names.LABEL_RANK: "1"},
            ("KineticJob", "pair", pair_uid),
            "exit 7",  # a member failing would fail the whole gang
        ),
    }
    for body in fakes.values():
        kube.apply(ns, body)

    job = ended_status(kube, "kj", ns, "victim", TIMEOUT)
    assert (job["phase"], job["result"], job["attempt"]) == ("SUCCEEDED", "GENUINE", 1), job
    assert [a["pod"] for a in job["attempts"]] == [names.job_pod_name("victim", 1)]
    assert job["attempts"][0]["podUID"]  # the instance the operator made, for the client
    batch = ended_status(kube, "kb", ns, "grp-0f0f0f0f", TIMEOUT)
    assert batch["phase"] == "SUCCEEDED" and batch["succeededIndexes"] == "0-1", batch
    pair = ended_status(kube, "kj", ns, "pair", TIMEOUT)
    assert (pair["phase"], pair["result"], pair["failures"]) == ("SUCCEEDED", "GENUINE", 0), pair
    # The forged Pods ran to their end and are still there: never deleted as the operator's.
    for name in fakes:
        assert phase_of(kube, ns, name) in ("Succeeded", "Failed"), name
    said = warnings(kube, ns, "ForeignPod")
    for name in fakes:
        assert any(name in m and "not the operator's seal" in m for m in said), (name, said)


def test_a_job_and_a_batch_whose_pod_names_used_to_clash_both_run(kube: Kube, ns: str) -> None:
    """KineticJob ``b-1`` beside KineticBatch ``b``: once both named a Pod ``b-1-1``."""
    done = f"printf done > {TERM_LOG}"
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticJob",
            "metadata": {"name": "b-1"},
            "spec": container(done),
        },
    )
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticBatch",
            "metadata": {"name": "b"},
            "spec": {"template": container(done), "inputs": {"items": [0, 1, 2]}},
        },
    )
    assert ended_status(kube, "kj", ns, "b-1", TIMEOUT)["phase"] == "SUCCEEDED"
    batch = ended_status(kube, "kb", ns, "b", TIMEOUT)
    assert batch["phase"] == "SUCCEEDED" and batch["succeededIndexes"] == "0-2", batch


def test_a_name_squatted_before_the_operator_gets_to_it_stalls_nothing(kube: Kube, ns: str) -> None:
    """A Pod made under the name the job's first attempt would have: the attempt takes its
    alternative at once, runs and succeeds; the squatter is left alone."""
    squatter = names.job_pod_name("squat", 1)
    kube.apply(ns, forged_pod(squatter, {"app": "mine"}, None, "sleep 60"))
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticJob",
            "metadata": {"name": "squat"},
            "spec": container(f"printf ran > {TERM_LOG}"),
        },
    )
    status = ended_status(kube, "kj", ns, "squat", TIMEOUT)
    assert (status["phase"], status["result"], status["attempt"]) == ("SUCCEEDED", "ran", 1)
    (ran,) = status["attempts"]
    assert ran["pod"].startswith(f"{squatter}-x") and ran["pod"] != squatter
    assert phase_of(kube, ns, squatter) in ("Pending", "Running")  # untouched
    wait_for(lambda: phase_of(kube, ns, ran["pod"]) != "Running", 30, what="the job's own Pod")


# ------------------------------------------------------------------ an upgrade mid-batch


def test_the_previous_versions_pods_still_count_after_an_upgrade_mid_batch(
    kube: Kube, ns: str, runs: str
) -> None:
    """The previous operator version made Pods without a seal. Upgraded mid-batch, the new
    operator creates its key on first start, so those Pods were made before sealing began:
    they still count (`seal.Sealer.verdict`: legacy). Simulated faithfully: two inputs'
    Pods are running (held at a gate in storage), the operator is scaled to 0, the seal
    is taken off every Pod of the batch and the key Secret is made again (same key: other
    namespaces' sealed Pods must keep counting) so that it is newer than them, and the
    operator is started again. Then one more input is allowed to start: exactly one new
    Pod appears, so the two unsealed running Pods were counted, not replaced. Once the gate
    opens the batch succeeds, each input having run once; neither unsealed Pod was deleted
    before it finished, and no Warning calls them strangers."""
    total, name = 4, "upgraded"
    gate = f"{runs}-gate"
    script = f"{witness_command(runs)} && {_gate_command(gate)}"
    try:
        with PodWatch(kube, ns) as pods:
            kube.apply(
                ns,
                {
                    "apiVersion": "kinetic.dev/v1alpha1",
                    "kind": "KineticBatch",
                    "metadata": {"name": name},
                    "spec": {
                        "template": container(script),
                        "inputs": {"items": list(range(total))},
                        "maxConcurrent": 2,
                    },
                },
            )
            wait_for(lambda: sorted(runs_in(runs)) == [0, 1], 120, 0.5, "inputs 0 and 1 to run")
            old = pods.labelled(names.LABEL_BATCH, name)
            assert len(old) == 2, old
            # A container can record its run before the kubelet reports its Pod Running.
            wait_for(
                lambda: all(phase_of(kube, ns, p) == "Running" for p in old),
                60,
                0.5,
                "both Pods to be reported Running",
            )

            key = _secret(kube)
            with _operator_stopped(kube):
                try:
                    for pod in _batch_pods(kube, ns, name):  # as the previous version made them
                        kube.kubectl("annotate", "pod", pod, "-n", ns, f"{names.ANNOTATION_SEAL}-")
                finally:
                    _make_again(kube, key)  # always: else the operator would make a new key
            since = names.parse_time(_secret(kube)["metadata"]["creationTimestamp"])
            for pod in old:
                meta = pods.last[pod].metadata
                assert names.ANNOTATION_SEAL not in (meta.annotations or {}), pod
                assert meta.creation_timestamp < since, (pod, meta.creation_timestamp, since)

            kube.kubectl(
                "patch", "kb", name, "-n", ns, "--type=merge", "-p", '{"spec":{"maxConcurrent":3}}'
            )
            wait_for(lambda: 2 in runs_in(runs), 120, 0.5, "the upgraded operator to run input 2")
            assert Counter(runs_in(runs)) == {0: 1, 1: 1, 2: 1}  # 0 and 1 not started again
            third = [p for p in pods.labelled(names.LABEL_BATCH, name) if p not in old]
            assert len(third) == 1, f"the running unsealed Pods were replaced: {third}"
            assert all(phase_of(kube, ns, p) == "Running" for p in old), old
            storage.write_bytes(gate, b"")
            status = ended_status(kube, "kb", ns, name, TIMEOUT)
            assert_each_ran_once(runs, status, total)
        made = pods.labelled(names.LABEL_BATCH, name)
    finally:
        storage.delete(gate)
    by_index = sorted(pods.last[p].metadata.labels[names.LABEL_INDEX] for p in made)
    assert by_index == [str(i) for i in range(total)], made  # one Pod each: none replaced
    for pod in old:
        assert pods.deleted.get(pod) in (None, "Succeeded"), (pod, pods.deleted)
    said = warnings(kube, ns, "ForeignPod")
    assert not [m for m in said if any(pod in m for pod in old)], said


def _gate_command(uri: str) -> str:
    """A shell line that waits until the object ``uri`` exists in the storage emulator the
    Pod was given (`witness_command`'s storage): the test opens the gate."""
    bucket, _, path = uri[len("gs://") :].partition("/")
    url = f"$STORAGE_EMULATOR_HOST/storage/v1/b/{bucket}/o/{quote(path, safe='')}"
    return f'until wget -q -O /dev/null "{url}"; do sleep 1; done'


def _batch_pods(kube: Kube, ns: str, batch: str) -> list[str]:
    got = kube.kubectl(
        "get", "pods", "-n", ns, "-l", f"{names.LABEL_BATCH}={batch}", "-o", "name"
    )  # fmt: skip
    return [line.removeprefix("pod/") for line in got.stdout.split()]


def _secret(kube: Kube) -> dict[str, Any]:
    got = kube.kubectl("get", "secret", SEAL_SECRET, "-n", OPERATOR_NAMESPACE, "-o", "json")
    return dict(json.loads(got.stdout))


def _make_again(kube: Kube, old: dict[str, Any]) -> None:
    """The seal key Secret deleted and created again with the same key: a creation time
    after every Pod of the batch, as the key an upgraded operator makes on first start."""
    meta = old["metadata"]
    again = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": meta.get("labels") or {},
        },
        "type": old.get("type", "Opaque"),
        "data": old["data"],
    }
    kube.kubectl("delete", "secret", SEAL_SECRET, "-n", OPERATOR_NAMESPACE, "--ignore-not-found")
    kube.apply(OPERATOR_NAMESPACE, again)


@contextmanager
def _operator_stopped(kube: Kube) -> Iterator[None]:
    """No operator Pod at all (the Deployment scaled to 0) inside; its replicas back, and
    Ready with one leading, afterwards, always."""
    deployment = json.loads(
        kube.kubectl("get", OPERATOR, "-n", OPERATOR_NAMESPACE, "-o", "json").stdout
    )
    replicas = int(deployment["spec"].get("replicas", 1))
    kube.kubectl("scale", OPERATOR, "-n", OPERATOR_NAMESPACE, "--replicas=0")
    try:
        wait_for(
            lambda: not kube.kubectl(
                "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/name=kinetic",
                "-o", "name",
            ).stdout.strip(),
            120,
            0.5,
            "every operator Pod to be gone",
        )  # fmt: skip
        yield
    finally:
        kube.kubectl("scale", OPERATOR, "-n", OPERATOR_NAMESPACE, f"--replicas={replicas}")
        done = kube.kubectl(
            "rollout", "status", OPERATOR, "-n", OPERATOR_NAMESPACE, "--timeout=180s",
            timeout=200, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        wait_operator_ready(kube)
