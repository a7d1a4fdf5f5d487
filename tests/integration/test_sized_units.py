"""Work-sized units on the real operator: a Pod runs a block of a batch's inputs, and every
input keeps its own semantics (outcome, attempts, retries, logs, cancel) as if it had a
Pod of its own.

Each test runs one small batch in one or two unit Pods. With ``max_concurrent=1`` and
fewer inputs than the first unit's size, the whole batch is one unit, so which inputs
share a Pod is known. What ran inside the Pods is witnessed in storage: each execution
of an input leaves an object, so "ran exactly once" is counted, not assumed. Inputs that
must still be running while the test looks wait for a gate object the test writes.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.jobs import JobStatus
from kinetic.api.kube import KubeClient
from kinetic.model import names
from kinetic.model import resources as r
from kinetic.model.grid import Grid
from kube_helpers import Kube, kill_operator, wait_for, wait_operator_ready

pytestmark = pytest.mark.integration
kinetic_kube = KubeClient()  # the client's own calls, through the current context

TIMEOUT = 240


@pytest.fixture
def scratch() -> str:
    """A storage folder both the test and the Pods reach: witnesses and gates."""
    return storage.join(resolve().storage_root, "test-units", uuid.uuid4().hex)


def witnessed(prefix: str) -> Counter:
    """How many times each input ran, from the objects its executions left."""
    ran: Counter = Counter()
    for uri in storage.list_prefix(prefix + "/ran/"):
        ran[int(uri.split("/ran/", 1)[1].split("/", 1)[0])] += 1
    return ran


def work(prefix: str, index: int, *, gate_at: int | None = None) -> None:
    """In a Pod: witness this execution; input ``gate_at`` then waits for the gate."""
    import os as o
    import time as t

    from kinetic import storage as s

    s.write_bytes(f"{prefix}/ran/{index}/{o.getpid()}-{o.urandom(4).hex()}", b"")
    print(f"input {index} says hello", flush=True)
    if index == gate_at:
        deadline = t.monotonic() + 180
        while not s.exists(f"{prefix}/gate") and t.monotonic() < deadline:
            t.sleep(0.2)


def open_gate(prefix: str) -> None:
    storage.write_bytes(f"{prefix}/gate", b"open")


def unit_pods(ns: str, group: str) -> list:
    return kinetic_kube.list_pods(ns, f"{names.LABEL_BATCH}={group}")


def batch_status(ns: str, group: str) -> dict:
    obj = kinetic_kube.get(r.BATCH_PLURAL, ns, group)
    assert obj is not None
    return obj.get("status") or {}


def outcomes_of(batch: kinetic.BatchHandle) -> dict[int, str]:
    return {i: s.value for i, s in batch.statuses()}


# --------------------------------------------------------------------------- while it runs


def test_each_input_of_a_unit_ends_on_its_own_while_the_unit_runs(ns: str, scratch: str) -> None:
    """Six inputs in one Pod: the first five are recorded, readable and logged on their
    own while the sixth still runs; the function sees its own input's handle."""

    @kinetic.run(namespace=ns)
    def square(i: int) -> dict:
        work(scratch, i, gate_at=5)
        me = kinetic.JobHandle.from_job_context()
        return {"value": i * i, "me": me.group_index}

    batch = square.run_async_map(range(6), max_concurrent=1)
    wait_for(
        lambda: batch_status(ns, batch.group_id).get("succeededIndexes") == "0-4",
        timeout=TIMEOUT,
        what="inputs 0-4 to be recorded while input 5 waits",
    )
    (pod,) = unit_pods(ns, batch.group_id)  # one Pod runs them all, and it runs on
    assert pod.status.phase == "Running"
    assert len(Grid.parse(batch_status(ns, batch.group_id)["unitGrid"]).inputs_of(0, 6)) == 6
    third = batch.jobs[2]
    assert third.status() is JobStatus.SUCCEEDED and batch.jobs[5].status() is JobStatus.RUNNING
    assert third.result(timeout=30, cleanup=False) == {"value": 4, "me": 2}
    log = third.logs()
    assert "input 2 says hello" in log and "input 3 says hello" not in log
    assert "kinetic-unit/1" in log  # the marks that bound it

    open_gate(scratch)
    assert [v["value"] for v in batch.results(timeout=TIMEOUT)] == [0, 1, 4, 9, 16, 25]
    assert witnessed(scratch) == Counter(dict.fromkeys(range(6), 1))
    assert [a["outcome"] for a in batch.jobs[5].attempts()] == ["success"]


