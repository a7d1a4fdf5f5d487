"""Two operator replicas, one leader: faults of the leader mid-batch, on the local cluster.

The chart runs two replicas; the holder of the leader Lease reconciles, both
serve the admission webhook. Each test breaks the leader while a container
batch runs and then checks what a user would: the batch succeeds, every
input ran exactly once (each run leaves one object in storage, counted per
index), and a job submitted right after the fault is reconciled by the new
leader. The hand-over times are printed (``-s``) as measurements, not
asserted: speed lives in ``bench/``.

* SIGKILL of the leader's process, then a force-delete of its Pod;
* ``kubectl rollout restart``: the leader releases the Lease on SIGTERM;
* ``helm upgrade`` (and back) of the running release;
* SIGSTOP of the leader past its renew deadline: while it is stalled the
  other replica answers admission (a bad object is denied); it then takes
  the Lease; the stalled one, resumed, exits without a single Pod create
  after losing, as the API server's audit log shows (`kinetic_dev.cluster`
  audits Pod creates with the caller's address).

The processes are signalled on this machine (the node), so these tests need
the local cluster; elsewhere they are skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kinetic.api.doctor import WEBHOOK_SUFFIX, invalid_job
from kinetic.model import resources as r
from kinetic.model.names import LEADER_LEASE, parse_time
from kinetic_dev import operator as local_operator
from kinetic_dev.config import LocalConfig
from kube_helpers import (
    OPERATOR_NAMESPACE,
    Kube,
    assert_each_ran_once,
    ended_status,
    leader_lease,
    local_up,
    runs_in,
    wait_for,
    witness_batch,
)
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

pytestmark = pytest.mark.integration

TOTAL = 12  # inputs of each batch
CONCURRENT = 3
RUN_SECONDS = 3  # each input's sleep after its witness: the batch spans the fault
OPERATOR_ACCOUNT = f"system:serviceaccount:{OPERATOR_NAMESPACE}:kinetic-operator"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def replicas(kube: Kube, operator: None) -> Iterator[LocalConfig]:
    """The local cluster's two elected replicas, Ready; put back Ready after the test."""
    cfg = LocalConfig()
    if not kube.is_local:
        pytest.skip("signals the operator's processes on the node: needs the local cluster")
    wait_for(lambda: local_operator.ready(cfg), 180, 0.5, "both operator replicas to be Ready")
    if not local_operator.elected(cfg):
        pytest.skip("the installed chart runs the operator without leader election")
    try:
        yield cfg
    finally:
        for pod in local_operator.operator_pods(cfg):  # a stopped process is resumed
            pid = local_operator.container_pid(cfg, pod)
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
        local_up()


# ------------------------------------------------------------------------------ helpers


def _batch(kube: Kube, ns: str, name: str, runs: str) -> None:
    witness_batch(kube, ns, name, runs, total=TOTAL, concurrent=CONCURRENT, seconds=RUN_SECONDS)


