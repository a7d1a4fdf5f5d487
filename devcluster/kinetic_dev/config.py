"""Where the local cluster keeps its state and which ports it uses.

Every value can be overridden by an environment variable so two clusters (or a
clash with something else on the machine) can be handled without code changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

NODE_NAME = "kinetic-node"
BUCKET = "kinetic"


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


@dataclass(frozen=True)
class LocalConfig:
    """Paths and ports of one local cluster."""

    state_dir: Path = field(default_factory=default_state_dir)
    ports: Ports = field(default_factory=Ports)
    node_name: str = field(default_factory=lambda: os.environ.get("KINETIC_NODE_NAME", NODE_NAME))
    bucket: str = BUCKET

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

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
    def pods_dir(self) -> Path:
        return self.state_dir / "pods"

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
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def storage_emulator_host(self) -> str:
        return f"http://127.0.0.1:{self.ports.gcs}"

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
