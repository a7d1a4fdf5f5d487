"""`kinetic doctor`'s verdicts: what each check's observation means, ok or failed with the fix.

Pure: each ``judge_*`` takes what its check saw (a ``*Seen`` record) and says
what it means, and the fixes it names are built here. The checks that observe
(the API calls) and their order are `kinetic.api.doctor`, which re-exports
these names.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kubernetes.client import ApiException
from pydantic import BaseModel, ConfigDict, Field
from urllib3.exceptions import MaxRetryError, SSLError

from kinetic import __version__, storage
from kinetic.api import config, kube
from kinetic.model import crdgen
from kinetic.model import resources as r
from kinetic.model.names import LEADER_LEASE, holder_pod
from kinetic.storage.base import parse_uri

OPERATOR_SELECTOR = "app.kubernetes.io/name=kinetic"  # the chart's label on its Deployment
WEBHOOK_SUFFIX = f'.{r.GROUP}" denied the request'  # how the API server quotes our hooks' denial
PROBE_NAME = "kinetic-doctor"
# The API server's address is reached in seconds or not at all.
CONNECT_TIMEOUT = (3, 10)
PROBE_READ_LIMIT = 1024  # the probe holds a few dozen bytes; never read more back
# client-go's lease duration, for a Lease that does not say its own.
LEASE_DURATION_SECONDS = 15
# A Lease's renewTime is the leader's clock and is compared here with this machine's.
# The replicas never do that (a standby times the holder on its own monotonic clock),
# so this judgement is an estimate: it forgives this much disagreement between the two
# clocks before it calls a holder gone.
CLOCK_SKEW_SECONDS = 5


class Status(enum.StrEnum):
    ok = "ok"
    failed = "failed"
    skipped = "skipped"


class CheckResult(BaseModel):
    """One line of the report."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: Status
    detail: str
    fix: str | None = None
    # Whether checks that need this one cannot run (a failure that leaves them no ground).
    blocks: bool = Field(False, exclude=True)

    @property
    def passed(self) -> bool:
        return self.status is Status.ok


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, status=Status.ok, detail=detail)


def failed(name: str, detail: str, fix: str, *, blocks: bool = False) -> CheckResult:
    return CheckResult(name=name, status=Status.failed, detail=detail, fix=fix, blocks=blocks)


def skipped(name: str, reason: str) -> CheckResult:
    return CheckResult(name=name, status=Status.skipped, detail=reason)


# --------------------------------------------------------------------------- fixes


def crds_fix() -> str:
    return (
        "apply this client's CRDs: `python -m kinetic.model.crdgen kinetic-crds && "
        "kubectl apply -f kinetic-crds/` (Helm installs CRDs but never upgrades them), or use "
        "the kinetic client of the cluster's release"
    )


def grant_fix(namespace: str, identity: str | None = None) -> str:
    """The RBAC an administrator adds so that ``identity`` (when known) may use Kinetic here."""
    account = (identity or "").removeprefix("system:serviceaccount:")
    if identity and account != identity:
        subject = f"--serviceaccount={account}"
    else:
        subject = f"--user={identity or 'YOUR_USER'}"
    hint = "" if identity else " (a ServiceAccount: --serviceaccount=NAMESPACE:NAME)"
    return (
        f"an administrator grants it: `kubectl -n {namespace} create role kinetic-user "
        "--verb=get,list,watch,create,patch,delete "
        f"--resource={r.JOB_PLURAL}.{r.GROUP},{r.BATCH_PLURAL}.{r.GROUP}` and "
        f"`kubectl -n {namespace} create rolebinding kinetic-user --role=kinetic-user "
        f"{subject}`{hint}"
    )


def identity_in(message: str) -> str | None:
    """The user a 403's message names (`User "system:serviceaccount:ns:sa" cannot ...`)."""
    found = re.search(r'User "([^"]+)"', message)
    return found.group(1) if found else None


def context_flag(context: str | None) -> str:
    return f" --context {context}" if context else ""


