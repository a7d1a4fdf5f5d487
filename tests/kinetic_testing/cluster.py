"""What the tests on a live cluster share: resource texts, kubectl as a user runs it,
the admission webhook and policy switches, the operator's metrics, the CLI.

Each helper is written once here; test modules import them, never each other.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kinetic.model import resources as r
from kinetic_dev.operator import NAMESPACE, POD_SELECTOR, WEBHOOK_CONFIG
from kube_helpers import Kube, leader_pod_name, wait_for
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

API = r.API_VERSION
KINETIC = str(Path(sys.executable).with_name("kinetic"))
"""The CLI of the virtualenv the tests run in."""
POLICY_CONFIGMAP = "kinetic-policy"
EFFECT_SECONDS = 10  # the promise for a policy edit to hold


# ----------------------------------------------------------------------- resources as text


def nested_json(levels: int) -> str:
    """A JSON list ``levels`` deep, as text (Python's json cannot encode it either)."""
    return "[" * levels + "1" + "]" * levels


def batch_text(name: str, inputs: str, namespace: str, template: str | None = None) -> str:
    template = template or '{"container": {"command": ["true"]}}'
    return (
        f'{{"apiVersion": "{API}", "kind": "KineticBatch", '
        f'"metadata": {{"name": "{name}", "namespace": "{namespace}"}}, '
        f'"spec": {{"template": {template}, "inputs": {inputs}}}}}'
    )


def batch_json(name: str, ns: str, n: int, **template: object) -> str:
    spec = {
        "template": {"container": {"command": ["sh", "-c", "sleep 1"]}, **template},
        "inputs": {"items": list(range(n))},
    }
    return json.dumps(
        {
            "apiVersion": API,
            "kind": "KineticBatch",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
    )


def job_json(name: str, ns: str, **spec: object) -> str:
    body = {"container": {"command": ["true"]}, **spec}
    return json.dumps(
        {
            "apiVersion": API,
            "kind": "KineticJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": body,
        }
    )


def sh(script: str, *, image: str | None = None, **extra: Any) -> dict[str, Any]:
    """A container job (or batch template) running a shell script, in ``image`` (the
    chart's default image when None); ``extra`` goes beside the container (hosts, retries)."""
    container: dict[str, Any] = {"command": ["sh", "-c", textwrap.dedent(script).strip()]}
    if image is not None:
        container["image"] = image
    return {"container": container, **extra}


# ----------------------------------------------------------------------- kubectl, as a user runs it


def kubectl_in(kube: Kube, text: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, *args, "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )


def apply_batch(kube: Kube, ns: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": r.API_VERSION, "kind": r.BATCH_KIND, "metadata": {"name": name}}
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, "apply", "-n", ns, "-f", "-"],
        input=json.dumps({**body, "spec": spec}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def read_batch(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
        r.GROUP, r.VERSION, ns, r.BATCH_PLURAL, name
    )


def wait_batch_phase(kube: Kube, ns: str, name: str, *phases: str, timeout: float = 180) -> dict:
    return wait_for(
        lambda: (s := read_batch(kube, ns, name).get("status") or {}).get("phase") in phases and s,
        timeout=timeout,
        what=f"batch {name} to reach {phases}",
    )


def submit(
    tmp_path: Path, env: dict[str, str], text: str, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess:
    path = tmp_path / "batch.yaml"
    path.write_text(text)
    return subprocess.run(
        [KINETIC, "batches", "submit", "-f", str(path), *args],
        env={**env, "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,  # no terminal
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def stored(kube: Kube, ns: str) -> list[str]:
    out = kube.kubectl("get", "kineticbatches,kineticjobs", "-n", ns, "-o", "name").stdout
    return out.split()


def service_account_kubeconfig(kube: Kube, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig that acts as ServiceAccount ``name`` (a TokenRequest token: 1.20 makes
    one as it makes the account's token Secret, and 1.24+ makes no Secret)."""
    kube.core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = wait_for(
        lambda: (
            kube.core.create_namespaced_service_account_token(name, namespace, request).status.token
        ),
        30,
        what=f"a token for {name}",
    )
    conf = kube.api.configuration
    cluster: dict[str, Any] = {"server": conf.host}
    if conf.ssl_ca_cert:
        cluster["certificate-authority"] = conf.ssl_ca_cert
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "cluster", "cluster": cluster}],
                "users": [{"name": name, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": name,
                        "context": {"cluster": "cluster", "user": name, "namespace": namespace},
                    }
                ],
                "current-context": name,
            }
        )
    )
    return path


# ----------------------------------------------------------------------- admission and policy


def refused(kube: Kube, text: str) -> str | None:
    """The webhook's refusal of a server-side dry run of ``text``, or None if admitted."""
    out = kubectl_in(kube, text, "create", "--dry-run=server")
    return out.stderr if out.returncode != 0 else None


def refused_for(kube: Kube, text: str, reason: str) -> bool:
    """Whether the webhook refuses ``text`` for ``reason`` (not for some other policy's)."""
    return reason in (refused(kube, text) or "")


def webhook_denies(kube: Kube, ns: str) -> bool:
    probe = batch_text("probe", '{"items": [' + nested_json(40) + "]}", ns)
    return kubectl_in(kube, probe, "create", "--dry-run=server").returncode != 0


@contextmanager
def webhook_off(kube: Kube, two_namespaces: tuple[str, str]) -> Iterator[None]:
    """The webhook configuration deleted (then restored): objects are stored unjudged."""
    saved = json.loads(
        kube.kubectl("get", "validatingwebhookconfiguration", WEBHOOK_CONFIG, "-o", "json").stdout
    )
    meta = saved["metadata"]
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        meta.pop(key, None)
    ns = two_namespaces[0]
    kube.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIG)
    try:
        wait_for(
            lambda: not webhook_denies(kube, ns), what="the API server to stop calling the webhook"
        )
        yield
    finally:
        kubectl_in(kube, json.dumps(saved), "create")
        wait_for(lambda: webhook_denies(kube, ns), what="the webhook to judge again")


def unrestricted(kube: Kube) -> bool:
    """Whether the chart's unlimited policy is in force: a probe every test policy refuses
    (another namespace, a foreign image, 50 inputs, 16 accelerators) is admitted."""
    probe = batch_json("probe", "default", 50, accelerator="gpu-a100x16", image="docker.io/probe:1")
    return refused(kube, probe) is None


def read_policy(kube: Kube) -> dict[str, str]:
    out = kube.kubectl("get", "configmap", POLICY_CONFIGMAP, "-n", NAMESPACE, "-o", "json").stdout
    return json.loads(out).get("data") or {}


def write_policy(kube: Kube, data: dict[str, str]) -> None:
    """Replace the ConfigMap's data, as `kubectl edit` would."""
    patch = json.dumps([{"op": "replace", "path": "/data", "value": data}])
    kube.kubectl(
        "patch", "configmap", POLICY_CONFIGMAP, "-n", NAMESPACE, "--type=json", "-p", patch
    )


# ----------------------------------------------------------------------- the operator's metrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def running_pods(kube: Kube) -> list:
    pods = kube.core.list_namespaced_pod(NAMESPACE, label_selector=POD_SELECTOR).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def scrape(kube: Kube, pod: object | None = None) -> Samples:
    """Every sample of an operator replica's /metrics (the leader's unless ``pod`` is
    given), by name and labels, fetched as Prometheus would through the API server: the
    Pod's port named ``metrics``, via its proxy."""
    if pod is None:
        leader = leader_pod_name(kube)
        found = [p for p in running_pods(kube) if p.metadata.name == leader]
        assert len(found) == 1, (leader, [p.metadata.name for p in running_pods(kube)])
        pod = found[0]
    ports = {p.name: p.container_port for c in pod.spec.containers for p in c.ports or []}  # type: ignore[attr-defined]
    name = pod.metadata.name  # type: ignore[attr-defined]
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:{ports['metrics']}/proxy/metrics"
    text = kube.kubectl("get", "--raw", path).stdout
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
