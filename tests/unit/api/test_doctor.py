"""`kinetic doctor`'s judgements: what each observation means, and the fix it names (table tests).

The calls to the API server and to storage are tested on the real cluster
(tests/integration/test_doctor_live.py). The webhook's failures are judged here only: making
the shared cluster's webhook unreachable would break every other test running on it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from kinetic.api import kube
from kinetic.api.doctor import (
    CHECKS,
    CLOCK_SKEW_SECONDS,
    AccessSeen,
    Check,
    CheckResult,
    ContextSeen,
    CrdSeen,
    DeploymentSeen,
    LeaseSeen,
    OperatorSeen,
    Status,
    StorageSeen,
    WebhookSeen,
    api_failure,
    expected_schemas,
    failed,
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
    run,
    storage_failure,
)
from kinetic.model import limits
from kinetic.model.names import LEADER_LEASE, fmt_micro_time, holder_pod, parse_time
from kinetic.model.resources import KineticJobSpec
from kinetic.storage import (
    BucketNotFound,
    StorageError,
    StoragePermissionError,
    StorageUnavailable,
    TooLarge,
)
from kubernetes.client import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError, SSLError

REPO = Path(__file__).resolve().parents[3]
JOBS, BATCHES = "kineticjobs.kinetic.dev", "kineticbatches.kinetic.dev"
SERVER = "https://10.0.0.1:6443"
OPERATOR_NS = "kinetic-system"


def judged(result: CheckResult) -> tuple[Status, bool]:
    return result.status, result.blocks


def assert_fix(result: CheckResult, fix: str | None) -> None:
    """No fix for a pass; a failure's fix says ``fix``."""
    if fix is None:
        assert result.fix is None
    else:
        assert fix in (result.fix or "")


# --------------------------------------------------------------------------- context


@pytest.mark.parametrize(
    "seen, detail, fix",
    [
        (
            ContextSeen("prod", SERVER, "v1.28.3"),
            f"prod: {SERVER} answers (Kubernetes v1.28.3)",
            None,
        ),
        (
            ContextSeen("prod", None, None, "config", "context prod not found"),
            "prod: no usable kubeconfig: context prod not found",
            "kubectl config get-contexts",
        ),
        (
            ContextSeen("prod", SERVER, None, "unreachable", "Connection refused"),
            f"prod: the API server at {SERVER} does not answer (Connection refused)",
            "`kubectl --context prod cluster-info`",
        ),
        (
            ContextSeen(None, SERVER, None, "unreachable", "timed out"),
            f"the current context: the API server at {SERVER} does not answer (timed out)",
            "`kubectl cluster-info`",
        ),
        (
            ContextSeen("prod", SERVER, None, "unauthorized", "401: Unauthorized"),
            f"prod: {SERVER} refused this context's credentials (401: Unauthorized)",
            "renew the credentials of prod",
        ),
        (
            ContextSeen("prod", SERVER, None, "tls", "certificate verify failed"),
            f"prod: {SERVER} is not trusted (certificate verify failed)",
            "certificate-authority",
        ),
    ],
)
def test_context(seen: ContextSeen, detail: str, fix: str | None) -> None:
    result = judge_context(seen)
    assert result.name == "context"
    assert result.detail == detail
    if fix is None:
        assert judged(result) == (Status.ok, False) and result.fix is None
    else:
        # Nothing else can be checked without an API server.
        assert judged(result) == (Status.failed, True)
        assert fix in (result.fix or "")


def _unreachable(reason: Exception) -> MaxRetryError:
    return MaxRetryError(None, "/version", reason)


@pytest.mark.parametrize(
    "exc, failure, said",
    [
        (kube.ClusterUnreachable("No usable kubeconfig"), "config", "No usable"),
        (ApiException(status=401, reason="Unauthorized"), "unauthorized", "401: Unauthorized"),
        (ApiException(status=500, reason="Internal Server Error"), "error", "500: Internal"),
        (_unreachable(SSLError("certificate verify failed")), "tls", "certificate verify failed"),
        (
            _unreachable(NewConnectionError(None, "[Errno 111] Connection refused")),
            "unreachable",
            "Connection refused",
        ),
        (TimeoutError("timed out"), "unreachable", "timed out"),
    ],
)
def test_api_failures_are_told_apart(exc: BaseException, failure: str, said: str) -> None:
    kind, text = api_failure(exc)
    assert kind == failure
    assert said in text


