"""The administrator's policy (ConfigMap kinetic-policy) on the real API server.

An edit holds within 10 s without a restart; the webhook refuses what it
forbids on create and on `kubectl apply --dry-run=server`, with the limit
and the ConfigMap named; an edit that does not parse keeps the previous
policy and says so on the ConfigMap; a batch accepted before the policy
tightened runs to the end; and objects stored while the webhook was down
are failed by the operator (InvalidSpec); and a policy the operator cannot
read when it starts holds back every first acceptance until it can. Every
test restores the chart's policy (and RBAC), so the rest of the suite runs
unlimited.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, cast

import pytest
from kinetic.model.names import LABEL_JOB
from kinetic_dev.operator import NAMESPACE as SYSTEM
from kinetic_testing.cluster import (
    EFFECT_SECONDS,
    kubectl_in,
    refused,
    refused_for,
    webhook_off,
)
from kinetic_testing.cluster import POLICY_CONFIGMAP as CM
from kinetic_testing.cluster import batch_json as batch
from kinetic_testing.cluster import job_json as job
from kube_helpers import OPERATOR_SELECTOR, Kube, PodWatch, wait_for, wait_operator_ready

pytestmark = pytest.mark.integration

API = "kinetic.dev/v1alpha1"
SOURCE = f"({CM} in {SYSTEM})"
OPERATOR_ACCOUNT = f"system:serviceaccount:{SYSTEM}:kinetic-operator"
# Every Role of the chart that lets the operator's ServiceAccount get the policy: its own,
# and the one that lets anyone authenticated (ServiceAccounts too) read it.
POLICY_READERS = ("kinetic-operator", "kinetic-config-reader")


def test_an_edit_holds_within_seconds_and_refuses_on_create_and_dry_run(
    kube: Kube, namespace: str, policy: Callable[[dict[str, str]], None]
) -> None:
    oversize = batch("oversize", namespace, 11)
    big_gpu = job("big-gpu", namespace, accelerator="gpu-a100x8")
    wide = job("wide", namespace, hosts=3)
    assert refused(kube, oversize) is None  # the chart's default: unlimited

    edited = time.monotonic()
    policy({"maxBatchSize": "10", "maxAcceleratorsPerJob": "4", "maxHostsPerJob": "2"})
    wait_for(
        lambda: refused_for(kube, oversize, "exceeds maxBatchSize 10"),
        timeout=EFFECT_SECONDS,
        interval=0.2,
        what=f"the edit to hold within {EFFECT_SECONDS}s",
    )
    print(f"policy edit took effect after {time.monotonic() - edited:.1f}s")

    expected = {
        oversize: f"batch size 11 exceeds maxBatchSize 10 {SOURCE}",
        big_gpu: "spec.accelerator 'gpu-a100x8' requests 8 accelerators per job, which exceeds "
        f"maxAcceleratorsPerJob 4 {SOURCE}",
        wide: f"spec.hosts is 3, above maxHostsPerJob 2 {SOURCE}: ask for at most 2 hosts",
    }
    for text, message in expected.items():
        for args in (("create",), ("apply", "--dry-run=server")):
            out = kubectl_in(kube, text, *args)
            assert out.returncode != 0 and "denied the request" in out.stderr, (args, out.stderr)
            assert message in out.stderr, out.stderr
    for kind, name in (
        ("kineticbatches", "oversize"),
        ("kineticjobs", "big-gpu"),
        ("kineticjobs", "wide"),
    ):
        assert kube.kubectl("get", kind, name, "-n", namespace, check=False).returncode != 0
    # At the limits: admitted.
    assert refused(kube, batch("ten", namespace, 10, accelerator="gpu-l4x4")) is None
    assert refused(kube, job("pair", namespace, hosts=2, accelerator="gpu-l4x2")) is None


def test_namespaces_and_images(
    kube: Kube, namespace: str, policy: Callable[[dict[str, str]], None]
) -> None:
    policy({"allowedNamespaces": "team-x", "allowedImages": "ghcr.io/acme/"})
    elsewhere = job("elsewhere", namespace)
    wait_for(
        lambda: refused_for(kube, elsewhere, "allowed namespaces: team-x"),
        timeout=EFFECT_SECONDS,
        what="the edit to hold",
    )
    assert f"namespace '{namespace}' may not run Kinetic jobs; allowed namespaces: team-x" in (
        refused(kube, elsewhere) or ""
    )
    policy({"allowedNamespaces": namespace, "allowedImages": "ghcr.io/acme/"})
    foreign = job("foreign", namespace, image="docker.io/library/busybox:1")
    wait_for(lambda: refused(kube, elsewhere) is None, timeout=EFFECT_SECONDS, what="the edit")
    assert (
        "spec.image 'docker.io/library/busybox:1' is not an allowed image; allowed images: "
        "ghcr.io/acme/" in (refused(kube, foreign) or "")
    )
    assert refused(kube, job("ours", namespace, image="ghcr.io/acme/tool:3")) is None


def test_an_invalid_edit_keeps_the_last_good_policy_and_says_so(
    kube: Kube, namespace: str, policy: Callable[[dict[str, str]], None]
) -> None:
    policy({"maxBatchSize": "10"})
    wait_for(
        lambda: refused_for(kube, batch("b", namespace, 11), "exceeds maxBatchSize 10"),
        timeout=EFFECT_SECONDS,
        what="the edit to hold",
    )
    policy({"maxBatchSize": "10", "maxBatchSzie": "2"})

    def warned() -> bool:
        out = kube.kubectl(
            "get",
            "events",
            "-n",
            SYSTEM,
            "--field-selector",
            f"involvedObject.name={CM},reason=InvalidPolicy",
            "-o",
            "json",
        ).stdout
        return any(
            "data.maxBatchSzie is not a policy key" in e["message"]
            and "previous policy stays in force" in e["message"]
            for e in json.loads(out)["items"]
        )

    wait_for(warned, timeout=EFFECT_SECONDS, what="a Warning Event InvalidPolicy on the ConfigMap")
    assert refused_for(kube, batch("b", namespace, 11), "exceeds maxBatchSize 10")  # still 10
    assert refused(kube, batch("b", namespace, 3)) is None  # not the typo's 2


def test_a_policy_tightened_later_leaves_an_accepted_batch_running(
    kube: Kube, namespace: str, policy: Callable[[dict[str, str]], None]
) -> None:
    text = json.loads(batch("accepted", namespace, 3))
    text["spec"]["maxConcurrent"] = 1
    assert kubectl_in(kube, json.dumps(text), "create").returncode == 0
    wait_for(lambda: _phase(kube, namespace, "accepted") == "RUNNING", timeout=60, what="it to run")
    policy({"maxBatchSize": "1"})
    wait_for(
        lambda: refused_for(kube, batch("b", namespace, 3), "exceeds maxBatchSize 1 "),
        timeout=EFFECT_SECONDS,
        what="the edit to hold",
    )
    # An update that adds nothing the policy forbids is still allowed.
    patched = kube.kubectl(
        "patch",
        "kineticbatch",
        "accepted",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"maxConcurrent": 2}}',
        check=False,
    )
    assert patched.returncode == 0, patched.stderr
    wait_for(
        lambda: _phase(kube, namespace, "accepted") in ("SUCCEEDED", "FAILED"),
        timeout=120,
        what="the accepted batch to end",
    )
    assert _phase(kube, namespace, "accepted") == "SUCCEEDED"


def test_the_operator_fails_what_was_stored_while_the_webhook_was_down(
    kube: Kube, namespace: str, policy: Callable[[dict[str, str]], None]
) -> None:
    if not kube.is_local:
        pytest.skip("deletes and restores the webhook configuration of the local cluster")
    policy({"maxBatchSize": "2", "maxAcceleratorsPerJob": "1"})
    wait_for(
        lambda: refused_for(kube, batch("b", namespace, 3), "exceeds maxBatchSize 2 "),
        timeout=EFFECT_SECONDS,
        what="the edit to hold",
    )
    with webhook_off(kube, (namespace, namespace)):
        assert kubectl_in(kube, batch("too-big", namespace, 3), "create").returncode == 0
        assert (
            kubectl_in(kube, job("too-gpu", namespace, accelerator="gpu-l4x2"), "create").returncode
            == 0
        )
    for kind, name, message in (
        ("kineticbatches", "too-big", f"batch size 3 exceeds maxBatchSize 2 {SOURCE}"),
        ("kineticjobs", "too-gpu", f"exceeds maxAcceleratorsPerJob 1 {SOURCE}"),
    ):
        status = wait_for(
            lambda k=kind, n=name: _ended(kube, k, namespace, n),
            timeout=60,
            what=f"{name} to be failed by the operator",
        )
        assert status["phase"] == "FAILED" and message in status["message"], status
        cond = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert cond["status"] == "True" and cond["reason"] == "InvalidSpec"
    assert kube.core.list_namespaced_pod(namespace).items == []


def test_a_policy_unreadable_at_start_accepts_nothing_until_it_is_read(
    kube: Kube, namespace: str, policy: Callable[[dict[str, str]], None]
) -> None:
    """The issue's hole: an operator that could not read its policy judged by none, and a
    first acceptance made then stood. Here the operator starts with the policy's GET
    forbidden (403: not a missing ConfigMap, which means no policy) and two jobs are
    created: one the policy refuses, one it allows. Neither starts a Pod, and each says
    why (ReconcileFailed) where `kubectl describe` shows it; once the operator can read
    the policy again, the allowed one runs and the refused one fails naming the rule,
    never having had a Pod."""
    policy({"maxAcceleratorsPerJob": "1"})
    rule = f"exceeds maxAcceleratorsPerJob 1 {SOURCE}"
    over = _job_text("over", namespace, accelerator="gpu-l4x2")
    fine = _job_text("fine", namespace)
    wait_for(lambda: refused_for(kube, over, rule), timeout=EFFECT_SECONDS, what="the edit to hold")
    with PodWatch(kube, namespace) as pods:
        with _policy_unreadable(kube):
            _restart_operator(kube)  # both replicas start without a good read
            # The webhook leaves an object to the reconcile while the policy is unknown:
            # admitting, not judging by no policy (the reconcile is what waits).
            assert refused(kube, over) is None
            for text in (over, fine):
                created = kubectl_in(kube, text, "create")
                assert created.returncode == 0, created.stderr
            for name in ("over", "fine"):  # `kubectl describe` shows why each waits
                said = _waited_list(
                    partial(_events, kube, namespace, name, "ReconcileFailed"),
                    timeout=60,
                    what=f"a ReconcileFailed Event on job {name}",
                )
                assert any(f"admission policy {SOURCE} cannot be read" in e for e in said), said
                assert any("is forbidden" in e for e in said), said
            assert pods.added == [], f"Pods started while the policy was unknown: {pods.added}"
            for name in ("over", "fine"):  # not accepted, and the condition says why
                status = _status(kube, "kineticjobs", namespace, name)
                # Not accepted: no generation observed (the phase shows the CRD's default).
                assert "observedGeneration" not in status, status
                assert status.get("phase", "PENDING") == "PENDING", status
                waiting = _condition(kube, namespace, name, "ReconcileFailed") or {}
                assert (waiting.get("status"), waiting.get("reason")) == (
                    "True",
                    "PolicyUnavailable",
                ), status
                assert "cannot be read" in waiting["message"], waiting
        fine_status = _waited(
            partial(_ended, kube, "kineticjobs", namespace, "fine"),
            timeout=120,
            what="the allowed job to run once the policy is read",
        )
        over_status = _waited(
            partial(_ended, kube, "kineticjobs", namespace, "over"),
            timeout=60,
            what="the refused job to be failed once the policy is read",
        )
    assert fine_status["phase"] == "SUCCEEDED", fine_status
    assert over_status["phase"] == "FAILED", over_status
    assert rule in over_status["message"], over_status
    failed = next(c for c in over_status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidSpec"), failed
    for name in ("over", "fine"):
        settled = _condition(kube, namespace, name, "ReconcileFailed")
        assert settled is not None and settled["status"] == "False", settled
    assert pods.labelled(LABEL_JOB, "over") == []  # never a Pod, not even briefly
    assert len(pods.labelled(LABEL_JOB, "fine")) == 1, pods.added


def _waited(pred: Callable[[], dict[str, Any] | None], timeout: float, what: str) -> dict[str, Any]:
    """`wait_for` of a status (or condition) that is there once ``pred`` finds it."""
    return cast(dict[str, Any], wait_for(pred, timeout=timeout, interval=0.5, what=what))


def _waited_list(pred: Callable[[], list[str]], timeout: float, what: str) -> list[str]:
    return cast(list[str], wait_for(pred, timeout=timeout, interval=0.5, what=what))


def _job_text(name: str, ns: str, **spec: object) -> str:
    body = {"container": {"image": "busybox:1.36", "command": ["true"]}, **spec}
    meta = {"name": name, "namespace": ns}
    return json.dumps({"apiVersion": API, "kind": "KineticJob", "metadata": meta, "spec": body})


def _can_read_policy(kube: Kube) -> bool:
    """`kubectl auth can-i get` the policy ConfigMap, as the operator's ServiceAccount."""
    out = kube.kubectl(
        "auth", "can-i", "get", f"configmaps/{CM}", "-n", SYSTEM, f"--as={OPERATOR_ACCOUNT}",
        check=False,
    )  # fmt: skip
    return out.stdout.strip() == "yes"