# --------------------------------------------------------------------------- 1. context

ApiFailure = Literal["config", "unreachable", "tls", "unauthorized", "error"]


@dataclass(frozen=True)
class ContextSeen:
    """What answered at the kubeconfig context, or why nothing did."""

    context: str | None
    server: str | None
    version: str | None = None
    failure: ApiFailure | None = None
    error: str = ""


def judge_context(seen: ContextSeen) -> CheckResult:
    name, where = "context", seen.context or "the current context"
    flag = context_flag(seen.context)
    if seen.failure is None:
        return ok(name, f"{where}: {seen.server} answers (Kubernetes {seen.version})")
    if seen.failure == "config":
        return failed(
            name,
            f"{where}: no usable kubeconfig: {seen.error}",
            "point KUBECONFIG at your cluster's kubeconfig, or pick a context from "
            "`kubectl config get-contexts` and pass it: `kinetic doctor --context NAME`; "
            "the local cluster: `kinetic local up` and `source .local/env`",
            blocks=True,
        )
    if seen.failure == "unauthorized":
        return failed(
            name,
            f"{where}: {seen.server} refused this context's credentials ({seen.error})",
            f"renew the credentials of {where} (log in again, or get a new token), then "
            f"`kubectl{flag} get --raw /version`",
            blocks=True,
        )
    if seen.failure == "tls":
        return failed(
            name,
            f"{where}: {seen.server} is not trusted ({seen.error})",
            "set the cluster's certificate-authority(-data) in the kubeconfig to the CA "
            f"that signed the API server's certificate, then `kubectl{flag} cluster-info`",
            blocks=True,
        )
    return failed(
        name,
        f"{where}: the API server at {seen.server} does not answer ({seen.error})",
        f"check that the cluster runs and that {seen.server} is its address: "
        f"`kubectl{flag} cluster-info`; the local cluster: `kinetic local up`",
        blocks=True,
    )


def api_failure(exc: BaseException) -> tuple[ApiFailure, str]:
    """An API call's exception as the kind of failure it is, and a line saying it."""
    if isinstance(exc, kube.ClusterUnreachable):
        return "config", str(exc.__cause__ or exc)
    if isinstance(exc, ApiException):
        kind: ApiFailure = "unauthorized" if exc.status == 401 else "error"
        return kind, f"{exc.status}: {kube.kube_reason(exc)}"
    reason = exc.reason if isinstance(exc, MaxRetryError) and exc.reason else exc
    if isinstance(reason, SSLError):
        return "tls", first_line(reason)
    return "unreachable", first_line(reason)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


# --------------------------------------------------------------------------- 2. CRDs


@dataclass(frozen=True)
class CrdSeen:
    """One CRD as the API server holds it: its served versions and v1alpha1's schema."""

    name: str
    found: Literal["yes", "missing", "forbidden"] = "yes"
    served: tuple[str, ...] = ()
    schema: dict[str, Any] | None = None

    @property
    def serves_ours(self) -> bool:
        return self.found == "yes" and r.VERSION in self.served


def expected_schemas() -> dict[str, dict[str, Any]]:
    """This client's CRDs' v1alpha1 schema, by CRD name, as `crdgen` writes them."""
    out = {}
    for crd in (crdgen.job_crd(), crdgen.batch_crd()):
        version = next(v for v in crd["spec"]["versions"] if v["name"] == r.VERSION)
        out[crd["metadata"]["name"]] = version["schema"]["openAPIV3Schema"]
    return out


def _crd_problem(c: CrdSeen, expected: dict[str, Any] | None) -> str | None:
    if c.found == "missing":
        return f"{c.name} is not installed"
    if not c.serves_ours:
        return f"{c.name} does not serve {r.VERSION} (serves: {', '.join(c.served) or 'nothing'})"
    if c.schema != expected:
        return f"{c.name}: {r.VERSION} schema different from this client's (kinetic {__version__})"
    return None


