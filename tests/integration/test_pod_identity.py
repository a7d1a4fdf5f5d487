"""Only Pods the operator made count: tests as a namespace-mate who may create Pods.

Anyone who may create Pods in a namespace can give one the labels of a job's
attempt or a batch's input, and an owner reference to the object. Each test
here makes such Pods beside genuine work and checks what a user sees: the
outcome is the genuine Pod's, the forged Pod is left alone (not counted, not
deleted), and the object says so in a Warning Event. Names squatted before
the operator gets to them stall nothing, and objects of different kinds whose
Pod names used to clash both run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kinetic.model import names
from kube_helpers import Kube, ended_status, wait_for

pytestmark = pytest.mark.integration

BUSYBOX = "busybox:1.36"
TERM_LOG = "/dev/termination-log"
TIMEOUT = 180


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