def _probe_job(kube: Kube, ns: str) -> tuple[str, float]:
    """A one-Pod job submitted now; its name and when (wall clock)."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    kube.apply(
        ns,
        {
            "apiVersion": r.API_VERSION,
            "kind": r.JOB_KIND,
            "metadata": {"name": name},
            "spec": {"container": {"image": "busybox:1.36", "command": ["true"]}},
        },
    )
    return name, time.time()


def _first_reconcile(kube: Kube, ns: str, name: str, since: float) -> float:
    """Seconds from ``since`` until the job has a status: a leader has reconciled it."""

    def reconciled() -> bool:
        got = kube.kubectl("get", "kj", name, "-n", ns, "-o", "json", check=False)
        return got.returncode == 0 and bool(json.loads(got.stdout).get("status") or {})

    wait_for(reconciled, 120, 0.1, f"job {name} to be reconciled by a leader")
    return time.time() - since


def _ended(kube: Kube, kind: str, ns: str, name: str, timeout: float = 180) -> dict:
    return ended_status(kube, kind, ns, name, timeout)


def _assert_each_ran_once(kube: Kube, ns: str, name: str, runs: str) -> None:
    assert_each_ran_once(runs, _ended(kube, "kb", ns, name), TOTAL)


def _leader_pod(cfg: LocalConfig) -> dict:
    pod = wait_for(
        lambda: (
            (p := local_operator.operator_pod(cfg))
            and local_operator.leader_holder(cfg).startswith(p["metadata"]["name"] + "_")
            and p
        ),
        60,
        0.2,
        "a replica to lead",
    )
    return pod  # type: ignore[return-value]


def _pid(cfg: LocalConfig, pod: dict) -> int:
    pid = local_operator.container_pid(cfg, pod)
    assert pid is not None, f"no process for {pod['metadata']['name']} on this node"
    return pid


def _new_holder(kube: Kube, old: str, timeout: float = 120) -> dict:
    """The Lease once a holder other than ``old`` (and not empty) has it."""
    return wait_for(  # type: ignore[return-value]
        lambda: (s := leader_lease(kube)).get("holderIdentity") not in ("", old) and s,
        timeout,
        0.1,
        f"another replica to take the Lease from {old}",
    )


def _ran(runs: str, at_least: int) -> None:
    wait_for(lambda: len(runs_in(runs)) >= at_least, 120, 0.5, f"{at_least} runs")


def _report(what: str, **seconds: float) -> None:
    print(f"\n[failover] {what}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()))


@dataclass
class LeaseWatch:
    """Every holder the Lease had while watched: a watch of it, which the API server
    sends every change of (a poll could miss a release taken over within milliseconds)."""

    kube: Kube
    seen: list[dict] = field(default_factory=list)
    stopped: bool = False

    def __enter__(self) -> LeaseWatch:
        self.stream = watch.Watch()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        wait_for(lambda: self.seen, 30, 0.1, "the Lease watch to start")
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped = True
        self.stream.stop()  # at the next event: the holder renews every 2 s
        self.thread.join(70)

    def _watch(self) -> None:
        leases = client.CoordinationV1Api(self.kube.api)
        while not self.stopped:
            try:
                for event in self.stream.stream(
                    leases.list_namespaced_lease,
                    OPERATOR_NAMESPACE,
                    field_selector=f"metadata.name={LEADER_LEASE}",
                    timeout_seconds=60,
                ):
                    self._saw(event["object"].spec)
            except (ProtocolError, client.ApiException):
                if self.stopped:  # the stream closed under it on purpose
                    return
                self.stream = watch.Watch()  # a connection cut: watch again from a fresh list

    def _saw(self, spec: client.V1LeaseSpec) -> None:
        holder = spec.holder_identity or ""
        if not self.seen or holder != self.seen[-1]["holderIdentity"]:
            self.seen.append(
                {
                    "holderIdentity": holder,
                    "acquireTime": spec.acquire_time,
                    "renewTime": spec.renew_time,
                }
            )

    def handovers(self) -> list[float]:
        """Seconds from each release (an empty holder) to the next holder's acquisition."""
        return [
            (after["acquireTime"] - before["renewTime"]).total_seconds()
            for before, after in zip(self.seen, self.seen[1:], strict=False)
            if before["holderIdentity"] == "" and after["holderIdentity"]
        ]


# ------------------------------------------------------------------------------ the faults