def judge_crds(seen: Sequence[CrdSeen], expected: dict[str, dict[str, Any]]) -> CheckResult:
    name = "crds"
    if any(c.found == "forbidden" for c in seen):
        return failed(
            name,
            "this identity may not read CustomResourceDefinitions: cannot tell whether "
            f"{', '.join(expected)} are installed at this client's version",
            "run `kinetic doctor` as a cluster administrator, or have one grant get on "
            "customresourcedefinitions.apiextensions.k8s.io",
        )
    problems = [p for c in seen if (p := _crd_problem(c, expected.get(c.name)))]
    if problems:
        # Without a served v1alpha1 there is nothing to probe the webhook with.
        blocks = not all(c.serves_ours for c in seen)
        return failed(name, "; ".join(problems), crds_fix(), blocks=blocks)
    return ok(
        name,
        f"{', '.join(c.name for c in seen)} serve {r.VERSION} with this client's schema "
        f"(kinetic {__version__})",
    )


# --------------------------------------------------------------------------- 3. operator


@dataclass(frozen=True)
class DeploymentSeen:
    name: str
    replicas: int
    ready: int


@dataclass(frozen=True)
class OperatorSeen:
    """The operator's Deployments in its namespace; None when this identity may not list them."""

    namespace: str
    deployments: tuple[DeploymentSeen, ...] | None


def judge_operator(seen: OperatorSeen) -> CheckResult:
    name, ns = "operator", seen.namespace
    if seen.deployments is None:
        return failed(
            name,
            f"this identity may not list Deployments in {ns}: cannot tell whether the "
            "operator runs",
            f"have an administrator run `kubectl -n {ns} get deployment -l {OPERATOR_SELECTOR}` "
            "(or `kinetic doctor`)",
        )
    if not seen.deployments:
        return failed(
            name,
            f"no Deployment labelled {OPERATOR_SELECTOR} in namespace {ns}",
            f"install the operator: `helm install kinetic helm/kinetic -n {ns} "
            "--create-namespace --set storageRoot=gs://BUCKET/PREFIX`; if it runs in another "
            "namespace, set KINETIC_OPERATOR_NAMESPACE to it",
        )
    found = ", ".join(f"{ns}/{d.name} {d.ready}/{d.replicas} ready" for d in seen.deployments)
    if any(d.ready > 0 for d in seen.deployments):
        return ok(name, found)
    d = seen.deployments[0]
    if d.replicas == 0:
        fix = f"`kubectl -n {ns} scale deployment/{d.name} --replicas=1`"
    else:
        fix = (
            f"see why: `kubectl -n {ns} describe deployment/{d.name}` and "
            f"`kubectl -n {ns} logs deployment/{d.name}`"
        )
    return failed(name, f"no ready replica: {found}", fix)


# --------------------------------------------------------------------------- 4. leader


