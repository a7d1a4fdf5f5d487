"""`kinetic doctor`: can this identity use Kinetic here, and if not, what to do about it.

Seven checks, in order, each as the client itself would meet the cluster:

1. ``context``: the kubeconfig context's API server answers (its name and address);
2. ``crds``: both CRDs are installed, serve ``v1alpha1`` and have this client's schema.
   The CRDs carry no version label or annotation, so "at this client's version" is
   decided by comparing each served schema with the one `kinetic.model.crdgen`
   generates here: equal, or "different from this client's";
3. ``operator``: a Deployment labelled ``app.kubernetes.io/name=kinetic`` in the operator
   namespace (``KINETIC_OPERATOR_NAMESPACE``, default kinetic-system) has ready replicas;
4. ``leader``: one replica holds the leader Lease (``LEADER_LEASE``) in the operator
   namespace and renewed it recently: only that replica reconciles;
5. ``webhook``: a server-side dry run of a deliberately invalid KineticJob is denied by
   Kinetic's validating webhook. The webhook fails open, so an invalid object that is
   accepted means it is absent or not answering;
6. ``storage``: a probe object is written, read back and deleted under the namespace's
   prefix of the storage root the client resolves (`kinetic.api.config`), in a fresh
   upload folder, where the client's own uploads go;
7. ``permissions``: a SelfSubjectAccessReview says this identity may create KineticJobs
   in the namespace.

Each check is one function: it observes (the API calls) and hands what it saw to a
pure judgement (``judge_*``) that says what the observation means: ok, or failed with
the fix. A check whose ground an earlier one took away (no API server; no CRD to
probe the webhook with) is skipped with the reason. Adding a check is one function
and one line in `CHECKS`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from kubernetes import client
from kubernetes.client import ApiException
from urllib3.exceptions import HTTPError

from kinetic import storage
from kinetic.api import config, kube
from kinetic.api.doctor_verdicts import (
    CLOCK_SKEW_SECONDS,
    CONNECT_TIMEOUT,
    LEASE_DURATION_SECONDS,
    OPERATOR_SELECTOR,
    PROBE_NAME,
    PROBE_READ_LIMIT,
    WEBHOOK_SUFFIX,
    AccessSeen,
    ApiFailure,
    CheckResult,
    ContextSeen,
    CrdSeen,
    DeploymentSeen,
    LeaseSeen,
    OperatorSeen,
    Status,
    StorageFailure,
    StorageSeen,
    WebhookSeen,
    api_failure,
    context_flag,
    crds_fix,
    expected_schemas,
    failed,
    first_line,
    grant_fix,
    identity_in,
    invalid_job,
    judge_context,
    judge_crds,
    judge_leader,
    judge_operator,
    judge_permissions,
    judge_storage,
    judge_webhook,
    ok,
    skipped,
    storage_failure,
)
from kinetic.api.kube import KubeClient
from kinetic.model import layout
from kinetic.model import resources as r
from kinetic.model.names import LEADER_ELECTION_FLAG, LEADER_LEASE, parse_time

__all__ = [
    "AccessSeen",
    "ApiFailure",
    "CHECKS",
    "CLOCK_SKEW_SECONDS",
    "CONNECT_TIMEOUT",
    "Check",
    "CheckResult",
    "ContextSeen",
    "CrdSeen",
    "DeploymentSeen",
    "LEASE_DURATION_SECONDS",
    "LeaseSeen",
    "OPERATOR_SELECTOR",
    "OperatorSeen",
    "PROBE_NAME",
    "PROBE_READ_LIMIT",
    "Status",
    "StorageFailure",
    "StorageSeen",
    "Target",
    "WEBHOOK_SUFFIX",
    "WebhookSeen",
    "api_failure",
    "check_context",
    "check_crds",
    "check_leader",
    "check_operator",
    "check_permissions",
    "check_storage",
    "check_webhook",
    "context_flag",
    "crds_fix",
    "expected_schemas",
    "failed",
    "first_line",
    "grant_fix",
    "identity_in",
    "invalid_job",
    "judge_context",
    "judge_crds",
    "judge_leader",
    "judge_operator",
    "judge_permissions",
    "judge_storage",
    "judge_webhook",
    "ok",
    "probe_storage",
    "run",
    "skipped",
    "storage_failure",
]


# --------------------------------------------------------------------------- the thin layer


@dataclass
class Target:
    """Where the checks look: the context, the namespace and the client's settings.

    Resolved as every other command resolves them, and only when first needed: the
    settings read the operator's ConfigMap, which needs an API server that answers.
    """

    namespace_arg: str | None = None
    context_arg: str | None = None
    context: str | None = field(init=False)
    # Who this identity is, as the first refusal named it (Kubernetes 1.20 has no
    # SelfSubjectReview to ask); the permission fix names it.
    identity: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.context = self.context_arg or os.environ.get("KINETIC_CONTEXT") or None

    def forbidden(self, e: ApiException) -> None:
        """Note who was refused, from a 403's message."""
        self.identity = self.identity or identity_in(kube.kube_reason(e))

    @cached_property
    def kube(self) -> KubeClient:
        return KubeClient(self.context)

    @property
    def api(self) -> client.ApiClient:
        return self.kube.api

    @cached_property
    def settings(self) -> config.ClientConfig | config.ConfigError:
        try:
            return config.resolve(self.namespace_arg, self.context)
        except config.ConfigError as e:
            return e

    @cached_property
    def namespace(self) -> str:
        if isinstance(self.settings, config.ClientConfig):
            return self.settings.namespace
        # No storage root, so no settings: the namespace by resolve()'s own rule.
        return (
            self.namespace_arg
            or os.environ.get("KINETIC_NAMESPACE")
            or self.kube.current_namespace()
        )

    @property
    def operator_namespace(self) -> str:
        return config.operator_namespace()


