"""The image services: a Docker Engine that builds the images, a registry that serves them.

Both are ours (sockets, data and configuration under this cluster's folders and
the cache), so a Docker Engine already on the machine is left alone. The
engine builds only with ``--network none`` and touches no iptables rule (no
bridge, no NAT); its data root lives in the cache so layers survive
`kinetic local down --purge`. The registry (Debian's ``docker-registry``)
listens on loopback; containerd and the engine both treat it as Docker Hub.
"""

from __future__ import annotations

import http.client
import os
import socket
import urllib.request
from pathlib import Path

import yaml

from kinetic_dev.config import LocalConfig


def cache_root() -> Path:
    base = os.environ.get("KINETIC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kinetic"
    )
    return Path(base)


def dockerd_argv(dockerd: str, cfg: LocalConfig) -> list[str]:
    registry = f"127.0.0.1:{cfg.ports.registry}"
    return [
        dockerd,
        f"--host=unix://{cfg.docker_socket}",
        f"--exec-root={cfg.run_root / 'docker'}",
        f"--data-root={cache_root() / 'docker'}",
        f"--pidfile={cfg.run_root / 'dockerd.pid'}",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--bridge=none",
        f"--registry-mirror=http://{registry}",
        f"--insecure-registry={registry}",
        "--log-level=warn",
    ]


def registry_config(cfg: LocalConfig) -> dict:
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(cache_root() / "registry")},
            "delete": {"enabled": True},
        },
        "http": {"addr": f"127.0.0.1:{cfg.ports.registry}"},
    }


def registry_argv(binary: str, cfg: LocalConfig) -> list[str]:
    path = cfg.state_dir / "registry.yml"
    path.write_text(yaml.safe_dump(registry_config(cfg)))
    return [binary, "serve", str(path)]


def registry_ready(cfg: LocalConfig) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{cfg.ports.registry}/v2/", timeout=2) as r:
        return r.status == 200


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=3)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(3)
        sock.connect(self._path)
        self.sock = sock


def dockerd_ready(cfg: LocalConfig) -> bool:
    conn = _UnixConnection(str(cfg.docker_socket))
    try:
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    finally:
        conn.close()
