"""The node's agents: the kubelet and kube-proxy, configured as files (pure; unit-tested).

Choices made for one machine that is also the control plane:

- the kubelet talks to the API server at 100 requests/s, not 5: at the
  default, Pod status writes queue behind each other and throughput is the
  kubelet's rate limit, not the machine's (a plain Job suffers the same);
- ``clusterDNS`` is the node's own address, where the cluster's DNS server
  (dnsmasq, `clusterdns`) answers for ``clusterDomain`` and forwards every
  other name to this machine's resolvers: Pods (``dnsPolicy: ClusterFirst``)
  get it in their resolv.conf, with the search path of their namespace;
- pod cgroups sit under ``/kinetic-<tag>`` so stopping the node finds them all;
- the kubelet and kube-proxy serve health and metrics on loopback only, and
  NodePorts open on the node's bridge address only.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kinetic_dev.config import LocalConfig
from kinetic_dev.pki import PKI

KUBELET_QPS = 100
MAX_PODS = 250


def kubelet_config(cfg: LocalConfig, pki: PKI) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": cfg.node_ip,
        "port": cfg.ports.node,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": cfg.ports.kubelet_healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_crt)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki.crt("node-serving")),
        "tlsPrivateKeyFile": str(pki.key("node-serving")),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cfg.cgroup_root}",
        "failSwapOn": False,
        "clusterDomain": cfg.cluster_domain,
        "clusterDNS": [cfg.node_ip],
        "resolvConf": "/etc/resolv.conf",
        "maxPods": MAX_PODS,
        "serializeImagePulls": False,
        "kubeAPIQPS": KUBELET_QPS,
        "kubeAPIBurst": 2 * KUBELET_QPS,
        "eventRecordQPS": KUBELET_QPS,
        "eventBurst": 2 * KUBELET_QPS,
        "registryPullQPS": 50,
        "registryBurst": 100,
        # A machine with a busy disk is not a reason to evict test pods.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 95,
        "imageGCLowThresholdPercent": 90,
        "containerLogMaxSize": "50Mi",
        "containerLogMaxFiles": 2,
        "runtimeRequestTimeout": "2m",
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "10s",
        "enforceNodeAllocatable": ["pods"],
        "volumeStatsAggPeriod": "0s",
    }


def kubelet_argv(binary: str, cfg: LocalConfig, config_file: Path) -> list[str]:
    return [
        binary,
        f"--config={config_file}",
        f"--kubeconfig={cfg.component_kubeconfig('node')}",
        "--container-runtime=remote",
        f"--container-runtime-endpoint=unix://{cfg.containerd_socket}",
        f"--hostname-override={cfg.node_name}",
        f"--node-ip={cfg.node_ip}",
        f"--root-dir={cfg.kubelet_dir}",
        "--v=1",
    ]


def proxy_config(cfg: LocalConfig) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "bindAddress": cfg.node_ip,
        "healthzBindAddress": f"127.0.0.1:{cfg.ports.proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{cfg.ports.proxy_metrics}",
        "clientConnection": {
            "kubeconfig": str(cfg.component_kubeconfig("kube-proxy")),
            "qps": 50,
            "burst": 100,
        },
        "clusterCIDR": cfg.pod_cidr,
        "hostnameOverride": cfg.node_name,
        "nodePortAddresses": [f"{cfg.node_ip}/32"],
        # Leave the machine's conntrack table size alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s", "masqueradeAll": False},
    }


def proxy_argv(binary: str, config_file: Path) -> list[str]:
    return [binary, f"--config={config_file}", "--v=1"]


def changed(path: Path, doc: dict) -> bool:
    """Whether ``write(path, doc)`` would change the file (a kubelet started from the old
    one runs with old settings, say a cluster DNS it did not have)."""
    return not path.exists() or path.read_text() != yaml.safe_dump(doc, sort_keys=False)


def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