def test_the_leader_sigkilled_then_force_deleted_mid_batch(
    kube: Kube, replicas: LocalConfig, namespace: str, runs: str
) -> None:
    """SIGKILL (as an OOM kill would) leaves the Lease held by a dead process: the next
    leader is the killed container restarted (a restarted process of the holder's own
    Pod takes it at once) or the other replica once it expires. A force-delete sends
    SIGTERM, and the leader releases the Lease on its way out. Either way the new
    leader picks the batch up from its status and Pods: every input runs once."""
    cfg = replicas
    _batch(kube, namespace, "killed", runs)
    for at_least, fault in ((CONCURRENT, "SIGKILL"), (2 * CONCURRENT, "force-delete")):
        _ran(runs, at_least)
        pod = _leader_pod(cfg)
        held_by = local_operator.leader_holder(cfg)
        faulted = time.time()
        if fault == "SIGKILL":
            os.kill(_pid(cfg, pod), signal.SIGKILL)
        else:
            kube.kubectl(
                "delete", "pod", pod["metadata"]["name"], "-n", OPERATOR_NAMESPACE,
                "--grace-period=0", "--force", "--wait=false",
            )  # fmt: skip
        probe, submitted = _probe_job(kube, namespace)
        assert len(runs_in(runs)) < TOTAL, "the batch ended before the fault"
        lease = _new_holder(kube, held_by)
        acquired = parse_time(lease["acquireTime"]).timestamp() - faulted
        _report(
            f"{fault} of the leader",
            new_leader_after=acquired,
            probe_job_reconciled_after=_first_reconcile(kube, namespace, probe, submitted)
            + (submitted - faulted),
        )
        assert _ended(kube, "kj", namespace, probe)["phase"] == "SUCCEEDED"
    _assert_each_ran_once(kube, namespace, "killed", runs)


def test_a_rollout_restart_mid_batch_hands_the_lease_over_at_once(
    kube: Kube, replicas: LocalConfig, namespace: str, runs: str
) -> None:
    """Both Pods are replaced one at a time; the leader releases the Lease on SIGTERM
    and a standby takes it at its next look, without waiting for it to expire."""
    _batch(kube, namespace, "rolled", runs)
    _ran(runs, CONCURRENT)
    with LeaseWatch(kube) as watch:
        kube.kubectl("rollout", "restart", "deployment/kinetic-operator", "-n", OPERATOR_NAMESPACE)
        time.sleep(2)  # the controller has seen the new template
        wait_for(lambda: local_operator.ready(replicas), 180, 0.5, "the rollout to complete")
        probe, submitted = _probe_job(kube, namespace)
        _first_reconcile(kube, namespace, probe, submitted)
    gaps = watch.handovers()
    assert gaps, f"the leader never released the Lease: {watch.seen}"
    _report("rollout restart", **{f"handover_{i}": g for i, g in enumerate(gaps)})
    new_pods = {p["metadata"]["name"] for p in local_operator.operator_pods(replicas)}
    assert watch.seen[-1]["holderIdentity"].rpartition("_")[0] in new_pods
    _assert_each_ran_once(kube, namespace, "rolled", runs)


def test_helm_upgrade_and_back_mid_batch_loses_no_input(
    kube: Kube, replicas: LocalConfig, namespace: str, runs: str
) -> None:
    """`helm upgrade` of the running release (a changed setting rolls the Pods), then
    back to the installed values: two rollouts during one batch."""
    import helm_sdkpy as helm
    from kinetic_dev.operator import NAMESPACE, RELEASE, chart_dir, installed_values

    defaults = installed_values(replicas)
    mark = {"name": "UPGRADE_MARK", "value": uuid.uuid4().hex}  # a new Pod template
    marked = {**defaults, "extraEnv": [*(defaults.get("extraEnv") or []), mark]}
    config = helm.Configuration(namespace=NAMESPACE, kubeconfig=kube.kubeconfig)
    chart = str(chart_dir(REPO))
    _batch(kube, namespace, "upgraded", runs)
    _ran(runs, CONCURRENT)
    with LeaseWatch(kube) as watch:
        try:
            for values in (marked, defaults):
                asyncio.run(helm.Upgrade(config).run(RELEASE, chart, values=values, wait=False))
                time.sleep(2)
                wait_for(lambda: local_operator.ready(replicas), 180, 0.5, "the rollout")
        finally:
            asyncio.run(helm.Upgrade(config).run(RELEASE, chart, values=defaults, wait=False))
    _report(
        "helm upgrade and back", **{f"handover_{i}": g for i, g in enumerate(watch.handovers())}
    )
    assert len(watch.seen) >= 3, f"the Lease did not move twice: {watch.seen}"
    _assert_each_ran_once(kube, namespace, "upgraded", runs)


