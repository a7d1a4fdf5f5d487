"""The thin API layer around the decision, with a fake API; and the per-job serializer."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from kinetic_operator.handlers import setup
from kinetic_operator.handlers.jobs import reconcile_job_sync
from kinetic_operator.kube import Conflict, Rejected
from kinetic_operator.observed import JobView, PodView
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = OperatorSettings(storage_root="gs://b", default_image="img:1")


class FakeKube:
    """Records calls; `conflicts` makes the next N status patches fail with 409."""

    def __init__(self, body: dict[str, Any] | None, conflicts: int = 0, reject: str = "") -> None:
        self.body = body
        self.conflicts = conflicts
        self.reject = reject
        self.calls: list[tuple[str, Any]] = []

    def get_kinetic_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", name))
        return copy.deepcopy(self.body)

    def patch_status(self, namespace, name, new, old, resource_version) -> None:
        if self.conflicts:
            self.conflicts -= 1
            self.body["metadata"]["resourceVersion"] += "x"  # someone else wrote
            raise Conflict("moved")
        self.calls.append(("patch", new["phase"]))
        self.body["status"] = new

    def create_job(self, manifest: dict[str, Any]) -> None:
        if self.reject:
            raise Rejected(self.reject)
        self.calls.append(("create", manifest["metadata"]["name"]))

    def delete_job(self, namespace: str, name: str) -> None:
        self.calls.append(("delete", name))

    def post_event(self, owner, type_, reason, message) -> None:
        self.calls.append(("event", reason))


def body(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "kj",
            "namespace": "ns",
            "uid": "u",
            "generation": 1,
            "resourceVersion": "1",
            **meta,
        },
        "spec": spec,
    }


SPEC = {"container": {"command": ["true"]}}


def reconcile(kube: FakeKube, jobs=(), pods=()) -> float | None:
    return reconcile_job_sync(kube, SETTINGS, "ns", "kj", jobs, pods, NOW)  # type: ignore[arg-type]


def test_new_job_writes_status_first_then_creates_then_tells():
    kube = FakeKube(body(SPEC))
    reconcile(kube)
    assert kube.calls == [
        ("get", "kj"),
        ("patch", "PENDING"),
        ("create", "kj-1"),
        ("event", "Started"),
    ]


def test_nothing_changed_means_no_write():
    kube = FakeKube(body(SPEC))
    reconcile(kube, [JobView("kj-1", 1)])
    kube.calls.clear()
    reconcile(kube, [JobView("kj-1", 1)])
    assert kube.calls == [("get", "kj")]


def test_a_conflict_rereads_and_decides_again_without_acting_twice():
    kube = FakeKube(body(SPEC), conflicts=2)
    reconcile(kube)
    assert kube.calls.count(("get", "kj")) == 3
    assert kube.calls.count(("create", "kj-1")) == 1 and kube.calls.count(("event", "Started")) == 1


def test_endless_conflicts_give_up_for_a_retry_later():
    with pytest.raises(Conflict):
        reconcile(FakeKube(body(SPEC), conflicts=99))


def test_gone_or_deleting_jobs_are_left_alone():
    kube = FakeKube(None)
    reconcile(kube)
    assert kube.calls == [("get", "kj")]
    kube = FakeKube(body(SPEC, deletionTimestamp="2026-01-01T00:00:00Z"))
    reconcile(kube, [], [PodView("kj-1-a", 1, deleting=True)])
    assert kube.calls == [("get", "kj")]


def test_invalid_spec_is_failed_and_nothing_is_created():
    kube = FakeKube(body({"container": {"command": ["x"]}, "accelerator": "gpu-v100"}))
    reconcile(kube)
    assert kube.calls == [("get", "kj"), ("patch", "FAILED"), ("event", "InvalidSpec")]
    assert kube.body["status"]["message"].startswith("spec.accelerator: unknown accelerator")


def test_a_job_kubernetes_rejects_fails_the_kineticjob():
    kube = FakeKube(body(SPEC), reject="spec.template.spec.containers[0].resources: bad")
    reconcile(kube)
    assert kube.calls[-2:] == [("patch", "FAILED"), ("event", "Rejected")]
    assert "Kubernetes rejected Job kj-1" in kube.body["status"]["message"]


def test_a_mangled_status_does_not_crash_and_adopts_the_jobs():
    b = body(SPEC)
    b["status"] = {"phase": "BOGUS", "attempt": "many"}
    kube = FakeKube(b)
    reconcile(kube, [JobView("kj-1", 1)], [PodView("kj-1-a", 1, phase="Running")])
    assert ("create", "kj-1") not in kube.calls and kube.body["status"]["phase"] == "RUNNING"


def test_published_config():
    assert setup.client_config(SETTINGS) == {
        "defaultImage": "img:1",
        "accelerators": ",".join(SETTINGS.accelerator_catalog.names()),
        "storageRoot": "gs://b",
    }
    assert "storageRoot" not in setup.client_config(
        SETTINGS.model_copy(update={"storage_root": None})
    )


# ----------------------------------------------------------------------- serializer


def test_serializer_never_runs_one_key_twice_at_once_and_coalesces():
    async def main() -> tuple[int, int]:
        s = Serializer()
        running = peak = runs = 0
        gate = asyncio.Event()

        async def work() -> None:
            nonlocal running, peak, runs
            running += 1
            runs += 1
            peak = max(peak, running)
            await gate.wait()
            running -= 1

        first = asyncio.create_task(s.run("k", work))
        await asyncio.sleep(0)
        others = [asyncio.create_task(s.run("k", work)) for _ in range(10)]
        await asyncio.gather(*others)  # they return at once: the running loop owes one more round
        gate.set()
        await first
        assert len(s) == 0
        return peak, runs

    peak, runs = asyncio.run(main())
    assert peak == 1 and runs == 2


def test_serializer_keys_are_independent():
    async def main() -> list[str]:
        s = Serializer()
        order: list[str] = []
        gate = asyncio.Event()

        async def slow() -> None:
            await gate.wait()
            order.append("a")

        async def fast() -> None:
            order.append("b")
            gate.set()

        await asyncio.gather(s.run("a", slow), s.run("b", fast))
        return order

    assert asyncio.run(main()) == ["b", "a"]


def test_serializer_retries_failures_with_backoff():
    async def main() -> tuple[int, list[float]]:
        s = Serializer(first_delay=0.01, max_delay=0.04)
        calls = 0
        done = asyncio.Event()

        async def flaky() -> None:
            nonlocal calls
            calls += 1
            if calls < 4:
                raise RuntimeError("API server away")
            done.set()

        await s.run("k", flaky)  # does not raise
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.sleep(0.01)
        assert len(s) == 0
        return calls, [s.delay(n) for n in range(1, 6)]

    calls, delays = asyncio.run(main())
    assert calls == 4
    assert delays == [0.01, 0.02, 0.04, 0.04, 0.04]


def test_serializer_later_and_cancel_all():
    async def main() -> int:
        s = Serializer()
        calls = 0

        async def work() -> None:
            nonlocal calls
            calls += 1

        s.later("k", work, 0.01)
        s.later("k", work, 10)
        await asyncio.sleep(0.05)
        s.cancel_all()
        return calls

    assert asyncio.run(main()) == 1