def _set_rules(kube: Kube, role: str, rules: list[dict[str, Any]]) -> None:
    patch = json.dumps([{"op": "replace", "path": "/rules", "value": rules}])
    kube.kubectl("patch", "role", role, "-n", SYSTEM, "--type=json", "-p", patch)


@contextmanager
def _policy_unreadable(kube: Kube) -> Iterator[None]:
    """The operator's GET of the policy answered 403 (each Role that grants it names
    another ConfigMap instead); the Roles as they were afterwards, always, and the
    operator Ready and able to read the policy again."""
    saved = {
        role: json.loads(kube.kubectl("get", "role", role, "-n", SYSTEM, "-o", "json").stdout)[
            "rules"
        ]
        for role in POLICY_READERS
    }
    try:
        for role, rules in saved.items():
            renamed = [
                {**r, "resourceNames": [f"{n}-not" if n == CM else n for n in r["resourceNames"]]}
                if CM in (r.get("resourceNames") or ())
                else r
                for r in rules
            ]
            _set_rules(kube, role, renamed)
        wait_for(lambda: not _can_read_policy(kube), timeout=30, what="the GET to be forbidden")
        yield
    finally:
        for role, rules in saved.items():
            _set_rules(kube, role, rules)
        wait_for(lambda: _can_read_policy(kube), timeout=30, what="the GET to be allowed again")
        wait_operator_ready(kube)


