"""The operator runs KineticJobs on a real cluster: results, retries, disruptions, cancel.

Uses the operator the chart installed (`make cluster-up`) or, if none runs,
starts one for the session with `kopf run`, as a cluster would.
KINETIC_TEST_OPERATOR=external forces the former (e.g. on kind with the Helm
chart installed). A job learns which attempt it is from KINETIC_ATTEMPT; a
witness that its process still runs is a heartbeat in storage.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.model.resources import GROUP, JOB_PLURAL, VERSION
from kinetic_testing.cluster import sh
from kube_helpers import Kube, local_env, wait_for
from kubernetes import client, watch

pytestmark = pytest.mark.integration

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
TERM_LOG = "/dev/termination-log"


# ----------------------------------------------------------------------- fixtures


@pytest.fixture
def ns(operator: None, namespace: str) -> str:
    return namespace


@pytest.fixture
def heartbeat(client_env: dict[str, str]) -> Iterator[str]:
    """A storage object a job's process rewrites every half second while it runs."""
    uri = storage.join(resolve().storage_root, "test-heartbeats", uuid.uuid4().hex)
    yield uri
    storage.delete(uri)


# A heartbeat in the runner image (Python with kinetic): the witness that a process runs.
BEAT = (
    "python -c 'exec(\"import sys, time\\nfrom kinetic import storage\\nn = 0\\n"
    "while True:\\n n += 1; storage.write_bytes(sys.argv[1], str(n).encode()); "
    "time.sleep(0.5)\")' {uri}"
)


# ----------------------------------------------------------------------- helpers


def custom(kube: Kube) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api)


def apply(kube: Kube, ns: str, name: str, spec: dict[str, Any]) -> subprocess.CompletedProcess:
    """`kubectl apply` a KineticJob, as a user would."""
    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KineticJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }
    return subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, "apply", "-f", "-"],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=60,
    )


def get(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return custom(kube).get_namespaced_custom_object(GROUP, VERSION, ns, JOB_PLURAL, name)


def wait_status(kube: Kube, ns: str, name: str, until, timeout: float = 90, what: str = "") -> dict:
    """Watch the KineticJob until `until(status)` holds; returns that status."""
    obj = get(kube, ns, name)
    if until(obj.get("status") or {}):
        return obj["status"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stream = watch.Watch().stream(
            custom(kube).list_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            JOB_PLURAL,
            field_selector=f"metadata.name={name}",
            resource_version=obj["metadata"]["resourceVersion"],
            timeout_seconds=max(1, int(deadline - time.monotonic())),
        )
        for event in stream:
            obj = event["object"]
            if until(obj.get("status") or {}):
                return obj["status"]
    status = get(kube, ns, name).get("status")
    raise AssertionError(
        f"{ns}/{name}: timed out waiting for {what or until}; "
        f"status: {json.dumps(status, indent=1)}"
    )


def wait_phase(kube: Kube, ns: str, name: str, *phases: str, timeout: float = 90) -> dict:
    return wait_status(
        kube, ns, name, lambda s: s.get("phase") in phases, timeout, f"phase in {phases}"
    )


def events(kube: Kube, ns: str, name: str) -> list[tuple[str, str]]:
    items = kube.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    items.sort(key=lambda e: (e.last_timestamp or e.event_time or 0, e.metadata.creation_timestamp))
    return [(e.type, e.reason) for e in items]


# ----------------------------------------------------------------------- tests


def test_container_job_result_lands_in_status(kube: Kube, ns: str):
    run = apply(kube, ns, "hello", sh(f"echo working; printf 'the answer is 42' > {TERM_LOG}"))
    assert run.returncode == 0, run.stderr
    status = wait_phase(kube, ns, "hello", *TERMINAL)
    assert status["phase"] == "SUCCEEDED", status
    assert status["result"] == "the answer is 42"
    assert status["attempt"] == 1
    (rec,) = status["attempts"]
    assert (rec["pod"], rec["outcome"], rec["exitCode"]) == ("hello-a1", "success", 0)
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "Running": "False",
        "Complete": "True",
        "Failed": "False",
        "Ready": "True",
        "Reconciling": "False",
        "Stalled": "False",
    }
    assert status["observedGeneration"] == 1 and status["completionTime"]

    # The attempt is the Pod itself: no batch/v1 Job in between.
    assert not kube.batch.list_namespaced_job(ns).items
    pod = kube.core.read_namespaced_pod("hello-a1", ns)
    assert pod.spec.restart_policy == "Never"
    assert pod.metadata.owner_references[0].kind == "KineticJob"
    assert pod.metadata.labels == {
        "kinetic.dev/job": "hello",
        "kinetic.dev/attempt": "1",
        "app.kubernetes.io/managed-by": "kinetic",
    }
    assert pod.spec.security_context.run_as_non_root is True
    assert pod.spec.automount_service_account_token is False

    wait_for(lambda: ("Normal", "Succeeded") in events(kube, ns, "hello"), what="events")
    # Ours only: Kopf posts no event per handler run, and keeps no copy of the spec.
    assert sorted(events(kube, ns, "hello")) == [("Normal", "Started"), ("Normal", "Succeeded")]
    annotations = get(kube, ns, "hello")["metadata"].get("annotations") or {}
    assert not [k for k in annotations if "kopf" in k or k.startswith("kinetic.dev/")]


def test_kubectl_shows_phase_attempt_accelerator_and_status_is_a_subresource(kube: Kube, ns: str):
    assert apply(kube, ns, "cols", sh("true")).returncode == 0
    wait_phase(kube, ns, "cols", "SUCCEEDED")
    table = kube.kubectl("get", "kj", "-n", ns).stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "PHASE", "ATTEMPT", "ACCELERATOR"]
    assert table[1].split()[:4] == ["cols", "SUCCEEDED", "1", "cpu"]
    # Writing status through the main resource is ignored: status is a subresource.
    kube.kubectl(
        "patch", "kj", "cols", "-n", ns, "--type", "merge", "-p", '{"status":{"phase":"FAILED"}}'
    )
    assert get(kube, ns, "cols")["status"]["phase"] == "SUCCEEDED"


def test_failing_command_with_two_retries_ends_failed_at_attempt_three(kube: Kube, ns: str):
    spec = sh(f"echo nope >&2; printf 'bad input' > {TERM_LOG}; exit 3", retries=2)
    assert apply(kube, ns, "fails", spec).returncode == 0
    status = wait_phase(kube, ns, "fails", *TERMINAL)
    assert status["phase"] == "FAILED"
    assert (status["attempt"], status["failures"], status["disruptions"]) == (3, 3, 0)
    assert [(r["attempt"], r["outcome"], r["exitCode"]) for r in status["attempts"]] == [
        (1, "failure", 3),
        (2, "failure", 3),
        (3, "failure", 3),
    ]
    assert "exit code 3" in status["message"] and "bad input" in status["message"]
    assert {p.metadata.name for p in kube.core.list_namespaced_pod(ns).items} == {
        "fails-a1",
        "fails-a2",
        "fails-a3",
    }
    wait_for(lambda: ("Warning", "Failed") in events(kube, ns, "fails"), what="Failed event")
    reasons = [r for _, r in events(kube, ns, "fails")]
    assert reasons.count("AttemptFailed") == 2 and reasons.count("Started") == 1


def test_fails_twice_then_succeeds(kube: Kube, ns: str):
    script = f"""
        [ "$KINETIC_ATTEMPT" -ge 3 ] || exit 1
        printf "ok after $KINETIC_ATTEMPT" > {TERM_LOG}
    """
    assert apply(kube, ns, "flaky", sh(script, retries=2)).returncode == 0
    status = wait_phase(kube, ns, "flaky", *TERMINAL)
    assert status["phase"] == "SUCCEEDED", status
    assert (status["attempt"], status["failures"]) == (3, 2)
    assert status["result"] == "ok after 3"
    assert [r["outcome"] for r in status["attempts"]] == ["failure", "failure", "success"]


def test_pod_deleted_mid_run_is_retried_without_using_retries(kube: Kube, ns: str):
    script = f"""
        if [ "$KINETIC_ATTEMPT" -eq 1 ]; then exec sleep 300; fi
        printf "second run" > {TERM_LOG}
    """
    assert apply(kube, ns, "victim", sh(script)).returncode == 0  # retries: 0
    status = wait_phase(kube, ns, "victim", "RUNNING")
    pod = status["attempts"][0]["pod"]
    kube.core.delete_namespaced_pod(pod, ns)

    status = wait_phase(kube, ns, "victim", *TERMINAL)
    assert status["phase"] == "SUCCEEDED", status
    assert (status["failures"], status["disruptions"]) == (0, 1)
    assert status["attempts"][-1]["outcome"] == "success" and status["result"] == "second run"
    assert status["attempt"] == 2
    first = status["attempts"][0]
    assert (first["outcome"], first["reason"], first["pod"]) == ("disruption", "PodDeleted", pod)
    wait_for(lambda: ("Warning", "AttemptDisrupted") in events(kube, ns, "victim"), what="event")


def test_cancel_ends_cancelled_and_the_process_is_gone(kube: Kube, ns: str, heartbeat: str):
    assert apply(kube, ns, "long", sh(BEAT.format(uri=heartbeat))).returncode == 0
    wait_phase(kube, ns, "long", "RUNNING")
    wait_for(lambda: storage.exists(heartbeat), timeout=60, what="the job's heartbeat")

    kube.kubectl(
        "patch", "kj", "long", "-n", ns, "--type", "merge", "-p", '{"spec":{"cancel":true}}'
    )
    status = wait_phase(kube, ns, "long", *TERMINAL)
    assert status["phase"] == "CANCELLED"
    assert status["attempts"][0]["outcome"] == "cancelled"
    wait_for(lambda: not kube.core.list_namespaced_pod(ns).items, what="the Pod to be deleted")
    last = storage.read_bytes(heartbeat)
    time.sleep(3)  # six heartbeats, were the process still running
    assert storage.read_bytes(heartbeat) == last, "the cancelled job's process still runs"
    # Sticky: nothing is launched again.
    assert get(kube, ns, "long")["status"]["phase"] == "CANCELLED"
    assert not kube.core.list_namespaced_pod(ns).items