# --------------------------------------------------------------------------- faults


def test_a_unit_killed_mid_input_charges_that_input_alone(ns: str, scratch: str) -> None:
    """Input 2 kills its process (as the kernel does on OOM) the first time: it alone spends
    a retry; inputs 0-1 keep their results; 3-5 run once, in the next Pod, uncharged."""

    @kinetic.run(namespace=ns)
    def fragile(i: int) -> int:
        import os
        import signal

        from kinetic import storage as s

        work(scratch, i)
        if i == 2:
            try:
                s.write_if_generation(f"{scratch}/died", b"", 0)  # only the first time
            except s.PreconditionFailed:
                return i
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    batch = fragile.run_async_map(range(6), max_concurrent=1, retries=1)
    assert batch.results(timeout=TIMEOUT) == list(range(6))
    assert witnessed(scratch) == Counter({0: 1, 1: 1, 2: 2, 3: 1, 4: 1, 5: 1})
    killed = batch.jobs[2].attempts()
    assert [a["outcome"] for a in killed] == ["failure", "success"], killed
    assert killed[0]["pod"] != killed[1]["pod"]
    for i in (0, 1, 3, 4, 5):
        assert [a["outcome"] for a in batch.jobs[i].attempts()] == ["success"]


def test_an_input_over_the_memory_limit_is_charged_as_oomkilled(
    ns: str, scratch: str, kube: Kube
) -> None:
    """The namespace's LimitRange gives the unit Pod 160 MiB; input 3 asks for far more the
    first time. The kernel kills the process running it: input 3 alone spends a retry, as
    OOMKilled, and the inputs after it run in the next Pod."""
    limit = {"type": "Container", "default": {"memory": "160Mi"}}
    kube.core.create_namespaced_limit_range(
        ns, {"metadata": {"name": "memory"}, "spec": {"limits": [limit]}}
    )

    @kinetic.run(namespace=ns)
    def hungry(i: int) -> int:
        from kinetic import storage as s

        work(scratch, i)
        if i == 3:
            try:
                s.write_if_generation(f"{scratch}/hog", b"", 0)  # only the first time
            except s.PreconditionFailed:
                return i
            hog = [bytearray(32 << 20) for _ in range(40)]  # 1.25 GiB, page by page
            return len(hog)
        return i

    batch = hungry.run_async_map(range(5), max_concurrent=1, retries=1)
    assert batch.results(timeout=TIMEOUT) == list(range(5))
    assert witnessed(scratch) == Counter({0: 1, 1: 1, 2: 1, 3: 2, 4: 1})
    killed = batch.jobs[3].attempts()
    assert [(a["outcome"], a.get("reason")) for a in killed][0] == ("failure", "OOMKilled"), killed
    assert [a["outcome"] for a in batch.jobs[4].attempts()] == ["success"]


def test_a_deleted_unit_pod_is_a_disruption_of_the_input_it_ran(
    ns: str, scratch: str, kube: Kube
) -> None:
    @kinetic.run(namespace=ns)
    def step(i: int) -> int:
        work(scratch, i, gate_at=2)
        return i

    batch = step.run_async_map(range(5), max_concurrent=1)  # retries=0: disruptions are free
    wait_for(
        lambda: batch_status(ns, batch.group_id).get("succeededIndexes") == "0-1",
        timeout=TIMEOUT,
        what="inputs 0-1 to be recorded while input 2 waits",
    )
    (pod,) = unit_pods(ns, batch.group_id)
    kube.core.delete_namespaced_pod(pod.metadata.name, ns)  # as `kubectl delete pod` does
    wait_for(
        lambda: pod.metadata.name not in {p.metadata.name for p in unit_pods(ns, batch.group_id)},
        timeout=TIMEOUT,
        what="the deleted Pod to be gone (else it may go on past the gate before SIGTERM)",
    )
    open_gate(scratch)
    assert batch.results(timeout=TIMEOUT) == list(range(5))
    assert witnessed(scratch) == Counter({0: 1, 1: 1, 2: 2, 3: 1, 4: 1})
    assert [a["outcome"] for a in batch.jobs[2].attempts()] == ["disruption", "success"]