def test_a_kubeconfig_problem_is_told_by_its_cause() -> None:
    try:
        raise kube.ClusterUnreachable("No usable kubeconfig (x): ... start the local one") from (
            ValueError("Invalid kube-config file. No configuration found.")
        )
    except kube.ClusterUnreachable as e:
        assert api_failure(e) == ("config", "Invalid kube-config file. No configuration found.")


# --------------------------------------------------------------------------- CRDs

MINE = {
    JOBS: {"type": "object", "properties": {"a": {"type": "string"}}},
    BATCHES: {"type": "object"},
}
OLDER = {"type": "object", "properties": {}}


def found(
    name: str, schema: dict | None = None, served: tuple[str, ...] = ("v1alpha1",)
) -> CrdSeen:
    return CrdSeen(name, "yes", served, MINE[name] if schema is None else schema)


@pytest.mark.parametrize(
    "seen, status, blocks, said",
    [
        (
            [found(JOBS), found(BATCHES)],
            Status.ok,
            False,
            f"{JOBS}, {BATCHES} serve v1alpha1 with this client's schema (kinetic ",
        ),
        (
            [found(JOBS, OLDER), found(BATCHES)],
            Status.failed,
            False,  # the webhook can still be probed
            f"{JOBS}: v1alpha1 schema different from this client's (kinetic ",
        ),
        (
            [CrdSeen(JOBS, "missing"), found(BATCHES)],
            Status.failed,
            True,
            f"{JOBS} is not installed",
        ),
        (
            [CrdSeen(JOBS, "missing"), CrdSeen(BATCHES, "missing")],
            Status.failed,
            True,
            f"{JOBS} is not installed; {BATCHES} is not installed",
        ),
        (
            [found(JOBS, served=("v1beta1",)), found(BATCHES)],
            Status.failed,
            True,
            f"{JOBS} does not serve v1alpha1 (serves: v1beta1)",
        ),
        (
            [CrdSeen(JOBS, "forbidden"), CrdSeen(BATCHES, "forbidden")],
            Status.failed,
            False,
            "may not read CustomResourceDefinitions",
        ),
    ],
)
def test_crds(seen: list[CrdSeen], status: Status, blocks: bool, said: str) -> None:
    result = judge_crds(seen, MINE)
    assert judged(result) == (status, blocks)
    assert said in result.detail
    if status is Status.failed and "forbidden" not in {c.found for c in seen}:
        assert "python -m kinetic.model.crdgen kinetic-crds && kubectl apply -f kinetic-crds/" in (
            result.fix or ""
        )


def test_the_schemas_compared_are_the_charts() -> None:
    """What the doctor expects is what the chart (and `make crds`) installs."""
    expected = expected_schemas()
    for name in (JOBS, BATCHES):
        plural = name.split(".")[0]
        crd = yaml.safe_load((REPO / "helm/kinetic/crds" / f"{plural}.yaml").read_text())
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1"
        assert expected[name] == version["schema"]["openAPIV3Schema"]


# --------------------------------------------------------------------------- operator


