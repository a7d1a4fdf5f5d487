"""A fake API server the way the operator sees it (`kinetic_operator.kube.Kube`).

One fake for every unit test of the operator's API layer, so that the behaviour
tests rely on (and the 409 the real server answers to a stale write) is written
once. Objects carry a resourceVersion that every write bumps; a status write or
a replace made from a stale copy is answered `Conflict`, exactly like a merge
patch or PUT carrying metadata.resourceVersion. Pods are plain dicts with
whatever status a test gives them; the watch is played by `FakeKube.views()`,
which summarises them as the operator's index would. It serves only what the
local cluster cannot: exact call orders, and faults injected between two calls.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kinetic.model.names import fmt_time
from kinetic.model.resources import BATCH_PLURAL, JOB_PLURAL
from kinetic_operator.kube import Conflict, Rejected
from kinetic_operator.logic.observed import PodView, summarize_pod
from kinetic_operator.logic.seal import Sealer
from kinetic_operator.reaper import reap_one

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class FakeKube:
    """One namespace of an API server: custom objects, Pods, logs and Events.

    ``interfere(plural, name)`` runs before every status write, as another
    writer racing with the operator would (see `someone_writes`).
    ``transient`` makes the next N Pod creations fail the way a timeout or
    a 500 does; ``reject`` maps Pod names to the API server's refusal.
    ``csi_drivers`` holds the CSIDriver objects installed cluster-wide:
    True present, None unreadable (the operator may not read them).
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.calls: list[tuple[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []
        self.logs: dict[str, bytes] = {}
        self.reject: dict[str, str] = {}
        self.transient = 0
        self.interfere: Callable[[str, str], None] | None = None
        self.on_create: Callable[[dict[str, Any]], None] | None = None
        self.on_delete: Callable[[str], None] | None = None
        self.accounts: set[tuple[str, str]] = set()
        self.csi_drivers: dict[str, bool | None] = {}
        self.sealer = Sealer(b"the operator's key")  # as `handlers.setup.load_seal` sets it

    # --------------------------------------------------------------- objects

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def put(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create or replace the object; a replace from a stale copy (its resourceVersion
        not the stored one) is answered 409, as the API server answers a PUT."""
        held = self.objects.get((plural, body["metadata"]["name"]))
        sent = body["metadata"].get("resourceVersion")
        if held is not None and sent is not None and sent != held["metadata"]["resourceVersion"]:
            self.calls.append(("conflict", body["metadata"]["name"]))
            raise Conflict(f"{body['metadata']['name']} changed since resourceVersion {sent}")
        obj = copy.deepcopy(body)
        self._bump(obj)
        self.objects[(plural, obj["metadata"]["name"])] = obj
        return copy.deepcopy(obj)

    def someone_writes(self, plural: str, name: str, **spec: Any) -> None:
        """A user (or anyone) changes the object: its resourceVersion moves on."""
        obj = self.objects[(plural, name)]
        obj["spec"] = {**obj["spec"], **spec}
        obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        self._bump(obj)

    def status_of(self, plural: str, name: str) -> dict[str, Any]:
        return self.objects[(plural, name)].get("status") or {}

    def _get(self, plural: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", name))
        obj = self.objects.get((plural, name))
        return copy.deepcopy(obj) if obj is not None else None

    def get_kinetic_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(JOB_PLURAL, name)

    def get_kinetic_batch(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(BATCH_PLURAL, name)

    def patch_status(
        self,
        namespace: str,
        name: str,
        new: dict[str, Any],
        old: dict[str, Any],
        resource_version: str | None,
        *,
        plural: str = JOB_PLURAL,
    ) -> dict[str, Any] | None:
        if self.interfere is not None:
            self.interfere(plural, name)
        obj = self.objects.get((plural, name))
        if obj is None:
            return None
        if resource_version is not None and resource_version != obj["metadata"]["resourceVersion"]:
            self.calls.append(("conflict", name))
            raise Conflict(f"{namespace}/{name} changed while reconciling")
        patch = {key: None for key in old if key not in new} | new
        obj["status"] = merge_patch(obj.get("status") or {}, patch)
        self._bump(obj)
        self.calls.append(("patch", obj["status"].get("phase")))
        return copy.deepcopy(obj)

    def csi_driver_installed(self, name: str) -> bool | None:
        return self.csi_drivers.get(name, False)

    # --------------------------------------------------------------- Pods

    def ensure_service_account(self, namespace: str, name: str) -> None:
        self.accounts.add((namespace, name))

    def create_pod(self, manifest: dict[str, Any]) -> bool:
        name = manifest["metadata"]["name"]
        account = (
            manifest["metadata"].get("namespace"),
            (manifest.get("spec") or {}).get("serviceAccountName"),
        )
        if account[1] is not None and account not in self.accounts:
            # as the API server's ServiceAccount admission does
            raise RuntimeError(f"serviceaccount {account[1]} not found in {account[0]}")
        if name in self.reject:
            self.calls.append(("rejected", name))
            raise Rejected(self.reject[name])
        if self.transient:
            self.transient -= 1
            self.calls.append(("unavailable", name))
            raise RuntimeError("the API server is not answering")
        if name in self.pods:
            self.calls.append(("exists", name))
            return False
        if self.on_create is not None:
            self.on_create(manifest)
        pod = copy.deepcopy(manifest)
        pod["metadata"]["creationTimestamp"] = fmt_time(NOW)
        self.version += 1
        pod["metadata"]["uid"] = f"pod-uid-{self.version}"
        pod["status"] = {"phase": "Pending"}
        self.pods[name] = pod
        self.calls.append(("create", name))
        return True

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.pods.get(name)
        return copy.deepcopy(pod) if pod is not None else None

    def delete_pod(
        self, namespace: str, name: str, *, now: bool = False, uid: str | None = None
    ) -> None:
        held = self.pods.get(name)
        if uid is not None and held is not None and held["metadata"].get("uid") != uid:
            self.calls.append(("not ours", name))  # the real API server's 409: left alone
            return
        self.calls.append(("delete", name))
        if self.on_delete is not None:
            self.on_delete(name)
        self.pods.pop(name, None)

    def pod_log(self, namespace: str, name: str) -> bytes | None:
        return self.logs.get(name, f"log of {name}\n".encode())

    def post_event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", reason))
        self.events.append((type_, reason, message))

    # --------------------------------------------------------------- the kubelet and the watch

    def run_pod(self, name: str) -> None:
        self.pods[name]["status"] = {"phase": "Running", "startTime": fmt_time(NOW)}

    def end_pod(
        self,
        name: str,
        ok: bool = True,
        message: str | None = None,
        finished: datetime = NOW,
        **status: Any,
    ) -> None:
        terminated = {
            "exitCode": 0 if ok else 1,
            "reason": "Completed" if ok else "Error",
            "finishedAt": fmt_time(finished),
        }
        if message is not None:
            terminated["message"] = message
        self.pods[name]["status"] = {
            "phase": "Succeeded" if ok else "Failed",
            "startTime": fmt_time(finished),
            "containerStatuses": [{"name": "main", "state": {"terminated": terminated}}],
            **status,
        }

    def views(self) -> list[PodView]:
        """What the operator's Pod index holds."""
        return [v for v in (summarize_pod(p) for p in self.pods.values()) if v is not None]


def reap_due(kube: Any, due: list[tuple[str, str | None, str | None]]) -> None:
    """What the Reaper's threads do with each due ``(pod, archive URI, UID)``, in turn."""
    for pod, uri, uid in due:
        reap_one(kube, "ns", pod, uri, uid)
