"""Cluster DNS: the names a Pod resolves, as the Kubernetes DNS specification gives them.

The first test runs the local cluster's DNS pieces on their own, on loopback
(dnsmasq on a free port, the feeder against the live API server), so it needs
only a cluster to read. The others ask from inside Pods, through whatever DNS
the cluster gives them: the local cluster's dnsmasq (`kinetic_dev.clusterdns`),
or CoreDNS on kind. Each object and name lives in a namespace of the test's own.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kinetic.model.resources import GROUP, VERSION
from kinetic_dev import clusterdns, pipconfig
from kinetic_dev.config import LocalConfig
from kube_helpers import Kube, ended_status, wait_for

pytestmark = pytest.mark.integration

DOMAIN = "cluster.local"
PYTHON = f"python:{sys.version_info.major}.{sys.version_info.minor}-slim"
BUSYBOX = "busybox:1.36"


def index_host() -> str:
    """The host pip installs from on this machine (a Pod's pip uses the same settings)."""
    url = pipconfig.package_index().get("indexUrl") or "https://pypi.org/simple"
    return urllib.parse.urlsplit(url).hostname or "pypi.org"


# --------------------------------------------------------------------------- objects


def create_service(kube: Kube, ns: str, name: str, *, headless: bool, **spec: Any) -> Any:
    body = {
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "p", "port": 29500}], **spec},
    }
    if headless:
        body["spec"]["clusterIP"] = "None"
    return kube.core.create_namespaced_service(ns, body)


def create_member(kube: Kube, ns: str, name: str, subdomain: str) -> None:
    """A Pod named under a headless Service as a gang member is, and never Ready: only a
    Service that publishes not-ready addresses names it."""
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name, "labels": {"app": "peer"}},
            "spec": {
                "hostname": name,
                "subdomain": subdomain,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": BUSYBOX,
                        "command": ["sleep", "3600"],
                        "readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 2},
                    }
                ],
            },
        },
    )