@pytest.mark.parametrize(
    "deployments, status, said, fix",
    [
        (
            (DeploymentSeen("kinetic-operator", 1, 1),),
            Status.ok,
            "kinetic-system/kinetic-operator 1/1 ready",
            None,
        ),
        (
            (DeploymentSeen("kinetic-operator", 2, 1),),
            Status.ok,
            "kinetic-system/kinetic-operator 1/2 ready",
            None,
        ),
        (
            (DeploymentSeen("kinetic-operator", 1, 0),),
            Status.failed,
            "no ready replica: kinetic-system/kinetic-operator 0/1 ready",
            "`kubectl -n kinetic-system logs deployment/kinetic-operator`",
        ),
        (
            (DeploymentSeen("kinetic-operator", 0, 0),),
            Status.failed,
            "0/0 ready",
            "`kubectl -n kinetic-system scale deployment/kinetic-operator --replicas=1`",
        ),
        (
            (),
            Status.failed,
            "no Deployment labelled app.kubernetes.io/name=kinetic in namespace kinetic-system",
            "set KINETIC_OPERATOR_NAMESPACE",
        ),
        (
            None,
            Status.failed,
            "may not list Deployments in kinetic-system",
            "kubectl -n kinetic-system get deployment -l app.kubernetes.io/name=kinetic",
        ),
    ],
)
def test_operator(
    deployments: tuple[DeploymentSeen, ...] | None, status: Status, said: str, fix: str | None
) -> None:
    result = judge_operator(OperatorSeen(OPERATOR_NS, deployments))
    assert judged(result) == (status, False)
    assert said in result.detail
    assert_fix(result, fix)


# --------------------------------------------------------------------------- leader

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
HOLDER = "kinetic-operator-7d9f8b6c5-x2k4q_3f9a1c0e"
LOGS = "`kubectl -n kinetic-system logs -l app.kubernetes.io/name=kinetic`"
PODS = "`kubectl -n kinetic-system get pods -l app.kubernetes.io/name=kinetic`"


def _lease(
    holder: str = HOLDER, ago: float | None = 1.0, transitions: int = 0, duration: int = 15
) -> LeaseSeen:
    renewed = None if ago is None else NOW - timedelta(seconds=ago)
    return LeaseSeen(OPERATOR_NS, NOW, "yes", holder, renewed, duration, transitions)


@pytest.mark.parametrize(
    "seen, status, said, fix",
    [
        (
            _lease(ago=1.4, transitions=3),
            Status.ok,
            "held by kinetic-operator-7d9f8b6c5-x2k4q (renewed 1 s ago, 3 transitions)",
            None,
        ),
        (_lease(ago=0, transitions=1), Status.ok, "(renewed 0 s ago, 1 transition)", None),
        # The leader's clock a little ahead of this one: a renewal "in the future" is now.
        (_lease(ago=-3), Status.ok, "renewed 0 s ago, 0 transitions", None),
        # Within the lease plus the clock skew forgiven: still held.
        (_lease(ago=15 + CLOCK_SKEW_SECONDS), Status.ok, "held by kinetic-operator-", None),
        (
            _lease(ago=15 + CLOCK_SKEW_SECONDS + 1),
            Status.failed,
            "no leader: the last holder kinetic-operator-7d9f8b6c5-x2k4q stopped renewing "
            f"{16 + CLOCK_SKEW_SECONDS} s ago; a running standby takes over within 15 s",
            LOGS,
        ),
        (_lease(ago=600), Status.failed, "stopped renewing 600 s ago", "compare `date -u`"),
        (_lease(ago=None), Status.failed, "stopped renewing at an unknown time", LOGS),
        # A holder without a process part is a Pod name as it is.
        (_lease(holder="operator-0"), Status.ok, "held by operator-0 (", None),
        (
            _lease(holder="", ago=4, duration=1),
            Status.failed,
            "no leader: the last holder released the Lease 4 s ago (a clean shutdown)",
            PODS,
        ),
        (
            LeaseSeen(OPERATOR_NS, NOW, "missing", elected=True),
            Status.failed,
            f"no replica has led yet: there is no Lease kinetic-system/{LEADER_LEASE}",
            "not running with --leader-election",
        ),
        (  # the Deployment cannot be read: no Lease is still a failure
            LeaseSeen(OPERATOR_NS, NOW, "missing"),
            Status.failed,
            "no replica has led yet",
            "not running with --leader-election",
        ),
        (  # one replica without election (operator.leaderElection false): nothing to lead
            LeaseSeen(OPERATOR_NS, NOW, "missing", elected=False),
            Status.ok,
            "no leader election",
            None,
        ),
        (
            LeaseSeen(OPERATOR_NS, NOW, "forbidden"),
            Status.failed,
            "this identity may not read Leases in kinetic-system: cannot tell which operator "
            "replica leads",
            f"`kubectl -n kinetic-system get lease {LEADER_LEASE}`",
        ),
    ],
)
def test_leader(seen: LeaseSeen, status: Status, said: str, fix: str | None) -> None:
    result = judge_leader(seen)
    assert judged(result) == (status, False)  # nothing later needs a leader to run
    assert said in result.detail, result.detail
    assert_fix(result, fix)