@dataclass(frozen=True)
class LeaseSeen:
    """The leader Lease as read, and this machine's UTC clock when it was read."""

    namespace: str
    now: datetime
    found: Literal["yes", "missing", "forbidden"] = "yes"
    holder: str = ""  # "<Pod name>_<process>"; empty once released on a clean shutdown
    renewed: datetime | None = None
    duration: int = LEASE_DURATION_SECONDS
    transitions: int = 0
    # Whether the operator's Deployment runs with --leader-election (None: unknown).
    elected: bool | None = None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def judge_leader(seen: LeaseSeen) -> CheckResult:
    name, ns = "leader", seen.namespace
    pods = f"`kubectl -n {ns} get pods -l {OPERATOR_SELECTOR}`"
    if seen.found == "forbidden":
        return failed(
            name,
            f"this identity may not read Leases in {ns}: cannot tell which operator replica leads",
            f"have an administrator run `kubectl -n {ns} get lease {LEADER_LEASE}` "
            "(or `kinetic doctor`)",
        )
    if seen.found == "missing" and seen.elected is False:
        return ok(name, "no leader election: the operator runs without it, as one replica")
    if seen.found == "missing":
        return failed(
            name,
            f"no replica has led yet: there is no Lease {ns}/{LEADER_LEASE}",
            "the operator is not running with --leader-election (the chart's "
            f"operator.leaderElection), or has never started; see {pods}",
        )
    # A renewTime ahead of this clock is skew, not the future: count it as just now.
    age = None if seen.renewed is None else max(0, int((seen.now - seen.renewed).total_seconds()))
    ago = "at an unknown time" if age is None else f"{age} s ago"
    logs = f"`kubectl -n {ns} logs -l {OPERATOR_SELECTOR}`"
    if not seen.holder:
        return failed(
            name,
            f"no leader: the last holder released the Lease {ago} (a clean shutdown) and no "
            "standby has taken it",
            "a running standby takes a released Lease within 2 s, so if this persists none "
            f"runs: see {pods} and {logs}",
        )
    pod = holder_pod(seen.holder)
    if age is None or age > seen.duration + CLOCK_SKEW_SECONDS:
        return failed(
            name,
            f"no leader: the last holder {pod} stopped renewing {ago}; a running standby "
            f"takes over within {seen.duration} s of that",
            f"check {logs}; if a replica there says it leads, this machine's clock is off: "
            "compare `date -u` with the cluster's",
        )
    return ok(
        name,
        f"held by {pod} (renewed {ago}, {_plural(seen.transitions, 'transition')})",
    )


# --------------------------------------------------------------------------- 5. webhook


@dataclass(frozen=True)
class WebhookSeen:
    """How the API server answered the dry run of `invalid_job`: accepted, or its refusal."""

    namespace: str
    accepted: bool
    status: int | None = None
    message: str = ""


def invalid_job() -> dict[str, Any]:
    """A KineticJob the CRD schema admits and the webhook denies (a mount path given twice).

    Generated name, dry run only: nothing is stored, nothing collides.
    """
    volume = {"mountPath": f"/{PROBE_NAME}", "uri": f"gs://{PROBE_NAME}/probe"}
    return {
        "apiVersion": f"{r.GROUP}/{r.VERSION}",
        "kind": r.JOB_KIND,
        "metadata": {"generateName": f"{PROBE_NAME}-"},
        "spec": {"container": {"command": ["true"]}, "volumes": [volume, volume]},
    }


def judge_webhook(seen: WebhookSeen, operator_namespace: str) -> CheckResult:
    name, ns, said = "webhook", seen.namespace, seen.message
    logs = f"`kubectl -n {operator_namespace} logs -l {OPERATOR_SELECTOR}`"
    if seen.accepted:
        return failed(
            name,
            f"the API server accepted an invalid KineticJob (dry run in {ns}): the webhook is "
            "absent or not answering, and it fails open",
            f"check `kubectl get validatingwebhookconfiguration {r.GROUP}` (the chart's "
            f"webhook.enabled=true) and the operator's log: {logs}",
        )
    if "admission webhook" in said and WEBHOOK_SUFFIX in said:
        return ok(name, f"denied an invalid KineticJob (dry run in {ns}): {said}")
    if seen.status == 403:
        return failed(
            name,
            f"this identity may not create KineticJobs in {ns}, so the API server refused the "
            f"probe before the webhook saw it: {said}",
            grant_fix(ns, identity_in(said)),
        )
    if seen.status == 404 and "namespaces" in said:
        return failed(
            name,
            f"namespace {ns} does not exist: {said}",
            f"`kubectl create namespace {ns}`, or pass the namespace you use: -n NAMESPACE",
        )
    if seen.status == 404:
        return failed(
            name, f"{r.JOB_PLURAL}.{r.GROUP}/{r.VERSION} is not served: {said}", crds_fix()
        )
    if "failed calling webhook" in said:
        return failed(name, f"the API server could not call the webhook: {said}", logs)
    if "admission webhook" in said:
        return failed(
            name,
            f"another admission webhook denied the probe before Kinetic's could: {said}",
            "ask the cluster's administrator about that webhook's policy",
        )
    if seen.status == 422:
        return failed(
            name,
            f"the CRD's schema refused the probe before the webhook saw it: {said}",
            crds_fix(),
        )
    return failed(
        name,
        f"the dry run failed ({seen.status}): {said}",
        "try again; if it persists, look at the API server: `kubectl get --raw '/readyz?verbose'`",
    )


