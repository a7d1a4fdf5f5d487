"""What the kubelet gives a pod: token, volumes, probes, a reachable IP.

Written against the Kubernetes API (python:3.12-slim for the image), so it
runs on kind too; the checks that look at the machine itself run only on the
local cluster.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from kube_helpers import Kube, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

IMAGE = "python:3.12-slim"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# Reads what the pod was given and calls the API server with its own token, as an
# in-cluster client does; prints one JSON line.
PROBE_SELF = r"""
import json, os, ssl, urllib.request, urllib.error
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
read = lambda p: open(p).read()
out = {
    "namespace": read(f"{sa}/namespace"),
    "config": read("/tmp/kinetic-vol/config/greeting"),
    "secret": read("/tmp/kinetic-vol/secret/password"),
    "scratch": os.listdir("/tmp/kinetic-vol/scratch"),
}
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
req = urllib.request.Request(
    f"https://{host}:{port}/api/v1/namespaces/{out['namespace']}/secrets",
    headers={"Authorization": "Bearer " + read(f"{sa}/token")},
)
try:
    urllib.request.urlopen(req, context=ssl.create_default_context(cafile=f"{sa}/ca.crt"))
    out["api"] = 200
except urllib.error.HTTPError as e:
    out["api"] = e.code
    out["user"] = json.loads(e.read()).get("message", "")
print(json.dumps(out), flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def finished(kube: Kube, ns: str, name: str) -> client.V1Pod | None:
    p = kube.core.read_namespaced_pod(name, ns)
    return p if p.status.phase in ("Succeeded", "Failed") else None


def test_a_pod_gets_its_token_volumes_and_the_api_server(kube: Kube, namespace: str) -> None:
    core = kube.core
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot"))
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"greeting": "hello"}),
    )
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"password": "s3"}),
    )
    wait_for(
        lambda: core.read_namespaced_service_account("robot", namespace).secrets,
        60,
        what="robot's token Secret (1.20 admits pods only once it exists)",
    ) if _before_1_24(kube) else None
    mount = client.V1VolumeMount
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="self"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            service_account_name="robot",
            containers=[
                client.V1Container(
                    name="main",
                    image=IMAGE,
                    command=["python3", "-c", PROBE_SELF],
                    volume_mounts=[
                        mount(name="config", mount_path="/tmp/kinetic-vol/config"),
                        mount(name="secret", mount_path="/tmp/kinetic-vol/secret", read_only=True),
                        mount(name="scratch", mount_path="/tmp/kinetic-vol/scratch"),
                    ],
                )
            ],
            volumes=[
                client.V1Volume(
                    name="config", config_map=client.V1ConfigMapVolumeSource(name="cfg")
                ),
                client.V1Volume(
                    name="secret", secret=client.V1SecretVolumeSource(secret_name="creds")
                ),
                client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
            ],
        ),
    )
    core.create_namespaced_pod(namespace, body)
    pod = wait_for(lambda: finished(kube, namespace, "self"), 90, what="pod self to finish")
    logs = core.read_namespaced_pod_log("self", namespace)
    assert pod.status.phase == "Succeeded", logs
    seen = json.loads(logs.strip().splitlines()[-1])
    assert seen["namespace"] == namespace
    assert (seen["config"], seen["secret"], seen["scratch"]) == ("hello", "s3", [])
    # The token authenticates as the pod's ServiceAccount (403: known, but not allowed).
    assert seen["api"] == 403
    assert f"system:serviceaccount:{namespace}:robot" in seen["user"]
    if kube.is_local:  # the mounts were the pod's own: the machine does not see them
        assert not Path(SA_DIR, "token").exists()
        assert not Path("/tmp/kinetic-vol/config/greeting").exists()
        # The mount points the node had to create on the machine are removed with the pod.
        wait_for(lambda: not Path("/tmp/kinetic-vol").exists(), 30, what="mount points removed")


def _before_1_24(kube: Kube) -> bool:
    minor = client.VersionApi(kube.api).get_code().minor
    return int("".join(ch for ch in minor if ch.isdigit()) or 99) < 24


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _endpoint_ips(kube: Kube, ns: str, name: str) -> tuple[list[str], list[str]]:
    ep = kube.core.read_namespaced_endpoints(name, ns)
    ready, not_ready = [], []
    for subset in ep.subsets or []:
        ready += [f"{a.ip}:{subset.ports[0].port}" for a in subset.addresses or []]
        not_ready += [f"{a.ip}:{subset.ports[0].port}" for a in subset.not_ready_addresses or []]
    return ready, not_ready