@pytest.mark.parametrize(
    "holder, pod",
    [
        ("kinetic-operator-7d9f8b6c5-x2k4q_3f9a1c0e", "kinetic-operator-7d9f8b6c5-x2k4q"),
        ("pod_with_underscores_ab12", "pod_with_underscores"),
        ("operator-0", "operator-0"),
    ],
)
def test_the_pod_is_the_holder_before_its_last_underscore(holder: str, pod: str) -> None:
    assert holder_pod(holder) == pod


def test_a_renew_time_as_the_api_server_writes_it_is_read_to_the_microsecond() -> None:
    renewed = parse_time("2025-03-01T11:59:58.250000Z")
    assert fmt_micro_time(renewed) == "2025-03-01T11:59:58.250000Z"
    result = judge_leader(LeaseSeen(OPERATOR_NS, NOW, "yes", HOLDER, renewed))
    assert "renewed 1 s ago" in result.detail


def test_the_leader_is_checked_right_after_the_operator() -> None:
    names = [c.name for c in CHECKS]
    assert names == [
        "context",
        "crds",
        "operator",
        "leader",
        "webhook",
        "storage",
        "permissions",
    ]


# --------------------------------------------------------------------------- webhook

DENIED = (
    'admission webhook "kinetic-job-spec.kinetic.dev" denied the request: '
    "spec.volumes: mount path '/kinetic-doctor' is given twice"
)
FORBIDDEN = (
    'kineticjobs.kinetic.dev is forbidden: User "system:serviceaccount:team:robot" cannot '
    'create resource "kineticjobs" in API group "kinetic.dev" in the namespace "team"'
)


@pytest.mark.parametrize(
    "seen, status, said, fix",
    [
        (WebhookSeen("team", False, 422, DENIED), Status.ok, DENIED, None),
        (
            WebhookSeen("team", True),
            Status.failed,
            "accepted an invalid KineticJob (dry run in team): the webhook is absent or not "
            "answering, and it fails open",
            "`kubectl get validatingwebhookconfiguration kinetic.dev`",
        ),
        (
            WebhookSeen(
                "team",
                False,
                500,
                'Internal error occurred: failed calling webhook "kinetic-job-spec.kinetic.dev": '
                "connection refused",
            ),
            Status.failed,
            "could not call the webhook",
            "`kubectl -n kinetic-system logs -l app.kubernetes.io/name=kinetic`",
        ),
        (
            WebhookSeen("team", False, 403, FORBIDDEN),
            Status.failed,
            "may not create KineticJobs in team, so the API server refused the probe before the "
            "webhook saw it",
            "--serviceaccount=team:robot",
        ),
        (
            WebhookSeen("nowhere", False, 404, 'namespaces "nowhere" not found'),
            Status.failed,
            "namespace nowhere does not exist",
            "`kubectl create namespace nowhere`",
        ),
        (
            WebhookSeen("team", False, 404, "the server could not find the requested resource"),
            Status.failed,
            "kineticjobs.kinetic.dev/v1alpha1 is not served",
            "python -m kinetic.model.crdgen",
        ),
        (
            WebhookSeen(
                "team",
                False,
                400,
                'admission webhook "validation.gatekeeper.sh" denied the request: no',
            ),
            Status.failed,
            "another admission webhook denied the probe",
            "administrator",
        ),
        (
            WebhookSeen("team", False, 422, 'KineticJob.kinetic.dev "x" is invalid: spec.volumes'),
            Status.failed,
            "the CRD's schema refused the probe",
            "python -m kinetic.model.crdgen",
        ),
        (
            WebhookSeen("team", False, 503, "the server is currently unable to handle the request"),
            Status.failed,
            "the dry run failed (503)",
            "readyz",
        ),
    ],
)
def test_webhook(seen: WebhookSeen, status: Status, said: str, fix: str | None) -> None:
    result = judge_webhook(seen, OPERATOR_NS)
    assert judged(result) == (status, False)
    assert said in result.detail
    assert_fix(result, fix)