# --------------------------------------------------------------------------- 6. storage

StorageFailure = Literal[
    "config", "namespace", "permission", "bucket", "unavailable", "mismatch", "error"
]


@dataclass(frozen=True)
class StorageSeen:
    """The probe's round trip under the namespace prefix, or where it stopped and why."""

    prefix: str = ""
    probe: str = ""
    failure: StorageFailure | None = None
    step: str = ""
    error: str = ""


def judge_storage(seen: StorageSeen, operator_namespace: str) -> CheckResult:
    name = "storage"
    if seen.failure is None:
        return ok(name, f"wrote, read back and deleted {seen.probe} under {seen.prefix}")
    if seen.failure == "namespace":
        return failed(
            name,
            seen.error,
            "pass the Kubernetes namespace you submit to: -n NAMESPACE (lowercase letters, "
            "digits and '-')",
        )
    if seen.failure == "config":
        return failed(
            name,
            seen.error,
            "set KINETIC_STORAGE_ROOT=gs://BUCKET/PREFIX (or file:///shared/path), or install "
            f"the operator, which publishes it in ConfigMap {operator_namespace}/"
            f"{config.CONFIGMAP_NAME}",
        )
    detail = f"{seen.step} of {seen.probe} failed: {seen.error}"
    bucket = parse_uri(seen.probe).bucket if seen.probe.startswith("gs://") else ""
    fixes: dict[StorageFailure, str] = {
        "permission": (
            f"give this identity write access to {seen.prefix}: on GCS roles/storage.objectAdmin "
            f"on gs://{bucket} (your own account: `gcloud auth application-default login`); "
            "on file:// a folder this user may write"
        ),
        "bucket": (
            f"`gcloud storage buckets create gs://{bucket}`, or set KINETIC_STORAGE_ROOT to a "
            "bucket that exists"
        ),
        "unavailable": "check the network path to storage (and STORAGE_EMULATOR_HOST, if set)",
        "mismatch": "storage returned other bytes than were written: check what sits between "
        "this machine and storage (a proxy or cache)",
    }
    return failed(
        name,
        detail,
        fixes.get(
            seen.failure,
            "run it again; if it fails the same way, the error names what storage refused",
        ),
    )


def storage_failure(exc: Exception) -> StorageFailure:
    """A storage exception as the kind of failure it is."""
    if isinstance(exc, storage.StoragePermissionError):
        return "permission"
    if isinstance(exc, storage.BucketNotFound):
        return "bucket"
    if isinstance(exc, storage.StorageUnavailable):
        return "unavailable"
    if isinstance(exc, storage.TooLarge):
        return "mismatch"  # more came back than was written
    if isinstance(exc, ValueError):
        return "config"  # a root no storage URI can be made of (an unsupported scheme)
    return "error"


# --------------------------------------------------------------------------- 7. permissions


@dataclass(frozen=True)
class AccessSeen:
    """The SelfSubjectAccessReview's answer for create kineticjobs in the namespace."""

    namespace: str
    allowed: bool
    reason: str = ""
    identity: str | None = None  # who asked, when an earlier refusal named them


def judge_permissions(seen: AccessSeen) -> CheckResult:
    name, what = "permissions", f"create {r.JOB_PLURAL}.{r.GROUP} in {seen.namespace}"
    if seen.allowed:
        return ok(name, f"this identity may {what}")
    why = f" ({seen.reason})" if seen.reason else ""
    who = seen.identity or "this identity"
    return failed(name, f"{who} may not {what}{why}", grant_fix(seen.namespace, seen.identity))
