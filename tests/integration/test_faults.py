"""Real faults on the local cluster mid-batch: nothing lost, nothing run twice beyond its retries.

Each test breaks one component of the running cluster while a batch is
running: the operator's process is SIGKILLed twice, the API server is
SIGKILLed and started again, object storage is down for ten seconds. The
batch must still end SUCCEEDED, and each input must have run exactly once
(or, where a failure may use a retry, at most 1 + retries times).

Executions are counted the way a user would check them: each run of an input
leaves one object in storage (the emulator its Pod was given), and the test
counts them per index. The components are killed on this machine (the
operator's container process, the control plane's and storage's pid files),
so these tests need the local cluster (`make cluster-up`); elsewhere they are
skipped.

Every test puts the cluster back as it found it, pass or fail: the
``cluster`` fixture starts whatever is missing and waits for a Ready operator.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator

import kinetic
import pytest
from kinetic_dev import operator as local_operator
from kinetic_dev.cluster import Cluster
from kinetic_dev.procs import read_live_pid
from kube_helpers import (
    Kube,
    assert_each_ran_once,
    ended_status,
    local_up,
    runs_in,
    wait_for,
    witness_batch,
)

pytestmark = pytest.mark.integration

TOTAL = 30  # inputs of each container batch
CONCURRENT = 5
OUTAGE = 15  # seconds the API server stays down


@pytest.fixture
def cluster(kube: Kube, operator: None) -> Iterator[Cluster]:
    """The local cluster, restored after the test whatever it broke."""
    local = Cluster()
    if not kube.is_local or read_live_pid(local.pid_file("kube-apiserver")) is None:
        pytest.skip("kills and restarts components of the local cluster: run `make cluster-up`")
    try:
        yield local
    finally:
        for name in ("kube-apiserver", "fake-gcs-server"):
            local.start_component(name, out=lambda line: None)
        local_up()  # anything else that is missing, and a Ready operator


def _kill(local: Cluster, name: str) -> int:
    """SIGKILL the control-plane component named by its pid file (as a crash would)."""
    pid = read_live_pid(local.pid_file(name))
    assert pid is not None, f"{name} is not running"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: read_live_pid(local.pid_file(name)) is None, 10, what=f"{name} to die")
    return pid


def _kill_operator(local: Cluster) -> int:
    """SIGKILL the operator's process (its container's main task, as an OOM kill would)."""
    pid = _operator_pid(local)
    assert pid is not None, "the operator is not running"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _operator_pid(local) != pid, 30, what="the operator to die")
    return pid


def _operator_pid(local: Cluster) -> int | None:
    """The running operator process of a Ready operator Pod (None while it is not ready)."""
    if not local_operator.ready(local.cfg):
        return None
    return local_operator.container_pid(local.cfg, local_operator.operator_pod(local.cfg))


def _fresh_operator(local: Cluster) -> None:
    """A new operator Pod whose container never restarted, so the kubelet's restart
    back-off starts from zero (it doubles with every restart of the same Pod)."""
    pod = local_operator.operator_pod(local.cfg)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    if pod is not None and all(st.get("restartCount", 0) == 0 for st in statuses):
        return
    local_operator.restart(local.cfg)
    wait_for(
        lambda: (
            (p := local_operator.operator_pod(local.cfg)) is not None
            and p["metadata"]["uid"] != (pod or {}).get("metadata", {}).get("uid")
            and _operator_pid(local)
        ),
        120,
        what="a fresh operator Pod to be Ready",
    )


def _container_batch(kube: Kube, ns: str, name: str, runs: str) -> None:
    witness_batch(kube, ns, name, runs, total=TOTAL, concurrent=CONCURRENT)


def _lines(runs: str) -> list[int]:
    return runs_in(runs)


def _ran(runs: str, at_least: int) -> bool:
    return len(_lines(runs)) >= at_least


def _final_status(kube: Kube, ns: str, name: str, timeout: float) -> dict:
    return ended_status(kube, "kb", ns, name, timeout)


def _assert_each_ran_once(runs: str, status: dict) -> None:
    assert_each_ran_once(runs, status, TOTAL)


# ------------------------------------------------------------------------------ the faults


def test_operator_sigkilled_twice_mid_batch(
    kube: Kube, cluster: Cluster, namespace: str, runs: str
) -> None:
    """The kubelet restarts the killed operator (restartPolicy Always, after a back-off);
    the new process picks the batch up from its status and Pods. Killing the operator
    leaves the attempt Pods alone, so every input runs exactly once."""
    _fresh_operator(cluster)
    _container_batch(kube, namespace, "twice", runs)
    for at_least in (CONCURRENT, 3 * CONCURRENT):
        wait_for(lambda n=at_least: _ran(runs, n), 120, what=f"{at_least} runs")
        killed = _kill_operator(cluster)
        assert len(_lines(runs)) < TOTAL, "the batch ended before the fault"
        restarted = wait_for(
            lambda old=killed: (pid := _operator_pid(cluster)) not in (None, old) and pid,
            120,
            what="the node to restart the operator and its Pod to be Ready again",
        )
        assert restarted != killed
    _assert_each_ran_once(runs, _final_status(kube, namespace, "twice", 120))


def test_api_server_killed_and_restarted_mid_batch(
    kube: Kube, cluster: Cluster, namespace: str, runs: str
) -> None:
    """Pods finish while nobody can hear them; once the API server is back, the kubelet
    reports them and the operator launches the rest.

    The outage outlasts the leader's renew deadline (10 s), so the leader exits rather
    than act on a Lease it could not renew (LOST_EXIT, restarted by the kubelet), while
    the standby, which holds nothing, reconnects on its own without being replaced."""
    assert _operator_pid(cluster) is not None, "the operator is not Ready"
    leader = local_operator.operator_pod(cluster.cfg)
    assert leader is not None
    standby = [
        p
        for p in local_operator.operator_pods(cluster.cfg)
        if p["metadata"]["name"] != leader["metadata"]["name"]
    ]
    standby_pid = local_operator.container_pid(cluster.cfg, standby[0]) if standby else None
    _container_batch(kube, namespace, "blackout", runs)
    wait_for(lambda: _ran(runs, CONCURRENT), 120, what="some progress")
    _kill(cluster, "kube-apiserver")
    # Longer than any one request's retries: the pods running now finish meanwhile and
    # must report that once the API server is back.
    time.sleep(OUTAGE)
    assert len(_lines(runs)) < TOTAL, "the batch ended before the fault"
    cluster.start_component("kube-apiserver", out=lambda line: None)
    wait_for(
        lambda: _operator_pid(cluster),
        120,
        what="the operator's Pods to be Ready (and one to lead) after the API server came back",
    )
    _assert_each_ran_once(runs, _final_status(kube, namespace, "blackout", 120))
    got = kube.kubectl(
        "get", "pod", leader["metadata"]["name"], "-n", "kinetic-system", "-o", "json"
    )
    ended = json.loads(got.stdout)["status"]["containerStatuses"][0]["lastState"]
    assert ended["terminated"]["exitCode"] == 3, ended  # LOST_EXIT: it stopped leading
    if standby_pid is not None:
        assert local_operator.container_pid(cluster.cfg, standby[0]) == standby_pid


def test_object_storage_down_for_ten_seconds_mid_function_batch(
    kube: Kube, cluster: Cluster, client_env: dict[str, str], namespace: str, runs: str
) -> None:
    """Runners and the operator wait out a storage outage with bounded retries; an input
    whose retries ran out is run again by its own retries, never beyond them.

    Each run records itself in storage first, retrying through the outage; a run whose
    record never lands fails (and is retried), so the records count every run that could
    have produced a result."""
    total, retries = 20, 2

    @kinetic.run(namespace=namespace)
    def square(i: int, prefix: str) -> int:
        import os
        import time as t

        from kinetic import storage as s

        for wait in range(60):
            try:
                s.write_bytes(f"{prefix}/{i}/{os.environ['HOSTNAME']}", b"")
                break
            except Exception:  # noqa: BLE001 - storage is down: wait it out, a second at a time
                if wait == 59:
                    raise
                t.sleep(1.0)
        t.sleep(1.0)
        return i * i

    batch = square.run_async_map(
        [[i, runs] for i in range(total)], max_concurrent=4, retries=retries
    )
    wait_for(lambda: _ran(runs, 6), 120, what="some progress")
    _kill(cluster, "fake-gcs-server")
    time.sleep(10)
    # The runs are counted in storage, which is down: the API server says it still runs.
    got = kube.kubectl("get", "kb", batch.group_id, "-n", namespace, "-o", "json")
    phase = json.loads(got.stdout).get("status", {}).get("phase")
    assert phase not in ("SUCCEEDED", "FAILED"), "the batch ended before storage came back"
    cluster.start_component("fake-gcs-server", out=lambda line: None)
    status = _final_status(kube, namespace, batch.group_id, 150)
    assert status["phase"] == "SUCCEEDED", status.get("message")
    assert batch.results(timeout=60) == [i * i for i in range(total)]
    counts = Counter(_lines(runs))
    assert set(counts) == set(range(total))
    assert max(counts.values()) <= 1 + retries, counts