def test_the_probe_passes_the_schema_and_breaks_the_webhooks_rule() -> None:
    """The probe reaches the webhook (the CRD's model admits it) and is denied there by the
    rule the operator's webhook applies to every KineticJob (`limits.check_job_spec`)."""
    body = invalid_job()
    assert body["kind"] == "KineticJob" and "generateName" in body["metadata"]
    KineticJobSpec.model_validate(body["spec"])
    assert limits.check_job_spec(body["spec"]) == [
        "spec.volumes: mount path '/kinetic-doctor' is given twice"
    ]


# --------------------------------------------------------------------------- storage

PREFIX = "gs://bucket/kinetic/namespaces/team/"
PROBE = f"{PREFIX}uploads/kinetic-doctor-0123456789abcdef/probe"


@pytest.mark.parametrize(
    "seen, said, fix",
    [
        (StorageSeen(PREFIX, PROBE), f"wrote, read back and deleted {PROBE} under {PREFIX}", None),
        (
            StorageSeen(failure="config", error="No storage root for payloads and results."),
            "No storage root",
            "KINETIC_STORAGE_ROOT=gs://BUCKET/PREFIX",
        ),
        (
            StorageSeen(failure="namespace", error="namespace 'Team' cannot be used"),
            "namespace 'Team' cannot be used",
            "-n NAMESPACE",
        ),
        (
            StorageSeen(PREFIX, PROBE, "permission", "write", "permission denied"),
            f"write of {PROBE} failed: permission denied",
            "roles/storage.objectAdmin on gs://bucket",
        ),
        (
            StorageSeen(PREFIX, PROBE, "bucket", "write", "bucket 'bucket' does not exist"),
            "does not exist",
            "`gcloud storage buckets create gs://bucket`",
        ),
        (
            StorageSeen(PREFIX, PROBE, "unavailable", "write", "cannot reach storage"),
            "cannot reach storage",
            "network",
        ),
        (
            StorageSeen(PREFIX, PROBE, "mismatch", "read", "other bytes came back"),
            f"read of {PROBE} failed: other bytes came back",
            "proxy or cache",
        ),
        (
            StorageSeen(PREFIX, PROBE, "error", "delete", "storage request failed"),
            f"delete of {PROBE} failed",
            "run it again",
        ),
    ],
)
def test_storage(seen: StorageSeen, said: str, fix: str | None) -> None:
    result = judge_storage(seen, OPERATOR_NS)
    assert judged(result) == (Status.ok if fix is None else Status.failed, False)
    assert said in result.detail
    assert_fix(result, fix)


@pytest.mark.parametrize(
    "exc, failure",
    [
        (StoragePermissionError("denied"), "permission"),
        (BucketNotFound("no bucket"), "bucket"),
        (StorageUnavailable("down"), "unavailable"),
        (TooLarge("gs://b/probe is larger than 1,024 bytes"), "mismatch"),
        (ValueError("unsupported storage URI 's3://b/x'"), "config"),
        (StorageError("odd"), "error"),
        (OSError("disk"), "error"),
    ],
)
def test_storage_failures_are_told_apart(exc: Exception, failure: str) -> None:
    assert storage_failure(exc) == failure


# --------------------------------------------------------------------------- permissions