def test_probes_decide_readiness_endpoints_and_restarts(kube: Kube, namespace: str) -> None:
    """Ready only once the readiness probe passes (then listed in the Service's
    Endpoints at the pod IP); a failing liveness probe restarts the container."""
    port = free_port()
    # Serves its working directory: /ready appears after 3 s; after 8 s both files go.
    script = (
        "touch alive; (sleep 3; touch ready; sleep 5; rm -f ready alive) & "
        f"exec python3 -m http.server {port}"
    )
    kube.core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="probed"),
            spec=client.V1ServiceSpec(
                selector={"app": "probed"},
                ports=[client.V1ServicePort(port=80, target_port="http")],
            ),
        ),
    )

    def probe(path: str, failures: int, delay: int = 0) -> client.V1Probe:
        return client.V1Probe(
            http_get=client.V1HTTPGetAction(path=path, port="http"),
            initial_delay_seconds=delay,
            period_seconds=1,
            failure_threshold=failures,
        )

    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="probed", labels={"app": "probed"}),
        spec=client.V1PodSpec(
            restart_policy="Always",
            termination_grace_period_seconds=2,
            containers=[
                client.V1Container(
                    name="web",
                    image=IMAGE,
                    command=["sh", "-c", script],
                    working_dir="/tmp/kinetic-probe-www",
                    ports=[client.V1ContainerPort(name="http", container_port=port)],
                    readiness_probe=probe("/ready", 1),
                    liveness_probe=probe("/alive", 2, delay=2),
                    volume_mounts=[
                        client.V1VolumeMount(name="www", mount_path="/tmp/kinetic-probe-www")
                    ],
                )
            ],
            volumes=[client.V1Volume(name="www", empty_dir=client.V1EmptyDirVolumeSource())],
        ),
    )
    kube.core.create_namespaced_pod(namespace, body)
    running = wait_for(
        lambda: (lambda p: p if p.status.phase == "Running" else None)(
            kube.core.read_namespaced_pod("probed", namespace)
        ),
        60,
        what="pod probed to run",
    )
    assert not _ready(running)  # running, but its readiness probe has not passed yet
    pod = wait_for(
        lambda: (lambda p: p if _ready(p) else None)(
            kube.core.read_namespaced_pod("probed", namespace)
        ),
        30,
        what="the readiness probe to pass",
    )
    assert pod.status.pod_ip and not pod.status.pod_ip.startswith("127.")
    wait_for(
        lambda: _endpoint_ips(kube, namespace, "probed")[0] == [f"{pod.status.pod_ip}:{port}"],
        30,
        what="the Service's Endpoints to list the ready pod",
    )
    restarted = wait_for(
        lambda: (lambda p: p if p.status.container_statuses[0].restart_count >= 1 else None)(
            kube.core.read_namespaced_pod("probed", namespace)
        ),
        60,
        what="the liveness probe to restart the container",
    )
    last = restarted.status.container_statuses[0].last_state.terminated
    assert last is not None and last.exit_code != 0
    events = kube.core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=probed"
    ).items
    assert any(e.reason == "Unhealthy" and "Liveness probe failed" in e.message for e in events)


def _pod_delete_404s(kube: Kube) -> int:
    """DELETEs of pods the API server answered 404 so far (its own counter)."""
    metrics = kube.kubectl("get", "--raw", "/metrics").stdout
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("apiserver_request_total{")
        and 'resource="pods"' in line
        and 'subresource=""' in line
        and 'verb="DELETE"' in line
        and 'code="404"' in line
    )


def test_deleting_finished_pods_costs_no_second_delete(kube: Kube, namespace: str) -> None:
    """A finished Pod's deletion needs no confirmation from the node (grace 0): the node must
    not send a DELETE of its own, which the API server could only answer 404."""
    names = [f"done-{i}" for i in range(5)]
    for name in names:
        kube.core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="main", image=IMAGE, command=["true"])],
                ),
            ),
        )
    for name in names:
        wait_for(
            lambda name=name: (
                kube.core.read_namespaced_pod(name, namespace).status.phase == "Succeeded"
            ),
            timeout=120,
            what=f"{name} to succeed",
        )
    before = _pod_delete_404s(kube)
    for name in names:
        kube.core.delete_namespaced_pod(name, namespace)
    wait_for(
        lambda: not kube.core.list_namespaced_pod(namespace).items,
        timeout=60,
        what="the pods to be gone",
    )
    time.sleep(2)  # the node acts on the deletion's watch events, which may lag
    # Fewer than one per Pod: the counter is cluster-wide, so a stray 404 elsewhere is tolerated.
    assert _pod_delete_404s(kube) - before < len(names)
