"""The local cluster: a real Kubernetes control plane and node on one machine.

`kinetic local up` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, a kubelet and kube-proxy on containerd's CRI, the real
fake-gcs-server, a local registry with the project's images, and installs the
operator with its Helm chart; state under ``<repo>/.local`` (or
``$KINETIC_LOCAL_DIR``). Tests and tools read ``.local/env`` for KUBECONFIG,
STORAGE_EMULATOR_HOST and KINETIC_STORAGE_ROOT.
"""

import os

from kinetic_dev.config import LocalConfig

__all__ = ["LocalConfig", "use_local_cluster"]


def use_local_cluster() -> bool:
    """Point this process at the local cluster, unless KUBECONFIG already names one.

    For examples and benchmarks that should run against `make cluster-up`
    with no setup. Returns False (and changes nothing) when there is no
    local cluster or the user chose another.
    """
    cfg = LocalConfig()
    if "KUBECONFIG" in os.environ or not cfg.env_file.exists():
        return False
    for key, value in cfg.env().items():
        os.environ.setdefault(key, value)
    return True