@pytest.mark.parametrize(
    "seen, status, said, subject",
    [
        (
            AccessSeen("team", True),
            Status.ok,
            "this identity may create kineticjobs.kinetic.dev in team",
            None,
        ),
        (
            AccessSeen("team", False),
            Status.failed,
            "this identity may not create kineticjobs.kinetic.dev in team",
            "--user=YOUR_USER` (a ServiceAccount: --serviceaccount=NAMESPACE:NAME)",
        ),
        (
            AccessSeen("team", False, "no RBAC policy matched", "system:serviceaccount:team:robot"),
            Status.failed,
            "system:serviceaccount:team:robot may not create kineticjobs.kinetic.dev in team "
            "(no RBAC policy matched)",
            "--serviceaccount=team:robot`",
        ),
        (
            AccessSeen("team", False, "", "alice@example.com"),
            Status.failed,
            "alice@example.com may not create",
            "--user=alice@example.com`",
        ),
    ],
)
def test_permissions(seen: AccessSeen, status: Status, said: str, subject: str | None) -> None:
    result = judge_permissions(seen)
    assert judged(result) == (status, False)
    assert result.detail == said if status is Status.ok else said in result.detail
    if subject is not None:
        fix = result.fix or ""
        assert fix.startswith(
            "an administrator grants it: `kubectl -n team create role kinetic-user"
        )
        assert "--resource=kineticjobs.kinetic.dev,kineticbatches.kinetic.dev" in fix
        assert subject in fix


@pytest.mark.parametrize(
    "message, identity",
    [
        (FORBIDDEN, "system:serviceaccount:team:robot"),
        ('customresourcedefinitions.apiextensions.k8s.io is forbidden: User "bob" cannot', "bob"),
        ("the server could not find the requested resource", None),
    ],
)
def test_identity_in_a_refusal(message: str, identity: str | None) -> None:
    assert identity_in(message) == identity


# --------------------------------------------------------------------------- the run


def _fixed(result: CheckResult):
    return lambda target: result


def test_checks_run_in_order_and_a_blocking_failure_skips_what_needs_it() -> None:
    checks = [
        Check("context", _fixed(ok("context", "up")), needs=()),
        Check("crds", _fixed(failed("crds", "not installed", "apply", blocks=True))),
        Check("operator", _fixed(failed("operator", "0/1 ready", "logs"))),
        Check("webhook", _fixed(ok("webhook", "denied")), needs=("context", "crds")),
        Check("leader", _fixed(ok("leader", "elected")), needs=("context", "operator")),
    ]
    results = list(run("team", None, checks))
    assert [(r.name, r.status) for r in results] == [
        ("context", Status.ok),
        ("crds", Status.failed),
        ("operator", Status.failed),
        ("webhook", Status.skipped),  # no CRD to probe with
        ("leader", Status.ok),  # a failure that does not block leaves the rest to run
    ]
    assert results[3].detail == "the crds check failed"
    assert results[3].fix is None


def test_no_api_server_skips_every_later_check() -> None:
    down = failed("context", "does not answer", "cluster-info", blocks=True)
    checks = [Check("context", _fixed(down), needs=())] + [
        Check(name, _fixed(ok(name, "never asked"))) for name in ("crds", "storage")
    ]
    results = list(run(None, "prod", checks))
    assert [r.status for r in results] == [Status.failed, Status.skipped, Status.skipped]
    assert {r.detail for r in results[1:]} == {"the context check failed"}


def test_a_call_that_fails_unexpectedly_is_that_checks_failure() -> None:
    def breaks(target):
        raise ApiException(status=500, reason="Internal Server Error")

    (result,) = run(None, "prod", [Check("crds", breaks, needs=())])
    assert judged(result) == (Status.failed, False)
    assert result.detail == "the check could not finish: 500: Internal Server Error"
    assert "kubectl --context prod" in (result.fix or "")


def test_the_json_form_carries_name_status_detail_and_fix_only() -> None:
    result = failed("crds", "not installed", "apply", blocks=True)
    assert result.model_dump(mode="json") == {
        "name": "crds",
        "status": "failed",
        "detail": "not installed",
        "fix": "apply",
    }