def check_context(t: Target) -> CheckResult:
    current = "in-cluster" if kube.in_cluster() else kube.kubeconfig_contexts()[1]
    context = t.context or current
    try:
        server = t.api.configuration.host
    except kube.ClusterUnreachable as e:
        return judge_context(ContextSeen(context, None, None, *api_failure(e)))
    try:
        version = client.VersionApi(t.api).get_code(_request_timeout=CONNECT_TIMEOUT)
    except (ApiException, HTTPError, OSError) as e:
        return judge_context(ContextSeen(context, server, None, *api_failure(e)))
    return judge_context(ContextSeen(context, server, version.git_version))


def check_crds(t: Target) -> CheckResult:
    expected = expected_schemas()
    return judge_crds([_crd_seen(t, name) for name in expected], expected)


def _crd_seen(t: Target, name: str) -> CrdSeen:
    try:
        # Raw JSON: the client's models would drop schema keywords they do not know.
        raw = client.ApiextensionsV1Api(t.api).read_custom_resource_definition(
            name, _preload_content=False
        )
    except ApiException as e:
        if e.status == 404:
            return CrdSeen(name, "missing")
        if e.status != 403:
            raise
        t.forbidden(e)
        return CrdSeen(name, "forbidden")
    versions = json.loads(raw.data)["spec"]["versions"]
    served = tuple(v["name"] for v in versions if v.get("served"))
    mine: dict[str, Any] = next((v for v in versions if v["name"] == r.VERSION), {})
    return CrdSeen(name, "yes", served, (mine.get("schema") or {}).get("openAPIV3Schema"))


def check_operator(t: Target) -> CheckResult:
    ns = t.operator_namespace
    try:
        listed = client.AppsV1Api(t.api).list_namespaced_deployment(
            ns, label_selector=OPERATOR_SELECTOR
        )
    except ApiException as e:
        if e.status != 403:
            raise
        t.forbidden(e)
        return judge_operator(OperatorSeen(ns, None))
    found = tuple(
        DeploymentSeen(
            d.metadata.name, d.spec.replicas or 0, (d.status and d.status.ready_replicas) or 0
        )
        for d in listed.items
    )
    return judge_operator(OperatorSeen(ns, found))


def check_leader(t: Target) -> CheckResult:
    ns, now = t.operator_namespace, datetime.now(UTC)
    try:
        # Raw JSON: renewTime as the API server wrote it (a MicroTime), parsed here.
        raw = client.CoordinationV1Api(t.api).read_namespaced_lease(
            LEADER_LEASE, ns, _preload_content=False
        )
    except ApiException as e:
        if e.status == 404:
            return judge_leader(LeaseSeen(ns, now, "missing", elected=_elected(t)))
        if e.status != 403:
            raise
        t.forbidden(e)
        return judge_leader(LeaseSeen(ns, now, "forbidden"))
    spec = json.loads(raw.data).get("spec") or {}
    renew_time = spec.get("renewTime")
    return judge_leader(
        LeaseSeen(
            ns,
            now,
            holder=spec.get("holderIdentity") or "",
            renewed=parse_time(renew_time) if renew_time else None,
            duration=spec.get("leaseDurationSeconds") or LEASE_DURATION_SECONDS,
            transitions=spec.get("leaseTransitions") or 0,
        )
    )


