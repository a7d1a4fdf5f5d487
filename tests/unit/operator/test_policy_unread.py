"""A policy that cannot be read yet is unknown, not empty: nothing new is accepted until it is.

The issue's hole: with the ``kinetic-policy`` ConfigMap unreadable at start (an
API error), the operator judged by no policy at all, and a first acceptance
made then stood for good. Now a missing ConfigMap still means no policy, but
a read that fails before any good one leaves the policy unknown: the
reconcile of an object not accepted yet fails with `PolicyUnavailable`,
which puts ``ReconcileFailed`` (saying why) on the object and is retried, and
the object is accepted only once the policy can judge it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kinetic.model.catalog import default_catalog
from kinetic.model.resources import BATCH_PLURAL, JOB_PLURAL
from kinetic_operator.handlers.admission import policy_problems
from kinetic_operator.handlers.batches import observe_units, reconcile_batch_sync
from kinetic_operator.handlers.policy import PolicyHolder, refresh
from kinetic_operator.logic.errors import PolicyUnavailable
from kinetic_operator.logic.policy import (
    Policy,
    UnreadPolicy,
    first_acceptance_violations,
    policy_after_error,
    policy_after_read,
    policy_violations,
)
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.bodies import GRP, container_batch
from kinetic_testing.fake_kube import NOW, FakeKube
from kinetic_testing.reconcilers import Batch, Job

SOURCE = "kinetic-policy in kinetic-system"
CATALOG = default_catalog()
UNREAD = UnreadPolicy(source=SOURCE, why="reading it failed: ApiException: 403 forbidden")
JOB = {"container": {"command": ["true"]}}


# ----------------------------------------------------------------------- the pure rule


def test_judging_by_an_unknown_policy_raises_saying_why_and_what_to_do() -> None:
    with pytest.raises(PolicyUnavailable) as raised:
        policy_violations("KineticJob", "a", JOB, UNREAD, CATALOG)
    message = str(raised.value)
    assert SOURCE in message and "403 forbidden" in message
    assert "a missing ConfigMap means no policy" in message
    assert "permission to get the ConfigMap" in message


@pytest.mark.parametrize(
    ("status", "waits"),
    [
        (None, True),  # never accepted: it waits for the policy
        ({}, True),
        ({"phase": "RUNNING"}, False),  # accepted: no policy question is asked again
        ({"phase": "PENDING", "observedGeneration": 1}, False),  # accepted, no Pod yet
        ({"phase": "FAILED"}, False),
        # What the API server serves after a first reconcile failed and said so: the CRD
        # defaults phase to PENDING in any status. Not an acceptance.
        ({"phase": "PENDING", "conditions": [{"type": "ReconcileFailed"}]}, True),
    ],
)
def test_only_a_first_acceptance_waits_for_the_policy(
    status: dict[str, Any] | None, waits: bool
) -> None:
    body: dict[str, Any] = {"metadata": {"namespace": "a"}, "spec": JOB}
    if status is not None:
        body["status"] = status
    if waits:
        with pytest.raises(PolicyUnavailable):
            first_acceptance_violations("KineticJob", body, UNREAD, CATALOG)
    else:
        assert first_acceptance_violations("KineticJob", body, UNREAD, CATALOG) == []


@pytest.mark.parametrize(
    ("held", "config_map", "known", "error"),
    [
        (UNREAD, None, True, None),  # no ConfigMap: no policy, known at once
        (UNREAD, {"data": {"maxBatchSize": "5"}}, True, None),
        (UNREAD, {"data": {"maxBatchSize": "x"}}, False, "nothing new is accepted"),
        (Policy(source=SOURCE, max_batch_size=3), {"data": {"typo": "1"}}, True, "stays"),
    ],
)
def test_a_read_that_does_not_parse_leaves_an_unknown_policy_unknown(
    held: Policy, config_map: dict[str, Any] | None, known: bool, error: str | None
) -> None:
    got, why = policy_after_read(config_map, held, SOURCE)
    assert isinstance(got, UnreadPolicy) is not known
    assert (why is None) if error is None else (why is not None and error in why)
    if not known:
        assert isinstance(got, UnreadPolicy) and "data.maxBatchSize" in got.why


def test_a_failed_read_keeps_a_policy_once_read_and_an_unknown_one_unknown() -> None:
    known = Policy(source=SOURCE, max_batch_size=3)
    assert policy_after_error(known, "timeout") is known
    still = policy_after_error(UNREAD, "timeout")
    assert isinstance(still, UnreadPolicy) and still.why == "timeout"


def test_the_webhook_leaves_an_object_to_the_reconcile_while_the_policy_is_unknown() -> None:
    settings = OperatorSettings(storage_root="file:///tmp/k")
    assert policy_problems("KineticJob", None, {"spec": JOB}, "a", UNREAD, settings) == []


# ----------------------------------------------------------------------- reading the ConfigMap


class PolicyKube:
    """The two calls `refresh` makes: read the ConfigMap (or fail), post an Event."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] | None | Exception = RuntimeError("connection refused")
        self.events: list[tuple[str, str]] = []

    def read_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def test_the_policy_is_unknown_until_a_read_succeeds_and_kept_through_later_failures() -> None:
    kube, ours = PolicyKube(), OperatorSettings()
    holder = PolicyHolder(policy=UnreadPolicy(source=SOURCE))
    refresh(holder, kube, ours)  # type: ignore[arg-type]
    assert isinstance(holder.policy, UnreadPolicy)
    assert "connection refused" in holder.policy.why
    kube.answer = {"metadata": {"resourceVersion": "7"}, "data": {"maxBatchSize": "5"}}
    refresh(holder, kube, ours)  # type: ignore[arg-type]
    assert type(holder.policy) is Policy and holder.policy.max_batch_size == 5
    kube.answer = RuntimeError("connection refused")
    refresh(holder, kube, ours)  # type: ignore[arg-type]
    assert type(holder.policy) is Policy and holder.policy.max_batch_size == 5


