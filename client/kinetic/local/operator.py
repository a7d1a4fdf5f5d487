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
import socket
import ssl
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
WEBHOOK_CONFIG = "kinetic.dev"  # the ValidatingWebhookConfiguration the operator manages


def health_port() -> int:
    return int(os.environ.get("KINETIC_OPERATOR_PORT", 18080))


def webhook_port() -> int:
    """Where the local operator serves its admission webhook (the API server calls it here)."""
    return int(os.environ.get("KINETIC_WEBHOOK_PORT", 18443))


def metrics_port() -> int:
    """Where the local operator serves Prometheus metrics."""
    return int(os.environ.get("KINETIC_METRICS_PORT", 18090))


def webhook_enabled(settings: dict[str, str] | None = None) -> bool:
    """KINETIC_WEBHOOK_ENABLED from the environment, else the chart's settings, else on."""
    value = os.environ.get("KINETIC_WEBHOOK_ENABLED")
    if value is None:
        value = (settings or {}).get("KINETIC_WEBHOOK_ENABLED", "true")
    return value.strip().lower() not in ("0", "false", "no", "off", "")


def chart_dir(repo_root: Path) -> Path:
    return repo_root / "helm" / "kinetic"


# Finished attempt Pods are kept this long on the local cluster (the chart's default
# is two minutes): long enough to look at, short enough for tests to see the archive.
LOCAL_POD_TTL_SECONDS = 20


def chart_values(cfg: LocalConfig) -> dict:
    return {
        "storageRoot": cfg.storage_root,
        "operator": {"enabled": False},
        "podTTLSeconds": LOCAL_POD_TTL_SECONDS,
    }


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
                RELEASE,
                str(chart),
                values=values,
                install=True,
                create_namespace=True,
                wait=False,
                # Adopt the webhook configuration an older operator created itself.
                take_ownership=True,
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
    data = _settings_data(cfg)
    return {
        **base,
        **data,
        # The API server runs on this machine: it calls the webhook on loopback.
        "KINETIC_WEBHOOK_ENABLED": "true" if webhook_enabled(data) else "false",
        "KINETIC_WEBHOOK_HOST": "127.0.0.1",
        "KINETIC_WEBHOOK_ADDR": "127.0.0.1",
        "KINETIC_WEBHOOK_PORT": str(webhook_port()),
        "KINETIC_METRICS_PORT": str(metrics_port()),
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


def ready(cfg: LocalConfig) -> bool:
    """Kopf's liveness endpoint answers once the operator has started watching.

    With the admission webhook on, the operator is also ready only once the
    webhook configuration in the cluster trusts the certificate this very
    process serves: before that, `kubectl apply` would skip the webhook (a
    stale one from a previous run fails open).
    """
    url = f"http://127.0.0.1:{health_port()}/healthz"
    with urllib.request.urlopen(url, timeout=2) as r:
        if r.status != 200:
            return False
    if not webhook_enabled(_settings_data(cfg)):
        return True
    return webhook_ready(cfg)


def webhook_ready(cfg: LocalConfig) -> bool:
    """The webhook answers TLS on its port and the cluster's configuration points at it."""
    served = _served_certificate("127.0.0.1", webhook_port())
    out = _kubectl(cfg, "get", "validatingwebhookconfiguration", WEBHOOK_CONFIG, "-o", "json")
    for hook in json.loads(out).get("webhooks") or []:
        client = hook.get("clientConfig") or {}
        if f":{webhook_port()}/" not in client.get("url", ""):
            continue
        bundle = base64.b64decode(client.get("caBundle") or "").decode(errors="replace")
        if ssl.PEM_cert_to_DER_cert(bundle) == served:
            return True
    return False


def _served_certificate(host: str, port: int) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=2) as sock:
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    if not der:
        raise ClusterError(f"the webhook on {host}:{port} presented no certificate")
    return der


def _settings_data(cfg: LocalConfig) -> dict[str, str]:
    settings = _get_json(cfg, "get", "configmap", SETTINGS_CONFIGMAP, "-n", NAMESPACE)
    return settings.get("data") or {}


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