def test_invalid_jobs_are_refused_or_failed_naming_the_field(kube: Kube, ns: str):
    # The schema refuses this at admission, naming the field (a command left out or empty runs
    # the image's own entrypoint; a shell line where a list belongs is a mistake).
    string_command = apply(kube, ns, "strcmd", {"container": {"command": "echo hi"}})
    assert string_command.returncode != 0
    assert "spec.container.command" in string_command.stderr
    assert "array" in string_command.stderr

    # These pass the schema; the operator fails them with a message naming the field.
    assert apply(kube, ns, "gpu", sh("true", accelerator="gpu-v100")).returncode == 0
    status = wait_phase(kube, ns, "gpu", *TERMINAL)
    assert status["phase"] == "FAILED"
    assert status["message"].startswith("spec.accelerator: unknown accelerator 'gpu-v100'")
    assert "gpu-l4" in status["message"] and "tpu-v5e-1" in status["message"]
    assert status["attempt"] == 0 and not kube.core.list_namespaced_pod(ns).items

    assert apply(kube, ns, "gpu3", sh("true", accelerator="gpu-l4x3")).returncode == 0
    assert wait_phase(kube, ns, "gpu3", *TERMINAL)["message"].startswith("spec.accelerator:")

    bad_memory = sh("true", resources={"memory": "lots"})
    assert apply(kube, ns, "mem", bad_memory).returncode == 0
    status = wait_phase(kube, ns, "mem", *TERMINAL)
    assert status["phase"] == "FAILED" and "rejected" in status["message"], status

    wait_for(lambda: ("Warning", "InvalidSpec") in events(kube, ns, "gpu"), what="event")

    # ... and the operator is still serving.
    assert apply(kube, ns, "after", sh(f"printf fine > {TERM_LOG}")).returncode == 0
    status = wait_phase(kube, ns, "after", *TERMINAL)
    assert (status["phase"], status["result"]) == ("SUCCEEDED", "fine")


def test_deleting_a_kineticjob_cascades_to_its_pods(kube: Kube, ns: str):
    assert apply(kube, ns, "gone", sh("exec sleep 300")).returncode == 0
    wait_phase(kube, ns, "gone", "RUNNING")
    assert kube.core.list_namespaced_pod(ns).items
    kube.kubectl("delete", "kj", "gone", "-n", ns, "--wait=true", timeout=60)
    wait_for(lambda: not kube.core.list_namespaced_pod(ns).items, what="the pods to be collected")


def test_finished_pods_go_after_their_ttl_and_their_logs_stay_readable(
    kube: Kube, ns: str, monkeypatch: pytest.MonkeyPatch
):
    if not kube.is_local:
        pytest.skip("relies on the local cluster's short Pod TTL and its storage root")
    from kinetic import storage
    from kinetic.model import layout
    from kubernetes import client

    script = f"""
        if [ "$KINETIC_ATTEMPT" = 1 ]; then echo first try; exit 1; fi
        echo second try; printf done > {TERM_LOG}
    """
    assert apply(kube, ns, "ttl", sh(script, retries=1)).returncode == 0
    status = wait_phase(kube, ns, "ttl", *TERMINAL)
    assert (status["phase"], status["attempt"]) == ("SUCCEEDED", 2), status
    # A failed attempt's Pod is kept while the job runs; both go once it has ended.
    wait_for(
        lambda: not kube.core.list_namespaced_pod(ns).items,
        timeout=90,
        what="the finished Pods to be deleted after their TTL",
    )
    for key, value in local_env().items():
        monkeypatch.setenv(key, value)
    root = local_env()["KINETIC_STORAGE_ROOT"]
    uid = client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
        "kinetic.dev", "v1alpha1", ns, "kineticjobs", "ttl"
    )["metadata"]["uid"]
    home = layout.job_home(root, ns, "ttl", uid)
    assert storage.read_bytes(home.log_uri("ttl-a1")) == b"first try\n"
    assert storage.read_bytes(home.log_uri("ttl-a2")) == b"second try\n"


def test_config_map_for_clients(kube: Kube, operator: None):
    cm = kube.core.read_namespaced_config_map("kinetic-config", "kinetic-system")
    assert cm.data["defaultImage"]
    assert "cpu" in cm.data["accelerators"].split(",")
    if local_env().get("KINETIC_STORAGE_ROOT") and kube.is_local:
        assert cm.data["storageRoot"] == local_env()["KINETIC_STORAGE_ROOT"]
