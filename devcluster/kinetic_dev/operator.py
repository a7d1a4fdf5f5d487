"""Run the operator on the local cluster exactly as a user installs it: the Helm chart.

The chart is installed with the real Helm library (helm-sdkpy): CRDs,
ServiceAccount, least-privilege RBAC, settings, the Service in front of the
admission webhook and the operator's Deployment, whose Pod runs the operator
image built from this checkout (``images.py``) on the real node. The local
install sets what a user's would: the images, the storage root, the storage
emulator's address for job pods, and the package index settings this
machine's pip uses (so requirements install in pods as they do here).

After code changes, `kinetic local up` rebuilds the images whose sources
changed and upgrades the release with their new tags, which rolls the
Deployment.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

from kinetic_dev import pipconfig, runtime
from kinetic_dev.config import LocalConfig
from kinetic_dev.images import Built
from kinetic_dev.procs import ClusterError

RELEASE = "kinetic"
NAMESPACE = "kinetic-system"
SERVICE_ACCOUNT = "kinetic-operator"
SETTINGS_CONFIGMAP = "kinetic-operator-settings"
WEBHOOK_CONFIG = "kinetic.dev"  # the ValidatingWebhookConfiguration the operator patches


WEBHOOK_PORT = 9443  # the chart's default: each Pod has its own address now


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
# A cancelled container job whose shell ignores SIGTERM (process 1 in its container)
# holds its Pod this long; the chart's default is 30 s, a test suite's patience less.
LOCAL_POD_GRACE_SECONDS = 5


# How this node's function batches are cut into units (the chart's `units` values). The
# local cluster is one node of few cores that also runs the control plane, where a Pod's
# start costs the node as much as several short inputs: fewer Pods starting at once, each
# given more work, finish sooner there (bench/UNITS.md, the small-node settings); the
# chart's defaults suit roomier nodes.
LOCAL_UNIT_SIZING = {"firstInputs": 8, "minSeconds": 5, "startsAtOnce": 2}

DEPLOYMENT = "kinetic-operator"
POD_SELECTOR = f"app.kubernetes.io/name=kinetic,app.kubernetes.io/instance={RELEASE}"


def chart_values(cfg: LocalConfig, built: Built | None = None) -> dict:
    """What the local install sets: the images built here, this cluster's storage, the
    package index this machine's pip uses. Everything else is the chart's default."""
    values: dict = {
        "storageRoot": cfg.storage_root,
        "storageEmulatorHost": cfg.storage_emulator_host,
        "podTTLSeconds": LOCAL_POD_TTL_SECONDS,
        "podGracePeriodSeconds": LOCAL_POD_GRACE_SECONDS,
        # The chart's default, said here since the local cluster has DNS only of its own
        # (`clusterdns`): members reach rank 0 by name under their gang's headless Service.
        "gangs": {"rendezvous": "dns"},
        "clusterDomain": cfg.cluster_domain,  # the fully qualified names members dial
        "units": LOCAL_UNIT_SIZING,
        "packageIndex": pipconfig.package_index(),
    }
    if built is not None:
        repository, tag = built.operator_image.rsplit(":", 1)
        values["image"] = {"repository": repository, "tag": tag}
        values["runnerImage"] = {
            "repository": built.runner_repository,
            "tag": built.runner_tag,
            "pythonVersions": [built.python],
        }
    return values


def install_chart(cfg: LocalConfig, repo_root: Path, built: Built | None = None) -> bool:
    """Install or upgrade the chart; a no-op when neither it nor its values changed.

    Returns True when Helm ran. CRDs are also applied every time, because Helm
    installs a chart's crds/ only on first install and never upgrades them.
    """
    chart = chart_dir(repo_root)
    values = chart_values(cfg, built)
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
    (cfg.run_dir / "chart-values.json").write_text(json.dumps(values, indent=1))
    return True


def installed_values(cfg: LocalConfig) -> dict:
    """The values of the last local install (images included), for tests that upgrade
    the release and must put it back as it was."""
    return json.loads((cfg.run_dir / "chart-values.json").read_text())


LEADER_LEASE = "kinetic-operator-leader"  # kinetic.model.names.LEADER_LEASE (no client here)
LEADER_ELECTION_FLAG = "--leader-election"  # kinetic.model.names.LEADER_ELECTION_FLAG


def operator_pods(cfg: LocalConfig) -> list[dict]:
    """The Deployment's live Pods (not being deleted, not finished), newest first."""
    pods = _get_json(cfg, "get", "pods", "-n", NAMESPACE, "-l", POD_SELECTOR).get("items") or []
    live = [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    live.sort(key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)
    return live


def leader_holder(cfg: LocalConfig) -> str:
    """The leader Lease's holderIdentity ("<pod>_<process>"; empty when released or absent)."""
    got = _kubectl(cfg, "get", "lease", LEADER_LEASE, "-n", NAMESPACE, "-o", "json", check=False)
    if not got.strip():
        return ""
    return (json.loads(got).get("spec") or {}).get("holderIdentity") or ""


def operator_pod(cfg: LocalConfig) -> dict | None:
    """The operator Pod that reconciles: the leader Lease's holder's, else the newest."""
    live = operator_pods(cfg)
    pod_name = leader_holder(cfg).rpartition("_")[0]
    leaders = [p for p in live if p["metadata"]["name"] == pod_name]
    found = leaders or live
    return found[0] if found else None


def elected(cfg: LocalConfig) -> bool:
    """Whether the installed Deployment runs the operator with leader election."""
    return runs_elected(_get_json(cfg, "get", "deployment", DEPLOYMENT, "-n", NAMESPACE))


def runs_elected(deployment: dict) -> bool:
    """Whether this Deployment, as read, runs the operator with leader election."""
    template = (deployment.get("spec") or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    return any(LEADER_ELECTION_FLAG in (c.get("command") or []) for c in containers)


def pod_ready(pod: dict | None) -> bool:
    conds = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def container_pid(cfg: LocalConfig, pod: dict | None, container: str = "operator") -> int | None:
    """The host pid of a running container's main process (the operator's by default),
    from its ``containerd://<id>`` and the runtime's task list."""
    for st in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        cid = st.get("containerID") or ""
        if st.get("name") == container and "running" in (st.get("state") or {}):
            return task_pids(cfg).get(cid.removeprefix("containerd://"))
    return None


def task_pids(cfg: LocalConfig) -> dict[str, int]:
    """Container id -> host pid of every running task on the node."""
    binary = shutil.which("ctr") or "/usr/bin/ctr"
    proc = subprocess.run(
        runtime.ctr_command(cfg, binary, "tasks", "ls"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    pids = {}
    for line in proc.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "RUNNING" and parts[1].isdigit():
            pids[parts[0]] = int(parts[1])
    return pids


def ready(cfg: LocalConfig) -> bool:
    """The Deployment's rollout is complete (every replica it asks for is of its current
    template and Ready: Kopf's /healthz answers; no Pod of an older template is left)
    and, with the admission webhook on, each serves a certificate the cluster's webhook
    configuration trusts (before that, `kubectl apply` would skip the webhook: it fails
    open); with leader election, one of them holds the Lease."""
    deployment = _get_json(cfg, "get", "deployment", DEPLOYMENT, "-n", NAMESPACE)
    if not rolled_out(deployment):
        return False
    live = [p for p in operator_pods(cfg) if pod_ready(p)]
    if webhook_enabled(_settings_data(cfg)) and not all(
        webhook_ready(cfg, p["status"]["podIP"]) for p in live
    ):
        return False
    if not runs_elected(deployment):
        return True
    holder = leader_holder(cfg).rpartition("_")[0]
    return any(p["metadata"]["name"] == holder for p in live)


def rolled_out(deployment: dict) -> bool:
    """What `kubectl rollout status` waits for: the controller saw the latest spec, and
    all of its replicas, and only they, are updated and ready."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    meta = deployment.get("metadata") or {}
    return (
        int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
        and int(status.get("updatedReplicas") or 0) == wanted
        and int(status.get("replicas") or 0) == wanted
        and int(status.get("readyReplicas") or 0) == wanted
    )


def stuck(cfg: LocalConfig) -> bool:
    """The Pod's container ended or waits out a crash back-off (not merely starting)."""
    pod = operator_pod(cfg)
    if pod is None:
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for st in statuses:
        state = st.get("state") or {}
        reason = (state.get("waiting") or {}).get("reason", "")
        if "terminated" in state or reason in (
            "CrashLoopBackOff",
            "ErrImagePull",
            "ImagePullBackOff",
        ):
            return True
    return False


def restart(cfg: LocalConfig) -> None:
    """Replace the Pod, as `kubectl delete pod` would: the Deployment starts a fresh one."""
    _kubectl(cfg, "delete", "pods", "-n", NAMESPACE, "-l", POD_SELECTOR, "--wait=false")


def remove_finished_pods(cfg: LocalConfig) -> None:
    """Pods the node failed when it stopped: the Deployment has replaced them already."""
    _kubectl(
        cfg,
        "delete",
        "pods",
        "-n",
        NAMESPACE,
        "-l",
        POD_SELECTOR,
        "--field-selector=status.phase=Failed",
        "--wait=false",
        check=False,
    )


def webhook_ready(cfg: LocalConfig, pod_ip: str) -> bool:
    """The Pod serves TLS on the webhook port, and a client that trusts only the
    configuration's CA bundle and expects the Service's name accepts it — the check the
    API server makes. (An operator run by hand serves a self-signed certificate that is
    its own bundle, so the same check holds.)"""
    out = _kubectl(cfg, "get", "validatingwebhookconfiguration", WEBHOOK_CONFIG, "-o", "json")
    for hook in json.loads(out).get("webhooks") or []:
        client = hook.get("clientConfig") or {}
        bundle = base64.b64decode(client.get("caBundle") or "").decode(errors="replace")
        service = client.get("service") or {}
        name = f"{service.get('name')}.{service.get('namespace')}.svc" if service else pod_ip
        if bundle and _trusted(pod_ip, WEBHOOK_PORT, bundle, name):
            return True
    return False


def _trusted(host: str, port: int, ca_pem: str, server_name: str) -> bool:
    ctx = ssl.create_default_context(cadata=ca_pem)
    ctx.check_hostname = True
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            with ctx.wrap_socket(sock, server_hostname=server_name):
                return True
    except (OSError, ssl.SSLError):
        return False


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