def pod_ip(kube: Kube, ns: str, name: str) -> str:
    return wait_for(  # type: ignore[return-value]
        lambda: kube.core.read_namespaced_pod(name, ns).status.pod_ip,
        timeout=120,
        what=f"Pod {name} to get an address",
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the pieces alone


@pytest.fixture
def loopback_dns(kube: Kube) -> Iterator[int]:
    """dnsmasq on 127.0.0.1:<free port> fed by the feeder from the live API server, each
    started as `kinetic local up` starts them and stopped by its own pid."""
    dnsmasq = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    assert Path(dnsmasq).exists(), "dnsmasq is missing: run `make prereqs` (dnsmasq-base)"
    work = Path(tempfile.mkdtemp(prefix="kinetic-dns-test-"))
    hosts = work / "hosts"
    clusterdns.prepare_hosts_dir(hosts)
    port = free_port()
    argv = clusterdns.dnsmasq_argv(
        dnsmasq, listen="127.0.0.1", port=port, hosts_dir=hosts, domain=DOMAIN
    )
    feeder = [
        sys.executable,
        "-m",
        "kinetic_dev.clusterdns",
        "--kubeconfig",
        kube.kubeconfig,
        "--hosts-dir",
        str(hosts),
        "--domain",
        DOMAIN,
    ]
    procs = []
    with open(work / "log", "wb") as log:
        for cmd in (argv, feeder):
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    try:
        api = kube.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
        wait_for(
            lambda: (
                clusterdns.lookup(f"kubernetes.default.svc.{DOMAIN}", "127.0.0.1", port) == [api]
            ),
            timeout=30,
            what=f"the loopback DNS server to name the API server (log: {work / 'log'})",
        )
        yield port
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def test_the_feeder_names_services_and_gang_members_as_they_come_and_go(
    kube: Kube, namespace: str, loopback_dns: int
) -> None:
    ns, port = namespace, loopback_dns

    def ask(name: str) -> list[str]:
        return clusterdns.lookup(name, "127.0.0.1", port)

    front = create_service(kube, ns, "front", headless=False).spec.cluster_ip
    create_service(
        kube, ns, "peers", headless=True, selector={"app": "peer"}, publishNotReadyAddresses=True
    )
    create_member(kube, ns, "member-0", "peers")
    ip = pod_ip(kube, ns, "member-0")

    svc = f"svc.{DOMAIN}"
    assert wait_for(lambda: ask(f"front.{ns}.{svc}") == [front], what="the ClusterIP's name")
    # A gang member: its own name under the headless Service, and the Service's name for it,
    # though it is not Ready (publishNotReadyAddresses).
    wait_for(lambda: ask(f"member-0.peers.{ns}.{svc}") == [ip], what="the member's name")
    assert ask(f"peers.{ns}.{svc}") == [ip]
    # Names under the domain that nothing defines are answered here, empty.
    assert ask(f"member-1.peers.{ns}.{svc}") == [] and ask(f"nothing.{ns}.{svc}") == []
    # Every other name goes to this machine's resolvers.
    assert ask(index_host()), f"{index_host()} did not resolve through the upstream"

    # A second member joins; the Service goes: its names go with it, the ClusterIP's stays.
    create_member(kube, ns, "member-1", "peers")
    ip1 = pod_ip(kube, ns, "member-1")
    wait_for(lambda: ask(f"member-1.peers.{ns}.{svc}") == [ip1], what="the second member")
    assert ask(f"peers.{ns}.{svc}") == sorted([ip, ip1])
    kube.kubectl("delete", "service", "peers", "-n", ns)
    wait_for(lambda: ask(f"member-0.peers.{ns}.{svc}") == [], what="the member's name to go")
    assert ask(f"peers.{ns}.{svc}") == [] and ask(f"front.{ns}.{svc}") == [front]


# --------------------------------------------------------------------------- from inside a Pod

PROBE = r"""
import json, socket, sys, time

def ips(name):
    return sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)})

DEADLINE = time.monotonic() + 90  # for every name together: a missing one fails fast

def until(name):
    while True:
        try:
            return ips(name)
        except OSError:
            if time.monotonic() > DEADLINE:
                return []
            time.sleep(0.5)

names = json.loads(sys.argv[1])
out = {name: until(name) for name in names["present"]}
out["missing"] = {}
for name in names["absent"]:
    try:
        out["missing"][name] = ips(name)
    except socket.gaierror as e:
        out["missing"][name] = e.errno == socket.EAI_NONAME
servers = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
out["nameservers"] = servers
open("/dev/termination-log", "w").write(json.dumps(out))
"""


def test_pods_resolve_services_members_and_outside_names(kube: Kube, namespace: str) -> None:
    ns = namespace
    front = create_service(kube, ns, "front", headless=False).spec.cluster_ip
    create_service(
        kube, ns, "peers", headless=True, selector={"app": "peer"}, publishNotReadyAddresses=True
    )
    create_member(kube, ns, "member-0", "peers")
    ip = pod_ip(kube, ns, "member-0")
    fqdn = f"member-0.peers.{ns}.svc.{DOMAIN}"
    names = {
        "present": [f"front.{ns}.svc.{DOMAIN}", "front", fqdn, "member-0.peers", index_host()],
        "absent": [f"member-9.peers.{ns}.svc.{DOMAIN}"],
    }
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "probe"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "probe",
                        "image": PYTHON,
                        "command": ["python", "-c", PROBE, json.dumps(names)],
                    }
                ],
            },
        },
    )
    out = json.loads(terminated_message(kube, ns, "probe"))

    assert out[f"front.{ns}.svc.{DOMAIN}"] == [front]
    assert out["front"] == [front]  # the namespace's search path, as on any cluster
    assert out[fqdn] == [ip] and out["member-0.peers"] == [ip]
    assert out[index_host()], f"{index_host()} did not resolve from the Pod"
    assert out["missing"] == {f"member-9.peers.{ns}.svc.{DOMAIN}": True}  # NXDOMAIN
    if kube.is_local:  # the node's dnsmasq, nothing else
        assert out["nameservers"] == [LocalConfig().node_ip]