def test_an_operator_restart_mid_unit_records_every_input_once(
    ns: str, scratch: str, kube: Kube
) -> None:
    @kinetic.run(namespace=ns)
    def step(i: int) -> int:
        work(scratch, i, gate_at=3)
        return 10 * i

    batch = step.run_async_map(range(6), max_concurrent=1)
    wait_for(lambda: witnessed(scratch)[3] == 1, timeout=TIMEOUT, what="input 3 to begin")
    kill_operator(kube)
    wait_operator_ready(kube)
    open_gate(scratch)
    assert batch.results(timeout=TIMEOUT) == [10 * i for i in range(6)]
    assert witnessed(scratch) == Counter(dict.fromkeys(range(6), 1))
    assert len({a["pod"] for i in range(6) for a in batch.jobs[i].attempts()}) == 1


# --------------------------------------------------------------------------- stopping


def test_cancelling_inputs_inside_a_running_unit(ns: str, scratch: str) -> None:
    """Input 1 runs and input 3 waits its turn in the same Pod when both are cancelled:
    1 is stopped with its Pod, 3 never runs, and the others run once, uncharged."""

    @kinetic.run(namespace=ns)
    def step(i: int) -> int:
        work(scratch, i, gate_at=1)
        return i

    batch = step.run_async_map(range(6), max_concurrent=1)
    wait_for(lambda: witnessed(scratch)[1] == 1, timeout=TIMEOUT, what="input 1 to begin")
    batch.cancel_inputs([1, 3])
    batch.wait(timeout=TIMEOUT)
    assert outcomes_of(batch) == {
        0: "SUCCEEDED", 1: "CANCELLED", 2: "SUCCEEDED", 3: "CANCELLED", 4: "SUCCEEDED",
        5: "SUCCEEDED",
    }  # fmt: skip
    assert witnessed(scratch) == Counter({0: 1, 1: 1, 2: 1, 4: 1, 5: 1})
    for i in (2, 4, 5):
        assert [a["outcome"] for a in batch.jobs[i].attempts()] == ["success"]


def test_fail_fast_lets_running_inputs_end_and_begins_no_more(ns: str, scratch: str) -> None:
    """Two units of four; input 0 fails at once. The other unit ends the input it runs and
    skips the rest, which are cancelled without ever running."""

    @kinetic.run(namespace=ns)
    def step(i: int) -> int:
        import time as t

        work(scratch, i)
        if i == 0:
            raise ValueError("input 0 is bad")
        t.sleep(2)
        return i

    batch = step.run_async_map(range(8), max_concurrent=2, fail_fast=True)
    batch.wait(timeout=TIMEOUT)
    assert batch.status()["phase"] == "FAILED"
    seen = outcomes_of(batch)
    ran = witnessed(scratch)
    assert seen[0] == "FAILED"
    cancelled = {i for i, s in seen.items() if s == "CANCELLED"}
    assert cancelled and not (cancelled & set(ran)), (seen, ran)  # cancelled: never ran
    assert all(n == 1 for n in ran.values())
    assert {i for i, s in seen.items() if s == "SUCCEEDED"} <= set(ran)


# --------------------------------------------------------------------------- sizing


def test_units_grow_once_durations_are_measured(ns: str) -> None:
    """60 quick inputs, at most two Pods at once: the first units are small; once inputs
    have ended, later units hold many. Far fewer Pods than inputs run."""

    @kinetic.run(namespace=ns)
    def quick(i: int) -> int:
        import time as t

        t.sleep(0.05)
        return i

    started = time.monotonic()
    batch = quick.run_async_map(range(60), max_concurrent=2)
    assert batch.results(timeout=TIMEOUT) == list(range(60))
    grid = Grid.parse(batch_status(ns, batch.group_id)["unitGrid"])
    units = {grid.unit_of(i) for i in range(60)}
    assert len(units) < 20, (grid.text(), time.monotonic() - started)
    assert batch_status(ns, batch.group_id)["unitDurations"]["count"] == 60