def test_a_policy_that_does_not_parse_from_the_start_stays_unknown_and_says_so() -> None:
    kube, ours = PolicyKube(), OperatorSettings()
    holder = PolicyHolder(policy=UnreadPolicy(source=SOURCE))
    kube.answer = {"metadata": {"resourceVersion": "3"}, "data": {"maxBatchSzie": "5"}}
    refresh(holder, kube, ours)  # type: ignore[arg-type]
    assert isinstance(holder.policy, UnreadPolicy)
    assert [reason for reason, _ in kube.events] == ["InvalidPolicy"]
    assert "nothing new is accepted until this is fixed" in kube.events[0][1]


def test_a_missing_config_map_is_no_policy_at_once() -> None:
    kube, ours = PolicyKube(), OperatorSettings()
    holder = PolicyHolder(policy=UnreadPolicy(source=SOURCE))
    kube.answer = None
    refresh(holder, kube, ours)  # type: ignore[arg-type]
    assert type(holder.policy) is Policy and holder.policy.max_batch_size is None


# ----------------------------------------------------------------------- the reconciles wait


def reconcile_failed(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or () if c["type"] == "ReconcileFailed")


def test_a_job_waits_for_the_policy_then_runs_once_it_allows_it(
    job_settings: OperatorSettings,
) -> None:
    kube = FakeKube()
    job = Job(kube, job_settings, {**JOB, "image": "busybox:1.36"})
    job.policy = UNREAD
    with pytest.raises(PolicyUnavailable):
        job.reconcile()
    status = kube.status_of(JOB_PLURAL, "kj")
    assert "phase" not in status and kube.pods == {}  # not accepted, nothing started
    failed = reconcile_failed(status)
    assert failed["status"] == "True" and failed["reason"] == "PolicyUnavailable"
    assert "cannot be read" in failed["message"] and "retrying" in failed["message"]
    assert [(e[1], "cannot be read" in e[2]) for e in kube.events] == [("ReconcileFailed", True)]
    job.policy = Policy(source=SOURCE, allowed_images=("busybox",))
    job.mem.body.set(None)
    job.reconcile(NOW)
    assert job.status["phase"] == "PENDING" and job.status["attempt"] == 1
    (pod,) = kube.pods.values()  # attempt 1's, running busybox
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"
    assert reconcile_failed(job.status)["status"] == "False"