def _restart_operator(kube: Kube) -> None:
    """Replace every operator Pod (`kubectl rollout restart`) and wait until the new ones
    are Ready, one of them leading: they start with nothing read."""
    kube.kubectl("rollout", "restart", "deployment/kinetic-operator", "-n", SYSTEM)
    done = kube.kubectl(
        "rollout", "status", "deployment/kinetic-operator", "-n", SYSTEM, "--timeout=180s",
        timeout=200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(lambda: not _old_operator_pods(kube), 120, 0.5, "the old replicas to be gone")
    wait_operator_ready(kube)


def _old_operator_pods(kube: Kube) -> list[str]:
    """Operator Pods still shutting down: until they are gone they may answer admission
    with the policy they read."""
    got = kube.kubectl("get", "pods", "-n", SYSTEM, "-l", OPERATOR_SELECTOR, "-o", "json")
    items = json.loads(got.stdout)["items"]
    return [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")]


def _condition(kube: Kube, ns: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = _status(kube, "kineticjobs", ns, name).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def _events(kube: Kube, ns: str, name: str, reason: str) -> list[str]:
    """The messages of the Events about ``name`` for ``reason`` (`kubectl describe`)."""
    out = kube.kubectl(
        "get", "events", "-n", ns, "--field-selector",
        f"involvedObject.name={name},reason={reason}", "-o", "json",
    ).stdout  # fmt: skip
    return [e.get("message", "") for e in json.loads(out)["items"]]


def _status(kube: Kube, kind: str, ns: str, name: str) -> dict:
    out = kube.kubectl("get", kind, name, "-n", ns, "-o", "jsonpath={.status}", check=False)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}


def _phase(kube: Kube, ns: str, name: str) -> str | None:
    return _status(kube, "kineticbatches", ns, name).get("phase")


def _ended(kube: Kube, kind: str, ns: str, name: str) -> dict | None:
    status = _status(kube, kind, ns, name)
    return status if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") else None


@pytest.mark.parametrize(
    "verb,resource,namespace,allowed",
    [
        ("get", f"configmaps/{CM}", SYSTEM, True),
        ("update", f"configmaps/{CM}", SYSTEM, False),  # the administrator's, never written
        ("get", "configmaps/kube-root-ca.crt", SYSTEM, False),
        ("list", "configmaps", SYSTEM, False),
        ("watch", "configmaps", "default", False),
        ("get", f"configmaps/{CM}", "default", False),
    ],
)
def test_the_operator_reads_only_the_policy_config_map(
    kube: Kube, operator: None, verb: str, resource: str, namespace: str, allowed: bool
) -> None:
    """`kubectl auth can-i` as the operator's ServiceAccount, with the chart's RBAC."""
    out = kube.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        namespace,
        f"--as=system:serviceaccount:{SYSTEM}:kinetic-operator",
        check=False,
    )
    assert out.stdout.strip() == ("yes" if allowed else "no"), out.stdout + out.stderr
