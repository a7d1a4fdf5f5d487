"""Run the operator on the local cluster the way a real cluster would.

The Helm chart is installed with the real Helm library (helm-sdkpy): CRDs,
ServiceAccount, least-privilege RBAC and the operator's settings. Only its
Deployment is switched off, because the process node would run the pod
without the ServiceAccount token a kubelet mounts. Instead `kopf run` is
started here as a local process with a kubeconfig holding that same
ServiceAccount's token, so the operator has exactly the chart's permissions:
an RBAC gap fails the tests here, not in a user's cluster.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from kinetic.local.config import LocalConfig
from kinetic.local.procs import ClusterError

RELEASE = "kinetic"
NAMESPACE = "kinetic-system"
SERVICE_ACCOUNT = "kinetic-operator"
SETTINGS_CONFIGMAP = "kinetic-operator-settings"


def health_port() -> int:
    return int(os.environ.get("KINETIC_OPERATOR_PORT", 18080))


def chart_dir(repo_root: Path) -> Path:
    return repo_root / "helm" / "kinetic"


def chart_values(cfg: LocalConfig) -> dict:
    return {"storageRoot": cfg.storage_root, "operator": {"enabled": False}}


def install_chart(cfg: LocalConfig, repo_root: Path) -> bool:
    """Install or upgrade the chart; a no-op when neither it nor its values changed.

    Returns True when Helm ran. CRDs are also applied every time, because Helm
    installs a chart's crds/ only on first install and never upgrades them.
    """
    chart = chart_dir(repo_root)
    values = chart_values(cfg)
    _kubectl(cfg, "apply", "-f", str(chart / "crds"))
    stamp = cfg.run_dir / "chart.sha256"
    digest = _digest(chart, values)
    if stamp.exists() and stamp.read_text() == digest and _release_exists(cfg):
        return False
    try:
        import helm_sdkpy as helm
    except ImportError as e:
        raise ClusterError(
            "the local cluster installs the Helm chart with helm-sdkpy, which needs Python 3.12+: "
            "recreate the venv with `rm -rf .venv && make venv` on a machine with python3.12"
        ) from e
    config = helm.Configuration(namespace=NAMESPACE, kubeconfig=str(cfg.kubeconfig))
    try:
        asyncio.run(
            helm.Upgrade(config).run(
                RELEASE, str(chart), values=values, install=True, create_namespace=True, wait=False
            )
        )
    except helm.HelmError as e:
        raise ClusterError(f"installing the Helm chart {chart} failed: {e}") from e
    stamp.write_text(digest)
    return True


def write_kubeconfig(cfg: LocalConfig) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount (its 1.20 token Secret)."""
    sa = _get_json(cfg, "get", "serviceaccount", SERVICE_ACCOUNT, "-n", NAMESPACE)
    secrets = [s["name"] for s in sa.get("secrets") or []]
    if not secrets:
        raise ClusterError(f"ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT} has no token yet")
    secret = _get_json(cfg, "get", "secret", secrets[0], "-n", NAMESPACE)
    token = base64.b64decode(secret["data"]["token"]).decode()
    path = cfg.component_kubeconfig("operator")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "kinetic-local",
                        "cluster": {
                            "server": cfg.apiserver_url,
                            "certificate-authority": str(cfg.pki_dir / "ca.crt"),
                        },
                    }
                ],
                "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "operator",
                        "context": {"cluster": "kinetic-local", "user": SERVICE_ACCOUNT},
                    }
                ],
                "current-context": "operator",
            },
            indent=2,
        )
    )
    os.chmod(path, 0o600)
    return path


def env(cfg: LocalConfig, base: dict[str, str]) -> dict[str, str]:
    """The operator's environment: the chart's settings, as the Deployment would get them."""
    settings = _get_json(cfg, "get", "configmap", SETTINGS_CONFIGMAP, "-n", NAMESPACE)
    return {
        **base,
        **(settings.get("data") or {}),
        "KUBECONFIG": str(cfg.component_kubeconfig("operator")),
        "STORAGE_EMULATOR_HOST": cfg.storage_emulator_host,
        "PYTHONUNBUFFERED": "1",
    }


def argv() -> list[str]:
    kopf = Path(sys.executable).with_name("kopf")
    return [
        str(kopf),
        "run",
        "--standalone",
        "--all-namespaces",
        f"--liveness=http://127.0.0.1:{health_port()}/healthz",
        "-m",
        "kinetic_operator.main",
    ]


def ready() -> bool:
    """Kopf's liveness endpoint answers once the operator has started watching."""
    url = f"http://127.0.0.1:{health_port()}/healthz"
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status == 200


def _release_exists(cfg: LocalConfig) -> bool:
    out = _kubectl(
        cfg,
        "get",
        "secrets",
        "-n",
        NAMESPACE,
        "-l",
        f"owner=helm,name={RELEASE},status=deployed",
        "-o",
        "name",
        check=False,
    )
    return bool(out.strip())


def _digest(chart: Path, values: dict) -> str:
    h = hashlib.sha256(json.dumps(values, sort_keys=True).encode())
    for path in sorted(p for p in chart.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(chart)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _get_json(cfg: LocalConfig, *args: str) -> dict:
    return json.loads(_kubectl(cfg, *args, "-o", "json"))


def _kubectl(cfg: LocalConfig, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(cfg.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and proc.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout
