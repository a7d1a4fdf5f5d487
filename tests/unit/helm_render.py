"""Render the chart the way `helm install` does, with the real Helm library and no cluster.

helm-sdkpy has no `helm template`: it installs. So `install()` points an
install at a stand-in API server on 127.0.0.1 that answers discovery for the
Kubernetes version a test chooses, keeps whatever Helm creates, and reports
every object as ready. What comes back is exactly what Helm would have sent
to a cluster of that version (CRDs, the release's own Secret aside), after
the same values-schema check `helm install` runs; a refusal comes back as
the InstallError Helm raises, with its message.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_sdkpy as helm
import yaml

CHART = Path(__file__).resolve().parents[2] / "helm" / "kinetic"
NAMESPACE = "kinetic-system"

# (group/version, plural, kind, namespaced), as a cluster serves them.
_RESOURCES = [
    ("v1", "configmaps", "ConfigMap", True),
    ("v1", "secrets", "Secret", True),
    ("v1", "services", "Service", True),
    ("v1", "serviceaccounts", "ServiceAccount", True),
    ("v1", "namespaces", "Namespace", False),
    ("apps/v1", "deployments", "Deployment", True),
    ("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    (
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ("monitoring.coreos.com/v1", "servicemonitors", "ServiceMonitor", True),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    ("policy/v1beta1", "poddisruptionbudgets", "PodDisruptionBudget", True),
]


def _served(minor: int) -> list[tuple[str, str, str, bool]]:
    """The resources a 1.<minor> API server serves: policy/v1 from 1.21, v1beta1 until 1.24."""
    return [
        r
        for r in _RESOURCES
        if not (r[0] == "policy/v1" and minor < 21)
        and not (r[0] == "policy/v1beta1" and minor > 24)
    ]


class _FakeAPI(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # discovery asks for every group at once

    def __init__(self, minor: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.minor = minor
        self.resources = _served(minor)
        self.objects: dict[str, dict[str, Any]] = {}  # path -> object
        self.created: list[dict[str, Any]] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _FakeAPI

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
        pass

    def _send(self, code: int, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
        self._send(404, {**status, "reason": "NotFound"})

    def _discovery(self, path: str) -> dict[str, Any] | None:
        served = self.server.resources
        if path == "/version":
            minor = self.server.minor
            return {"major": "1", "minor": str(minor), "gitVersion": f"v1.{minor}.0"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for gv, *_ in served:
                if "/" in gv:
                    group, version = gv.split("/")
                    versions = groups.setdefault(group, [])
                    if version not in versions:
                        versions.append(version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                    }
                    for g, vs in groups.items()
                ],
            }
        for gv in {r[0] for r in served}:
            if path == ("/api/v1" if gv == "v1" else f"/apis/{gv}"):
                return {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": gv,
                    "resources": [
                        {
                            "name": plural,
                            "singularName": kind.lower(),
                            "namespaced": namespaced,
                            "kind": kind,
                            "verbs": [
                                "create",
                                "delete",
                                "get",
                                "list",
                                "patch",
                                "update",
                                "watch",
                            ],
                        }
                        for g, plural, kind, namespaced in served
                        if g == gv
                    ],
                }
        return None

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = urlsplit(self.path).path
        found = self._discovery(path)
        if found is not None:
            self._send(200, found)
            return
        with self.server.lock:
            obj = self.server.objects.get(path)
        if obj is not None:
            self._send(200, obj)
        elif path.rsplit("/", 1)[-1] in {r[1] for r in self.server.resources}:
            self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []})
        else:
            self._not_found()

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        path = urlsplit(self.path).path
        if "json" not in (self.headers.get("Content-Type") or ""):
            # Helm's own release record, sent as protobuf: acknowledged, not kept.
            kinds = {plural: kind for _, plural, kind, _ in self.server.resources}
            kind = kinds.get(path.rsplit("/", 1)[-1], "Secret")
            self._send(201, {"kind": kind, "apiVersion": "v1", "metadata": {"name": "release"}})
            return
        obj = json.loads(body or b"{}")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{len(self.server.objects)}")
        meta.setdefault("resourceVersion", "1")
        meta.setdefault("generation", 1)
        if obj.get("kind") == "CustomResourceDefinition":
            obj["status"] = {
                "conditions": [
                    {"type": "Established", "status": "True"},
                    {"type": "NamesAccepted", "status": "True"},
                ],
                "acceptedNames": obj.get("spec", {}).get("names", {}),
            }
        with self.server.lock:
            self.server.objects[f"{path}/{meta.get('name')}"] = obj
            self.server.created.append(obj)
        self._send(201, obj)

    def do_PUT(self) -> None:  # noqa: N802 - the base class's name
        self.do_POST()

    def do_PATCH(self) -> None:  # noqa: N802 - the base class's name
        self._not_found()

    def do_DELETE(self) -> None:  # noqa: N802 - the base class's name
        self._not_found()


@contextmanager
def _fake_api(minor: int) -> Iterator[_FakeAPI]:
    server = _FakeAPI(minor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _kubeconfig(port: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": NAMESPACE},
                }
            ],
            "current-context": "fake",
        }
    )


def install(values: dict[str, Any], *, kube_minor: int = 30) -> list[dict[str, Any]]:
    """The chart's objects (CRDs and Helm's release record left out) for these values.

    Raises helm's InstallError, with Helm's message, when the values are refused.
    """
    with _fake_api(kube_minor) as api:
        config = helm.Configuration(namespace=NAMESPACE, kubeconfig=_kubeconfig(api.server_port))
        asyncio.run(
            helm.Install(config).run("kinetic", str(CHART), values=values, wait=False, timeout=30)
        )
        with api.lock:
            created = list(api.created)
    return [
        o
        for o in created
        if o.get("kind") != "CustomResourceDefinition"
        and (o.get("metadata", {}).get("labels") or {}).get("owner") != "helm"
    ]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]
