"""The node is a real kubelet with a real container runtime: what users' pods get from it.

Pod-level behaviour that no emulation can vouch for: the project's own images, each
pod's own address, ClusterIP Services through kube-proxy, exec and port-forward, the
kernel's memory limit. Written against the Kubernetes API and kubectl, so it runs on
kind too; the checks of this machine's own rules (the service-range guard) run only on
the local cluster.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import kinetic
import pytest
from kinetic.model import names
from kube_helpers import Kube, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

BUSYBOX = "busybox:1.36"
KINETIC = str(Path(sys.executable).parent / "kinetic")
RESTRICTED = client.V1SecurityContext(
    run_as_non_root=True,
    run_as_user=65532,
    allow_privilege_escalation=False,
    capabilities=client.V1Capabilities(drop=["ALL"]),
)


def pod(name: str, script: str, image: str = BUSYBOX, **spec_kw: object) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    command=["sh", "-c", script],
                    security_context=RESTRICTED,
                )
            ],
            **spec_kw,  # type: ignore[arg-type]
        ),
    )


def running(kube: Kube, ns: str, name: str) -> client.V1Pod | None:
    p = kube.core.read_namespaced_pod(name, ns)
    ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    return p if p.status.phase == "Running" and ready else None


def termination_message(kube: Kube, ns: str, name: str) -> str | None:
    p = kube.core.read_namespaced_pod(name, ns)
    if p.status.phase not in ("Succeeded", "Failed"):
        return None
    return p.status.container_statuses[0].state.terminated.message or ""


def ended(kube: Kube, kind: str, ns: str, name: str, timeout: float = 180) -> dict:
    """The status of a KineticJob (kj) or KineticBatch (kb) once it has ended."""

    def done() -> dict | None:
        got = json.loads(kube.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)
        status = got.get("status") or {}
        return status if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    return wait_for(done, timeout, what=f"{kind}/{name} to end")  # type: ignore[return-value]


# A web server of busybox's, serving one page on 8080 as a non-root user.
SERVE = (
    "mkdir -p /tmp/www && echo hello-from-$HOSTNAME > /tmp/www/index.html"
    " && exec httpd -f -p 8080 -h /tmp/www"
)


def test_the_node_is_a_kubelet_on_a_container_runtime(kube: Kube) -> None:
    nodes = kube.core.list_node().items
    assert nodes, "no node registered"
    for node in nodes:
        runtime = node.status.node_info.container_runtime_version
        assert runtime.startswith(("containerd://", "docker://", "cri-o://")), runtime
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert not any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])


def test_the_operator_runs_from_its_image_as_a_non_root_user(kube: Kube, operator: None) -> None:
    pods = kube.core.list_namespaced_pod(
        "kinetic-system", label_selector="app.kubernetes.io/name=kinetic"
    ).items
    live = [p for p in pods if p.status.phase == "Running"]
    assert live, [p.metadata.name for p in pods]
    (status,) = [s for s in live[0].status.container_statuses if s.name == "operator"]
    assert "kinetic-operator" in status.image and status.image_id, status
    assert live[0].spec.security_context.run_as_user == 65532
    # Nothing of this machine's is mounted into it: only its token, /tmp and the
    # webhook's certificate.
    mounts = {m.mount_path for m in live[0].spec.containers[0].volume_mounts}
    assert mounts <= {
        "/tmp",
        "/etc/kinetic/webhook",
        "/var/run/secrets/kubernetes.io/serviceaccount",
    }, mounts


def test_a_function_runs_in_its_own_pod_with_the_clients_python(
    client_env: dict[str, str], namespace: str
) -> None:
    @kinetic.run(namespace=namespace)
    def where() -> dict[str, object]:
        import os
        import socket
        import sys as s

        return {
            "host": socket.gethostname(),
            "uid": os.getuid(),
            "python": list(s.version_info[:2]),
            "pod": os.environ.get("KINETIC_JOB_NAME"),
        }

    job = where.run_async()
    got = job.result(timeout=180)
    assert got["host"] == names.job_pod_name(job.job_id, 1)  # the attempt's Pod, not this machine
    assert got["uid"] == 65532
    assert got["python"] == list(sys.version_info[:2])


def test_pods_have_their_own_addresses_and_services_route_to_them(
    kube: Kube, namespace: str
) -> None:
    core = kube.core
    core.create_namespaced_pod(namespace, pod("server", SERVE))
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                selector={"app": "server"},
                ports=[client.V1ServicePort(port=80, target_port=8080)],
            ),
        ),
    )
    server = wait_for(lambda: running(kube, namespace, "server"), 120, what="the server Pod")
    cluster_ip = core.read_namespaced_service("web", namespace).spec.cluster_ip
    wait_for(
        lambda: (
            (e := core.read_namespaced_endpoints("web", namespace)).subsets
            and e.subsets[0].addresses
        ),
        60,
        what="the Service's endpoint",
    )
    # One client pod asks the server by its ClusterIP (kube-proxy's NAT) and by its
    # pod address, and reports its own address. (Debian's busybox wget crashes with -T:
    # `timeout` bounds it instead.)
    script = (
        f"a=$(timeout 10 wget -q -O- http://{cluster_ip}/); "
        f"b=$(timeout 10 wget -q -O- http://{server.status.pod_ip}:8080/); "
        'echo "$a|$b|$(hostname -i)" > /dev/termination-log'
    )
    core.create_namespaced_pod(namespace, pod("client", script))
    message = wait_for(
        lambda: termination_message(kube, namespace, "client"), 120, what="the client Pod"
    )
    via_service, direct, own = str(message).strip().split("|")
    assert via_service == direct == "hello-from-server"
    assert own != server.status.pod_ip
    host_ip = ipaddress.ip_address(server.status.host_ip)
    assert (
        ipaddress.ip_address(own) != host_ip
        and ipaddress.ip_address(server.status.pod_ip) != host_ip
    )


def test_exec_and_port_forward_reach_the_container(kube: Kube, namespace: str) -> None:
    kube.core.create_namespaced_pod(namespace, pod("web", SERVE))
    wait_for(lambda: running(kube, namespace, "web"), 120, what="the web Pod")
    out = kube.kubectl(
        "exec", "-n", namespace, "web", "--", "sh", "-c", "id -u; cat /tmp/www/index.html"
    )
    assert out.stdout.split() == ["65532", "hello-from-web"]
    forward = subprocess.Popen(
        [
            "kubectl",
            "--kubeconfig",
            kube.kubeconfig,
            "port-forward",
            "-n",
            namespace,
            "pod/web",
            ":8080",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()  # "Forwarding from 127.0.0.1:NNNNN -> 8080"
        port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.read().decode().strip() == "hello-from-web"
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def test_an_address_in_the_service_range_that_nothing_serves_is_refused_here(
    kube: Kube, namespace: str
) -> None:
    """The guard: a packet to the service range that kube-proxy did not translate is
    rejected on this machine at once, never routed out (it would hang until a timeout
    if it left, or reach whatever owns that private address elsewhere)."""
    if not kube.is_local:
        pytest.skip("the service-range guard is the local cluster's rule")
    from kinetic_dev.config import LocalConfig

    net = ipaddress.ip_network(LocalConfig().service_cidr)
    used = {s.spec.cluster_ip for s in kube.core.list_service_for_all_namespaces().items}
    unused = next(str(a) for a in reversed(list(net.hosts())) if str(a) not in used)
    script = (
        f"start=$(date +%s); timeout 20 wget -q -O- http://{unused}:80/ 2>&1; rc=$?; "
        'echo "$rc $(( $(date +%s) - start ))" > /dev/termination-log'
    )
    kube.core.create_namespaced_pod(namespace, pod("probe", script))
    message = wait_for(
        lambda: termination_message(kube, namespace, "probe"), 120, what="the probe Pod"
    )
    rc, seconds = (int(x) for x in str(message).split())
    assert rc != 0 and seconds < 5, message  # refused at once, no 20 s timeout


def test_pods_coming_and_going_never_change_the_gateways_address(
    kube: Kube, namespace: str
) -> None:
    """The bridge keeps an address of its own. Left to follow its ports' lowest, it
    changed as Pods came and went, and a running Pod's connections to the node (storage,
    DNS) stalled for seconds until it learnt the new one."""
    if not kube.is_local:
        pytest.skip("the bridge is the local cluster's")
    from kinetic_dev import network
    from kinetic_dev.config import LocalConfig

    cfg = LocalConfig()
    fixed = network.bridge_mac(cfg.bridge)
    # Each Pod reaches the node (the storage emulator's port), then reports the address
    # its neighbour table holds for the gateway; the second starts while the first runs.
    script = (
        f"timeout 5 wget -q -O- http://{cfg.node_ip}:4443/ >/dev/null 2>&1; "
        f"grep '^{cfg.node_ip} ' /proc/net/arp > /dev/termination-log; sleep 2"
    )
    kube.core.create_namespaced_pod(namespace, pod("first", script))
    wait_for(lambda: running(kube, namespace, "first"), 120, what="the first Pod")
    kube.core.create_namespaced_pod(namespace, pod("second", script))
    seen = [
        str(wait_for(lambda n=n: termination_message(kube, namespace, n), 120, what=n)).split()
        for n in ("first", "second")
    ]
    assert [fields[3] for fields in seen] == [fixed, fixed], seen
    link = subprocess.run(
        ["ip", "-o", "link", "show", cfg.bridge], capture_output=True, text=True, check=True
    ).stdout
    assert f"link/ether {fixed} " in link, link


def test_a_job_over_its_memory_limit_is_oom_killed_and_charged_to_retries(
    kube: Kube, namespace: str, client_env: dict[str, str]
) -> None:
    job = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "hog"},
        "spec": {
            "image": f"python:{sys.version_info.major}.{sys.version_info.minor}-slim",
            "container": {
                "command": ["python", "-c", "x = bytearray(512 * 1024 * 1024); print(len(x))"]
            },
            "resources": {"memory": "64Mi"},
            "retries": 1,
        },
    }
    kube.apply(namespace, job)
    status = ended(kube, "kj", namespace, "hog")
    assert status["phase"] == "FAILED"
    attempts = status["attempts"]
    assert [a["reason"] for a in attempts] == ["OOMKilled", "OOMKilled"], attempts
    assert "OOMKilled" in status["message"] and "after 1 retries" in status["message"]
    shown = subprocess.run(
        [KINETIC, "jobs", "status", "hog", "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env=client_env,
    )
    assert "OOMKilled" in shown.stdout, shown.stdout + shown.stderr


def test_an_image_that_exists_nowhere_fails_after_its_retries_and_says_so(
    kube: Kube, namespace: str, client_env: dict[str, str]
) -> None:
    """A pull that can never work is a failure of the attempt, charged to ``retries``, in a
    batch input and in a KineticJob alike (it was once turned into free disruptions, so a
    job with ``retries: 1`` never ended), and its Pods do not linger Terminating."""
    nowhere = "kinetic.invalid/nowhere:1"
    batch = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {"name": "grp-0badbeef"},
        "spec": {
            "jobs": [
                {"container": {"image": BUSYBOX, "command": ["true"]}},
                {"container": {"image": nowhere, "command": ["true"]}, "retries": 1},
            ],
        },
    }
    job = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "noimg"},
        "spec": {"container": {"image": nowhere, "command": ["true"]}, "retries": 1},
    }
    kube.apply(namespace, batch)
    kube.apply(namespace, job)
    t0 = time.monotonic()
    status = ended(kube, "kb", namespace, "grp-0badbeef")
    assert status["phase"] == "FAILED" and status["counts"]["succeeded"] == 1
    assert time.monotonic() - t0 < 150
    events = kube.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "ErrImagePull" in events or "ImagePullBackOff" in events
    # The input's own status (its handle: the manifest's record) names the kubelet's reason
    # and shows both attempts.
    report = subprocess.run(
        [KINETIC, "jobs", "status", "grp-0badbeef-1", "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env=client_env,
    )
    assert re.search("ErrImagePull|ImagePullBackOff", report.stdout), report.stdout
    pulls = ("ErrImagePull", "ImagePullBackOff")
    job_status = ended(kube, "kj", namespace, "noimg")
    assert job_status["phase"] == "FAILED" and job_status["attempt"] == 2, job_status
    assert (job_status.get("failures"), job_status.get("disruptions", 0)) == (2, 0), job_status
    assert [a["outcome"] for a in job_status["attempts"]] == ["failure", "failure"]
    assert all(a["reason"] in pulls for a in job_status["attempts"]), job_status["attempts"]
    assert "after 1 retries" in job_status["message"], job_status["message"]
    # Pods whose container never started are deleted at once, not left Terminating.
    pods = kube.core.list_namespaced_pod(namespace).items
    lingering = [p.metadata.name for p in pods if p.metadata.deletion_timestamp]
    assert lingering == [], lingering
    assert not [p for p in pods if p.metadata.name.startswith(("noimg-", "grp-0badbeef-1-"))]