def test_a_job_the_policy_refuses_once_read_never_runs(
    job_settings: OperatorSettings,
) -> None:
    kube = FakeKube()
    job = Job(kube, job_settings, {**JOB, "image": "alpine:3.20"})
    job.policy = UNREAD
    with pytest.raises(PolicyUnavailable):
        job.reconcile()
    job.policy = Policy(source=SOURCE, allowed_images=("busybox",))
    job.mem.body.set(None)
    job.reconcile(NOW)
    assert job.status["phase"] == "FAILED" and kube.pods == {}
    assert "'alpine:3.20' is not an allowed image" in job.status["message"]


def test_a_batch_waits_for_the_policy_then_is_judged_by_it(
    batch_settings: OperatorSettings,
) -> None:
    kube = FakeKube()
    batch = Batch(kube, batch_settings, container_batch(5))

    def reconcile(policy: Policy) -> None:
        units = observe_units(kube.views(), batch.mem)
        reconcile_batch_sync(kube, batch_settings, batch.mem, "ns", GRP, units, NOW, policy=policy)

    with pytest.raises(PolicyUnavailable):
        reconcile(UNREAD)
    status = kube.status_of(BATCH_PLURAL, GRP)
    assert "phase" not in status and batch.created() == []
    assert reconcile_failed(status)["reason"] == "PolicyUnavailable"
    batch.mem.body.set(None)
    reconcile(Policy(source=SOURCE, max_batch_size=3))
    assert batch.status["phase"] == "FAILED" and batch.created() == []
    assert "batch size 5 exceeds maxBatchSize 3" in batch.status["message"]


def test_the_reconcile_after_the_failure_report_still_waits(
    job_settings: OperatorSettings,  # noqa: F811
) -> None:
    """Seen on the local cluster: the first reconcile failed (policy unreadable) and put
    ReconcileFailed on the job; the API server served that status with the CRD's default
    phase, PENDING; the next reconcile, 66 ms later, took the job for accepted and started
    a Pod the policy refuses."""
    kube = FakeKube()
    job = Job(kube, job_settings, {**JOB, "image": "alpine:3.20"})
    job.policy = UNREAD
    for _ in range(2):
        with pytest.raises(PolicyUnavailable):
            job.reconcile()
        kube.status_of(JOB_PLURAL, "kj").setdefault("phase", "PENDING")  # as served
        job.mem.body.set(None)
    assert kube.pods == {}
    job.policy = Policy(source=SOURCE, allowed_images=("busybox",))
    job.reconcile(NOW)
    assert job.status["phase"] == "FAILED" and kube.pods == {}


def test_an_accepted_batchs_stored_spec_is_not_held_up_by_an_unknown_policy(
    batch_settings: OperatorSettings,  # noqa: F811
) -> None:
    """Only a first acceptance waits: after a restart with the policy unreadable, a batch
    accepted before reads its stored spec back and goes on (it stalled, retrying, before)."""
    from kinetic.model.layout import batch_home
    from kinetic.model.resources import KineticBatchSpec
    from kinetic_operator.accepted import judge_stored

    spec = KineticBatchSpec.model_validate(container_batch(3))
    home = batch_home(batch_settings.storage_root, "ns", GRP, "uid-1")
    assert judge_stored(spec, spec, home, batch_settings, UNREAD) == []
    too_big = Policy(source=SOURCE, max_batch_size=2)
    smaller = spec.model_copy(update={"inputs": spec.inputs.model_copy(update={"items": [1]})})
    assert judge_stored(spec, smaller, home, batch_settings, too_big) != []  # still judged