def _elected(t: Target) -> bool | None:
    """Whether the operator's Deployment passes --leader-election (None: cannot tell)."""
    try:
        listed = client.AppsV1Api(t.api).list_namespaced_deployment(
            t.operator_namespace, label_selector=OPERATOR_SELECTOR
        )
    except ApiException:
        return None
    commands = [
        [*(c.command or []), *(c.args or [])]
        for d in listed.items
        for c in d.spec.template.spec.containers
    ]
    return any(LEADER_ELECTION_FLAG in command for command in commands) if commands else None


def check_webhook(t: Target) -> CheckResult:
    try:
        t.kube.custom.create_namespaced_custom_object(
            r.GROUP,
            r.VERSION,
            t.namespace,
            r.JOB_PLURAL,
            invalid_job(),
            dry_run="All",
            _content_type="application/json",
        )
    except ApiException as e:
        if e.status == 403:
            t.forbidden(e)
        seen = WebhookSeen(t.namespace, False, e.status, kube.kube_reason(e))
    else:
        seen = WebhookSeen(t.namespace, True)
    return judge_webhook(seen, t.operator_namespace)


def check_storage(t: Target) -> CheckResult:
    settings = t.settings
    if isinstance(settings, config.ConfigError):
        return judge_storage(
            StorageSeen(failure="config", error=str(settings)), t.operator_namespace
        )
    return judge_storage(probe_storage(settings.storage_root, t.namespace), t.operator_namespace)


def probe_storage(root: str, namespace: str) -> StorageSeen:
    """Write, read back and delete a small object in a fresh upload folder of the namespace."""
    try:
        prefix = layout.namespace_prefix(root, namespace)
    except ValueError as e:
        return StorageSeen(failure="namespace", error=str(e))
    folder = layout.new_upload_dir(root, namespace, PROBE_NAME)
    probe = f"{folder}probe"
    data = f"kinetic doctor {secrets.token_hex(8)}\n".encode()
    step = "write"
    try:
        storage.write_bytes(probe, data)
        step = "read"
        back = storage.read_at_most(probe, PROBE_READ_LIMIT)
        step = "delete"
        storage.delete_prefix(folder)
    except (storage.StorageError, ValueError, OSError) as e:
        if step == "read":
            _delete_quietly(folder)
        return StorageSeen(prefix, probe, storage_failure(e), step, first_line(e))
    if back != data:
        return StorageSeen(prefix, probe, "mismatch", "read", "other bytes came back")
    return StorageSeen(prefix, probe)


def _delete_quietly(folder: str) -> None:
    try:
        storage.delete_prefix(folder)
    except (storage.StorageError, OSError):
        pass  # the failure already reported is the one to fix


def check_permissions(t: Target) -> CheckResult:
    review = client.AuthorizationV1Api(t.api).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": t.namespace,
                    "verb": "create",
                    "group": r.GROUP,
                    "resource": r.JOB_PLURAL,
                }
            },
        }
    )
    status = review.status
    reason = status.reason or status.evaluation_error or ""
    return judge_permissions(AccessSeen(t.namespace, bool(status.allowed), reason, t.identity))


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Check:
    """A named check, and the earlier checks whose blocking failure skips it."""

    name: str
    run: Callable[[Target], CheckResult]
    needs: tuple[str, ...] = ("context",)


CHECKS: tuple[Check, ...] = (
    Check("context", check_context, needs=()),
    Check("crds", check_crds),
    Check("operator", check_operator),
    Check("leader", check_leader),
    Check("webhook", check_webhook, needs=("context", "crds")),
    Check("storage", check_storage),
    Check("permissions", check_permissions),
)


def run(
    namespace: str | None = None,
    context: str | None = None,
    checks: Sequence[Check] = CHECKS,
) -> Iterator[CheckResult]:
    """Each check's result, in order, as soon as it is known."""
    target = Target(namespace, context)
    done: dict[str, CheckResult] = {}
    for check in checks:
        blocker = next((done[n] for n in check.needs if n in done and done[n].blocks), None)
        if blocker is not None:
            result = skipped(check.name, f"the {blocker.name} check failed")
        else:
            result = _run_one(check, target)
        done[check.name] = result
        yield result


def _run_one(check: Check, target: Target) -> CheckResult:
    """The check's result; an API or storage call it did not expect to fail is its failure."""
    try:
        return check.run(target)
    except (ApiException, HTTPError, OSError, kube.ClusterUnreachable) as e:
        _, said = api_failure(e)
        return failed(
            check.name,
            f"the check could not finish: {said}",
            f"try again; if it persists, run it by hand with kubectl{context_flag(target.context)}",
        )