def test_a_stalled_leader_is_replaced_and_writes_nothing_after_losing(
    kube: Kube, replicas: LocalConfig, namespace: str, runs: str, tmp_path: Path
) -> None:
    """SIGSTOP past the renew deadline: the webhook keeps denying bad objects through the
    other replica; the other replica takes the Lease once it expires; the stalled one,
    resumed, exits (LOST_EXIT) and the audit log shows no Pod create from its address
    after the takeover."""
    cfg = replicas
    _batch(kube, namespace, "stalled", runs)
    _ran(runs, CONCURRENT)
    pod = _leader_pod(cfg)
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    held_by = local_operator.leader_holder(cfg)
    pid = _pid(cfg, pod)
    os.kill(pid, signal.SIGSTOP)
    stopped = time.time()
    try:
        # Down: its readiness probe fails and the webhook Service keeps only the other.
        wait_for(
            lambda: _endpoints(kube) == {_other_ip(cfg, name)}, 30, 0.2, "the Service to drop it"
        )
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**invalid_job(), "metadata": {"name": "refused"}}))
        denied = kube.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", str(bad), check=False
        )
        assert denied.returncode != 0 and WEBHOOK_SUFFIX in denied.stderr, denied.stderr
        assert local_operator.leader_holder(cfg) == held_by, "taken over before the check"
        probe, submitted = _probe_job(kube, namespace)
        lease = _new_holder(kube, held_by)
        taken = parse_time(lease["acquireTime"])
        reconciled = _first_reconcile(kube, namespace, probe, submitted) + submitted - stopped
        _ran(runs, 2 * CONCURRENT)  # the new leader launches the next inputs
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = datetime.now(UTC)
    _report(
        "SIGSTOP of the leader",
        new_leader_after=taken.timestamp() - stopped,
        probe_job_reconciled_after=reconciled,
    )

    def exited() -> dict | None:
        got = json.loads(
            kube.kubectl("get", "pod", name, "-n", OPERATOR_NAMESPACE, "-o", "json").stdout
        )
        st = got["status"]["containerStatuses"][0]
        return st if st["restartCount"] > restarts else None

    status = wait_for(exited, 60, 0.5, f"{name}'s operator to exit and restart")
    assert status["lastState"]["terminated"]["exitCode"] == 3  # LOST_EXIT: it lost the Lease

    creates = _pod_creates(cfg)
    before = [t for who, t in creates if who == ip and t.timestamp() < stopped]
    after_losing = [t for who, t in creates if who == ip and t >= taken]
    by_new_leader = [t for who, t in creates if who != ip and t >= taken]
    assert before, "the audit log shows no Pod create by the leader before it stalled"
    assert by_new_leader, "the audit log shows no Pod create by the new leader"
    assert after_losing == [], f"{name} created Pods after losing the Lease (resumed {resumed})"
    _assert_each_ran_once(kube, namespace, "stalled", runs)


def _endpoints(kube: Kube) -> set[str]:
    got = kube.kubectl(
        "get", "endpoints", "kinetic-operator", "-n", OPERATOR_NAMESPACE, "-o", "json"
    )
    subsets = json.loads(got.stdout).get("subsets") or []
    return {a["ip"] for s in subsets for a in s.get("addresses") or []}


def _other_ip(cfg: LocalConfig, name: str) -> str:
    others = [p for p in local_operator.operator_pods(cfg) if p["metadata"]["name"] != name]
    assert len(others) == 1, others
    return others[0]["status"]["podIP"]


def _pod_creates(cfg: LocalConfig) -> list[tuple[str, datetime]]:
    """(caller's address, when) of every Pod create the operator made, from the audit log."""
    found = []
    for line in cfg.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event.get("verb") == "create"
            and ref.get("resource") == "pods"
            and event["user"]["username"] == OPERATOR_ACCOUNT
        ):
            when = parse_time(event["requestReceivedTimestamp"])
            found.extend((ip, when) for ip in event.get("sourceIPs") or [])
    return found
