"""The issue's flood, from a Pod, at the deployed operator's webhook Service, while a job runs.

Any Pod can reach the webhook's port (the API server is not a Pod, so the
chart's NetworkPolicy cannot name it). Here a Pod in the test's namespace runs
`flood_client.py`: sixteen clients POSTing 8 MiB bodies (``[{},{},…]``) to the
Service for 45 s, again and again; eight such clients once took a replica past
its memory limit within a minute. Meanwhile a job runs, and a batch that the
policy refuses is created. What a user would see is asserted:

* no operator replica restarts or is replaced;
* the leader Lease is renewed on time (no gap near the 10 s renew deadline);
* the job ends SUCCEEDED: reconciliation went on;
* the over-policy batch never runs: refused at creation, or (if its review
  failed open) failed by the operator, with no Pod of it ever created;
* the replicas' memory, as the kubelet reports it, stays under 300 MiB.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kinetic.model.names import LABEL_BATCH, LEADER_LEASE
from kinetic_testing.cluster import kubectl_in
from kube_helpers import OPERATOR_NAMESPACE, OPERATOR_SELECTOR, Kube, wait_for

pytestmark = pytest.mark.integration

API = "kinetic.dev/v1alpha1"
FLOOD_SECONDS = 45
FLOODERS = 16
BODY_BYTES = 8 << 20
RENEW_DEADLINE = 10.0
MAX_WORKING_SET = 300 << 20
FLOOD_CLIENT = Path(__file__).with_name("flood_client.py")


def webhook_service(kube: Kube) -> tuple[str, int]:
    """The chart's webhook Service: its cluster IP and port."""
    got = kube.kubectl(
        "get", "service", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR, "-o", "json"
    )
    for svc in json.loads(got.stdout)["items"]:
        for port in svc["spec"].get("ports") or ():
            if port.get("name") == "webhook":
                return svc["spec"]["clusterIP"], int(port["port"])
    raise AssertionError("no Service with a port named webhook in the operator's namespace")


def runner_image(kube: Kube) -> str:
    """An image with Python in it: the operator's published default (the runner image)."""
    got = kube.kubectl("get", "configmap", "kinetic-config", "-n", OPERATOR_NAMESPACE, "-o", "json")
    image: str = json.loads(got.stdout)["data"]["defaultImage"]
    return image


def operator_pods(kube: Kube) -> dict[str, dict[str, Any]]:
    """The operator's Pods by uid: name, node, restarts."""
    got = kube.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR, "-o", "json"
    )
    pods = {}
    for pod in json.loads(got.stdout)["items"]:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        pods[pod["metadata"]["uid"]] = {
            "name": pod["metadata"]["name"],
            "node": pod["spec"].get("nodeName"),
            "restarts": sum(s.get("restartCount", 0) for s in statuses),
            "last": [s.get("lastState") for s in statuses],
        }
    return pods


