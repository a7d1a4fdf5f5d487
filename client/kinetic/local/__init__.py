"""The local cluster: a real Kubernetes control plane on one machine, without Docker.

`kinetic local up` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, a process node (``kinetic.local.node``: runs each Pod as a local
process) and the real fake-gcs-server, all under ``<repo>/.local`` (or
``$KINETIC_LOCAL_DIR``).  Tests and tools read ``.local/env`` for KUBECONFIG,
STORAGE_EMULATOR_HOST and KINETIC_STORAGE_ROOT.
"""

from kinetic.local.config import LocalConfig

__all__ = ["LocalConfig"]
