"""Where the local cluster keeps its state, which ports and addresses it uses.

Every value can be overridden by an environment variable so a clash with
something else on the machine can be handled without code changes.

Addresses: the node's pods live on a bridge of their own (``KINETIC_POD_CIDR``,
10.244.0.0/24 by default). Its first address is the node's address: the API
server, the kubelet and fake-gcs-server listen there, so pods reach them
without anything of this machine's being exposed on its real interfaces.
ClusterIP Services come from ``KINETIC_SERVICE_CIDR`` (10.0.0.0/24). The
cluster's DNS server answers on the node's address for ``KINETIC_CLUSTER_DOMAIN``
(cluster.local).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

NODE_NAME = "kinetic-node"
BUCKET = "kinetic"
BRIDGE = "kinetic0"
CLUSTER_DOMAIN = "cluster.local"


def _find_repo_root(start: Path) -> Path | None:
    for p in [start, *start.parents]:
        if (p / "pyproject.toml").exists() and (p / "client").is_dir():
            return p
    return None


def default_state_dir() -> Path:
    """``$KINETIC_LOCAL_DIR``, else ``<repo>/.local`` (repo found from cwd, then this file)."""
    env = os.environ.get("KINETIC_LOCAL_DIR")
    if env:
        return Path(env).expanduser().resolve()
    root = _find_repo_root(Path.cwd().resolve()) or _find_repo_root(Path(__file__).resolve())
    if root is None:
        return (Path.cwd() / ".local").resolve()
    return root / ".local"


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass(frozen=True)
class Ports:
    etcd_client: int = field(default_factory=lambda: _port("KINETIC_ETCD_PORT", 12379))
    etcd_peer: int = field(default_factory=lambda: _port("KINETIC_ETCD_PEER_PORT", 12380))
    apiserver: int = field(default_factory=lambda: _port("KINETIC_APISERVER_PORT", 6443))
    controller_manager: int = field(default_factory=lambda: _port("KINETIC_KCM_PORT", 10257))
    scheduler: int = field(default_factory=lambda: _port("KINETIC_SCHEDULER_PORT", 10259))
    node: int = field(default_factory=lambda: _port("KINETIC_NODE_PORT", 10250))
    gcs: int = field(default_factory=lambda: _port("KINETIC_GCS_PORT", 4443))
    registry: int = field(default_factory=lambda: _port("KINETIC_REGISTRY_PORT", 5000))
    kubelet_healthz: int = field(
        default_factory=lambda: _port("KINETIC_KUBELET_HEALTHZ_PORT", 10248)
    )
    proxy_healthz: int = field(default_factory=lambda: _port("KINETIC_PROXY_HEALTHZ_PORT", 10256))
    proxy_metrics: int = field(default_factory=lambda: _port("KINETIC_PROXY_METRICS_PORT", 10249))


@dataclass(frozen=True)
class LocalConfig:
    """Paths and ports of one local cluster."""

    state_dir: Path = field(default_factory=default_state_dir)
    ports: Ports = field(default_factory=Ports)
    node_name: str = field(default_factory=lambda: os.environ.get("KINETIC_NODE_NAME", NODE_NAME))
    bucket: str = BUCKET
    pod_cidr: str = field(
        default_factory=lambda: os.environ.get("KINETIC_POD_CIDR", "10.244.0.0/24")
    )
    service_cidr: str = field(
        default_factory=lambda: os.environ.get("KINETIC_SERVICE_CIDR", "10.0.0.0/24")
    )
    bridge: str = field(default_factory=lambda: os.environ.get("KINETIC_BRIDGE", BRIDGE))
    cluster_domain: str = field(
        default_factory=lambda: os.environ.get("KINETIC_CLUSTER_DOMAIN", CLUSTER_DOMAIN)
    )

    @property
    def node_ip(self) -> str:
        """The bridge's own address: where pods reach the control plane and storage."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def service_ip(self) -> str:
        """The `kubernetes` Service's ClusterIP (the range's first address)."""
        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))

    @property
    def tag(self) -> str:
        """Short and unique to this state dir: names what two clusters on one machine
        must not share (sockets, cgroups, iptables chains)."""
        return hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]

    @property
    def run_root(self) -> Path:
        """Sockets and runtime state: short (unix socket paths are limited to 107 bytes),
        on tmpfs where there is one."""
        base = Path("/run") if os.access("/run", os.W_OK) else Path("/tmp")
        return base / f"kinetic-{self.tag}"

    @property
    def dns_dir(self) -> Path:
        """The hosts file the cluster's DNS server reads (`clusterdns`), on tmpfs."""
        return self.run_root / "dns"

    @property
    def cgroup_root(self) -> str:
        """Every pod's cgroup sits under /<this> in each hierarchy."""
        return f"kinetic-{self.tag}"

    @property
    def containerd_socket(self) -> Path:
        return self.run_root / "containerd.sock"

    @property
    def docker_socket(self) -> Path:
        return self.run_root / "docker.sock"

    @property
    def containerd_dir(self) -> Path:
        return self.state_dir / "containerd"

    @property
    def kubelet_dir(self) -> Path:
        return self.state_dir / "kubelet"

    @property
    def cni_dir(self) -> Path:
        """CNI configuration and the IP allocations of the node's pods."""
        return self.state_dir / "cni"

    @property
    def images_dir(self) -> Path:
        """Build stamps and the wheelhouse of the images this checkout builds."""
        return self.state_dir / "images"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def audit_log(self) -> Path:
        """The API server's audit of Pod and Lease writes (`cluster.AUDIT_POLICY`)."""
        return self.logs_dir / "audit.log"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def etcd_dir(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def gcs_dir(self) -> Path:
        return self.state_dir / "gcs"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client cert in group system:masters)."""
        return self.state_dir / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.state_dir / "kubeconfigs" / f"{component}.kubeconfig"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env"

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.node_ip}:{self.ports.apiserver}"

    @property
    def storage_emulator_host(self) -> str:
        return f"http://{self.node_ip}:{self.ports.gcs}"

    @property
    def storage_root(self) -> str:
        return f"gs://{self.bucket}"

    def env(self) -> dict[str, str]:
        """The variables written to ``.local/env`` and given to everything started."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "STORAGE_EMULATOR_HOST": self.storage_emulator_host,
            "KINETIC_STORAGE_ROOT": self.storage_root,
            "KINETIC_LOCAL_DIR": str(self.state_dir),
        }