def terminating_operator_pods(kube: Kube) -> list[str]:
    """Operator Pods on their way out (a rollout, a deleted replica)."""
    got = kube.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR, "-o", "json"
    )
    items = json.loads(got.stdout)["items"]
    return [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")]


def working_sets(kube: Kube, pods: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Each operator Pod's memory working set, as its node's kubelet reports it."""
    found: dict[str, int] = {}
    for node in {p["node"] for p in pods.values() if p["node"]}:
        got = kube.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/stats/summary")
        for pod in json.loads(got.stdout).get("pods") or ():
            ref = pod["podRef"]
            if ref["namespace"] == OPERATOR_NAMESPACE and ref["uid"] in pods:
                memory = sum(
                    (c.get("memory") or {}).get("workingSetBytes") or 0
                    for c in pod.get("containers") or ()
                )
                found[ref["name"]] = memory
    return found


@dataclass
class Seen:
    """What is watched while the flood runs."""

    renewals: list[datetime] = field(default_factory=list)
    holders: set[str] = field(default_factory=set)
    memory: dict[str, int] = field(default_factory=dict)


def watch(kube: Kube, pods: dict[str, dict[str, Any]], stop: threading.Event, seen: Seen) -> None:
    while not stop.is_set():
        got = kube.kubectl(
            "get", "lease", LEADER_LEASE, "-n", OPERATOR_NAMESPACE, "-o", "json", check=False
        )
        if got.returncode == 0:
            spec = json.loads(got.stdout).get("spec") or {}
            if spec.get("renewTime"):
                renewed = datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
                if not seen.renewals or renewed != seen.renewals[-1]:
                    seen.renewals.append(renewed)
                seen.holders.add(spec.get("holderIdentity") or "")
        try:
            for name, used in working_sets(kube, pods).items():
                seen.memory[name] = max(used, seen.memory.get(name, 0))
        except Exception:  # noqa: BLE001 — a stats read that failed; the next one counts
            pass
        time.sleep(0.5)


def flooder_pod(namespace: str, image: str, host: str, port: int) -> dict[str, Any]:
    """A Pod that runs `flood_client.py` against ``host:port``, limited to one CPU as a
    tenant's Pod would be."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "flooder", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
            "containers": [
                {
                    "name": "flood",
                    "image": image,
                    "command": [
                        "python",
                        "-c",
                        FLOOD_CLIENT.read_text(),
                        host,
                        str(port),
                        str(FLOOD_SECONDS),
                        str(BODY_BYTES),
                        str(FLOODERS),
                    ],
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def job(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "KineticJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"container": {"image": "busybox:1.36", "command": ["sh", "-c", "sleep 20"]}},
    }


def over_policy_batch(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "KineticBatch",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {"container": {"image": "busybox:1.36", "command": ["true"]}},
            "inputs": {"items": [1, 2, 3]},
        },
    }


def status_of(kube: Kube, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    got = kube.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    if got.returncode != 0:
        return None
    status: dict[str, Any] = json.loads(got.stdout).get("status") or {}
    return status


def test_a_flood_from_a_pod_restarts_no_replica_and_lets_nothing_past_the_policy(
    kube: Kube,
    namespace: str,
    policy: Callable[[dict[str, str]], None],
) -> None:
    host, port = webhook_service(kube)
    batch = over_policy_batch(f"over-{uuid.uuid4().hex[:6]}", namespace)
    policy({"maxBatchSize": "2"})
    wait_for(
        lambda: (
            "exceeds maxBatchSize 2"
            in kubectl_in(kube, json.dumps(batch), "create", "--dry-run=server").stderr
        ),
        timeout=20,
        what="the policy to hold",
    )
    wait_for(  # a rollout an earlier test started is over: only serving replicas remain
        lambda: not terminating_operator_pods(kube), timeout=120, what="the rollout to end"
    )
    before = operator_pods(kube)
    kube.apply(namespace, job("steady", namespace))
    kube.apply(namespace, flooder_pod(namespace, runner_image(kube), host, port))
    wait_for(
        lambda: (
            status_of(kube, "pod", namespace, "flooder").get("phase")  # type: ignore[union-attr]
            in ("Running", "Succeeded", "Failed")
        ),
        timeout=120,
        what="the flooder Pod to start",
    )
    seen, stop = Seen(), threading.Event()
    watcher = threading.Thread(target=watch, args=(kube, before, stop, seen))
    watcher.start()
    try:
        time.sleep(10)  # well into the flood
        created = kubectl_in(kube, json.dumps(batch), "create")
        wait_for(
            lambda: (
                status_of(kube, "pod", namespace, "flooder").get("phase")  # type: ignore[union-attr]
                in ("Succeeded", "Failed")
            ),
            timeout=FLOOD_SECONDS + 120,
            what="the flood to end",
        )
    finally:
        stop.set()
        watcher.join(timeout=60)
    log = kube.kubectl("logs", "flooder", "-n", namespace).stdout
    flood = json.loads(log.strip().splitlines()[-1])
    after = operator_pods(kube)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(seen.renewals)]
    print(
        f"\nflood: {flood}; operator memory peaks (kubelet) "
        f"{ {k: f'{v / 2**20:.0f} MiB' for k, v in seen.memory.items()} }; Lease renewals "
        f"{len(seen.renewals)}, longest gap {max(gaps, default=0):.1f} s; the over-policy "
        f"batch's create: {created.returncode} {created.stderr.strip()[:300]}"
    )

    assert flood["requests"] >= FLOODERS, flood  # the flood reached the webhook
    assert set(after) == set(before), f"operator Pods replaced: {before} -> {after}"
    restarted = {
        p["name"]: p["last"] for uid, p in after.items() if p["restarts"] != before[uid]["restarts"]
    }
    assert not restarted, f"operator replicas restarted during the flood: {restarted}"
    assert len(seen.holders) == 1 and gaps and max(gaps) < RENEW_DEADLINE / 2, (gaps, seen.holders)
    assert seen.memory and max(seen.memory.values()) < MAX_WORKING_SET, seen.memory

    ended = wait_for(
        lambda: (
            (status_of(kube, "kineticjob", namespace, "steady") or {}).get("phase")
            in ("SUCCEEDED", "FAILED", "CANCELLED")
            and status_of(kube, "kineticjob", namespace, "steady")
        ),
        timeout=180,
        what="the job to end",
    )
    assert ended["phase"] == "SUCCEEDED", ended  # type: ignore[index]

    name = batch["metadata"]["name"]
    if created.returncode != 0:
        assert "exceeds maxBatchSize 2" in created.stderr or "try again" in created.stderr
        assert status_of(kube, "kineticbatch", namespace, name) is None
    else:  # its review failed open: the operator judges it before it runs anything
        failed = wait_for(
            lambda: (
                (status_of(kube, "kineticbatch", namespace, name) or {}).get("phase") == "FAILED"
                and status_of(kube, "kineticbatch", namespace, name)
            ),
            timeout=60,
            what="the over-policy batch to be failed",
        )
        assert "exceeds maxBatchSize 2" in failed["message"]  # type: ignore[index]
    pods = kube.kubectl(
        "get", "pods", "-n", namespace, "-l", f"{LABEL_BATCH}={name}", "-o", "name"
    ).stdout
    assert pods.strip() == "", f"the over-policy batch ran Pods: {pods}"