def terminated_message(kube: Kube, ns: str, name: str, timeout: float = 240) -> str:
    def ended() -> str | None:
        pod = kube.core.read_namespaced_pod(name, ns)
        statuses = pod.status.container_statuses or []
        if statuses and statuses[0].state.terminated:
            assert statuses[0].state.terminated.exit_code == 0, kube.core.read_namespaced_pod_log(
                name, ns
            )
            return statuses[0].state.terminated.message or ""
        return None

    return wait_for(ended, timeout, 0.5, f"Pod {name} to end")  # type: ignore[return-value]


# Rank 1 finds rank 0 by name twice: by MASTER_ADDR as the operator gave it, and by the
# fully qualified name built from its own (the kubelet writes a member's FQDN into its
# /etc/hosts), with the gang's Service; then dials rank 0 and hands over what it found.
# Rank 0 adds what only it knows (its own address and name, who dialled it).
GANG_SCRIPT = r"""
import json, os, socket, time

def ips(name):
    return sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)})

def until(fn, seconds=180):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)

def own():
    me = socket.gethostname()
    for line in open("/etc/hosts"):
        parts = line.split()
        for name in parts[1:]:
            if name.startswith(me + ".") and parts[0].count(".") == 3:
                return parts[0], name
    raise SystemExit("the kubelet wrote no FQDN for " + me)

rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
master = os.environ["MASTER_ADDR"]
ip, fqdn = own()
if rank == 0:
    with socket.create_server(("", port)) as server:
        server.settimeout(240)
        conn, (peer, _) = server.accept()
        with conn:
            found = json.loads(conn.makefile().readline())
    found.update(rank0_ip=ip, rank0_own_fqdn=fqdn, dialled_from=peer)
    open("/dev/termination-log", "w").write(json.dumps(found))
else:
    suffix = fqdn.split(".", 1)[1]  # <subdomain>.<ns>.svc.<domain>
    rank0 = master.split(".")[0] + "." + suffix
    def both():
        got = ips(suffix)
        if len(got) < 2:
            raise OSError("not every member is named yet")
        return got
    found = {
        "master": master,
        "master_ips": until(lambda: ips(master)),
        "rank0_fqdn": rank0,
        "rank0_ips": until(lambda: ips(rank0)),
        "gang": suffix,
        "gang_ips": until(both),
        "rank1_ip": ip,
    }
    conn = until(lambda: socket.create_connection((master, port), timeout=5))
    with conn:
        conn.sendall((json.dumps(found) + "\n").encode())
"""


def test_gang_members_find_each_other_by_name(kube: Kube, namespace: str, operator: None) -> None:
    ns = namespace
    kube.apply(
        ns,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KineticJob",
            "metadata": {"name": "names"},
            "spec": {
                "hosts": 2,
                "container": {
                    "image": PYTHON,
                    "command": ["python", "-c", textwrap.dedent(GANG_SCRIPT)],
                },
            },
        },
    )
    status = ended_status(kube, "kj", ns, "names", timeout=300)
    assert status["phase"] == "SUCCEEDED", status.get("message")
    found = json.loads(status["result"])

    rank0 = found["rank0_ip"]
    # Rank 0's own name, as the kubelet wrote it, is <hostname>.<subdomain>.<ns>.svc.<domain>;
    # rank 1, which has no such line for it, resolved it to rank 0's address through DNS.
    assert found["rank0_fqdn"] == found["rank0_own_fqdn"]
    assert found["rank0_fqdn"].endswith(f".{ns}.svc.{DOMAIN}")
    assert found["rank0_ips"] == [rank0]
    # MASTER_ADDR is a name, not an address, and it names rank 0.
    with pytest.raises(ValueError):
        ipaddress.ip_address(found["master"])
    assert found["master_ips"] == [rank0]
    # The gang's headless Service names every member; rank 1 dialled from its own address.
    assert found["gang"].endswith(f".{ns}.svc.{DOMAIN}")
    assert found["gang_ips"] == sorted([rank0, found["rank1_ip"]])
    assert found["dialled_from"] == found["rank1_ip"]
