"""`kinetic local up` on bad input: a busy port or a missing prerequisite is named, no hang.

Each case uses its own state dir, fresh ports, its own bridge and pod range, so it never
touches a running cluster (whose cgroups and iptables chains are named by its state dir).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

KINETIC = str(Path(sys.executable).parent / "kinetic")
PORT_VARS = (
    "KINETIC_ETCD_PORT",
    "KINETIC_ETCD_PEER_PORT",
    "KINETIC_APISERVER_PORT",
    "KINETIC_KCM_PORT",
    "KINETIC_SCHEDULER_PORT",
    "KINETIC_NODE_PORT",
    "KINETIC_GCS_PORT",
    "KINETIC_REGISTRY_PORT",
    "KINETIC_KUBELET_HEALTHZ_PORT",
    "KINETIC_PROXY_HEALTHZ_PORT",
    "KINETIC_PROXY_METRICS_PORT",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def isolated_env(tmp_path):
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env["KINETIC_LOCAL_DIR"] = str(tmp_path / "state")
    for var in PORT_VARS:
        env[var] = str(free_port())
    env["KINETIC_BRIDGE"] = "kinetic-test"
    env["KINETIC_POD_CIDR"] = "10.245.7.0/24"
    env["KINETIC_SERVICE_CIDR"] = "10.245.8.0/24"
    yield env
    subprocess.run([KINETIC, "local", "down"], env=env, capture_output=True, timeout=120)


def run_up(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KINETIC, "local", "up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_port_in_use_is_reported_with_component(isolated_env):
    if not shutil.which("etcd"):
        pytest.skip("etcd not installed")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        isolated_env["KINETIC_ETCD_PORT"] = str(port)
        res = run_up(isolated_env)
    assert res.returncode == 1
    assert f"port {port} needed by etcd is already in use" in res.stderr
    assert "KINETIC_ETCD_PORT" in res.stderr


def test_missing_etcd_names_the_package(isolated_env):
    isolated_env["PATH"] = str(Path(sys.executable).parent)
    res = run_up(isolated_env)
    assert res.returncode == 1
    assert "etcd not found" in res.stderr and "apt-get install -y etcd-server" in res.stderr


def test_incomplete_kubebuilder_assets_are_named(isolated_env, tmp_path):
    if not shutil.which("etcd") or not shutil.which("kubectl"):
        pytest.skip("etcd/kubectl not installed")
    (tmp_path / "assets").mkdir()
    isolated_env["KUBEBUILDER_ASSETS"] = str(tmp_path / "assets")
    res = run_up(isolated_env)
    assert res.returncode == 1
    assert "lacks kube-apiserver" in res.stderr
