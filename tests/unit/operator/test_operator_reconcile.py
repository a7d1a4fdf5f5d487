"""The thin API layer of the KineticJob reconcile, against a fake API server; the serializer.

`FakeKube` (kinetic_testing.fake_kube) stands in for the Kubernetes API the
way the operator sees it: objects carry a resourceVersion that every write
bumps, and a status write made from a stale copy is answered 409 (`Conflict`),
exactly like a merge patch carrying metadata.resourceVersion. Pods are plain
dicts with whatever status a test gives them; the watch is played by
`views()`, which summarises them as the operator's index would.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from kinetic import storage
from kinetic.model import layout
from kinetic.model.resources import JOB_PLURAL
from kinetic_operator.handlers import setup
from kinetic_operator.handlers.jobs import JobMemory, reconcile_job_sync
from kinetic_operator.kube import Conflict
from kinetic_operator.logic.policy import Policy
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.bodies import SPEC
from kinetic_testing.fake_kube import NOW, FakeKube, reap_due
from kinetic_testing.reconcilers import Job


@pytest.fixture
def settings(job_settings: OperatorSettings) -> OperatorSettings:
    return job_settings


# ----------------------------------------------------------------------- starting


def test_a_new_job_writes_its_attempt_in_status_then_creates_the_pod_then_tells(settings):
    kube = FakeKube()
    job = Job(kube, settings)
    seen: list[int] = []
    kube.on_create = lambda m: seen.append(job.status["attempt"])
    assert job.reconcile() is None
    assert kube.calls == [
        ("get", "kj"),
        ("patch", "PENDING"),
        ("create", "kj-a1"),
        ("event", "Started"),
    ]
    assert seen == [1]  # the status named attempt 1 before its Pod existed
    pod = kube.pods["kj-a1"]
    assert pod["metadata"]["labels"]["kinetic.dev/job"] == "kj"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_a_routine_reconcile_reads_nothing_and_writes_only_changes(settings):
    kube = FakeKube()
    job = Job(kube, settings)
    job.reconcile()
    job.deliver()
    kube.run_pod("kj-a1")
    kube.calls.clear()
    job.reconcile()  # from the copy its own write returned: no GET
    assert kube.calls == [("patch", "RUNNING")]
    kube.calls.clear()
    job.reconcile()
    assert kube.calls == []


def test_a_stale_copy_gets_409_and_the_decision_is_made_again_from_a_fresh_read(settings):
    """Attempt 1 failed and a retry is due, but the user cancelled meanwhile: the write from
    the stale copy is refused, and the fresh decision cancels instead of creating kj-a2."""
    kube = FakeKube()
    job = Job(kube, settings, {**SPEC, "retries": 1})
    job.reconcile()
    job.deliver()
    kube.run_pod("kj-a1")
    job.reconcile()
    kube.end_pod("kj-a1", ok=False)
    kube.someone_writes(JOB_PLURAL, "kj", cancel=True)  # the watch has not shown it yet
    kube.calls.clear()
    job.reconcile()
    assert kube.calls[:3] == [("conflict", "kj"), ("get", "kj"), ("patch", "CANCELLED")]
    assert ("create", "kj-a2") not in kube.calls and set(kube.pods) == {"kj-a1"}
    assert job.status["phase"] == "CANCELLED" and job.status["observedGeneration"] == 2


def test_acting_without_a_status_change_needs_a_fresh_read_first(settings):
    """The reserved attempt's Pod is not seen: create it again, but only after a GET."""
    kube = FakeKube()
    job = Job(kube, settings)
    job.reconcile()
    del kube.pods["kj-a1"]  # e.g. the create was lost with the process that made it
    job.mem = JobMemory(body=job.mem.body)  # a new process (nothing "being created")
    kube.calls.clear()
    job.reconcile()
    assert kube.calls == [("get", "kj"), ("create", "kj-a1")]


def test_a_rejected_pods_failure_is_written_only_over_the_status_it_was_decided_from(settings):
    """The FAILED write after Kubernetes refused the Pod is conditional like every other: a
    cancel that lands meanwhile is decided again, not overwritten."""
    kube = FakeKube()
    kube.reject["kj-a1"] = 'Pod "kj-a1" is invalid: spec.containers[0].resources: bad quantity'
    job = Job(kube, settings)
    real_create = kube.create_pod

    def create_while_cancelled(manifest: dict[str, Any]) -> bool:
        kube.someone_writes(JOB_PLURAL, "kj", cancel=True)  # the user cancels just now
        return real_create(manifest)

    kube.create_pod = create_while_cancelled  # type: ignore[method-assign]
    job.reconcile()
    # The FAILED write met the moved version, and the round was decided again from a
    # fresh read: the user's cancel stands (written blindly, FAILED would have hidden it).
    assert kube.calls[:4] == [
        ("get", "kj"),
        ("patch", "PENDING"),
        ("rejected", "kj-a1"),
        ("conflict", "kj"),
    ]
    assert job.status["phase"] == "CANCELLED"


def test_endless_conflicts_give_up_for_a_retry_later(settings):
    kube = FakeKube()
    job = Job(kube, settings)
    kube.interfere = lambda plural, name: kube.someone_writes(plural, name)
    with pytest.raises(Conflict):
        job.reconcile()
    assert kube.pods == {}


def test_gone_or_deleting_jobs_are_left_alone(settings):
    kube = FakeKube()
    assert reconcile_job_sync(kube, settings, "ns", "kj", {}, JobMemory(), NOW) is None
    assert kube.calls == [("get", "kj")]
    kube = FakeKube()
    Job(kube, settings, deletionTimestamp="2026-01-01T00:00:00Z").reconcile()
    assert kube.calls == [("get", "kj")]


def test_invalid_spec_is_failed_and_nothing_is_created(settings):
    kube = FakeKube()
    job = Job(kube, settings, {"container": {"command": ["x"]}, "accelerator": "gpu-v100"})
    job.reconcile()
    assert kube.calls == [("get", "kj"), ("patch", "FAILED"), ("event", "InvalidSpec")]
    assert job.status["message"].startswith("spec.accelerator: unknown accelerator")
    assert kube.pods == {}


# ----------------------------------------------------------------------- policy per generation


def _running_busybox_job(kube: FakeKube, settings: OperatorSettings) -> Job:
    """A job accepted and running busybox under a policy that allows only busybox."""
    job = Job(kube, settings, {**SPEC, "image": "busybox:1.36", "retries": 2})
    job.policy = Policy(allowed_images=("busybox",))
    job.reconcile()
    job.deliver()
    kube.run_pod("kj-a1")
    job.reconcile()
    assert job.status["phase"] == "RUNNING" and job.status["acceptedSpecSHA256"]
    return job


def test_a_change_the_policy_refuses_fails_the_job_before_its_next_pod(settings):
    """The webhook missed it (down, or a review it could not read): attempt 2 must not run
    the forbidden image. The job ends FAILED, PolicyDenied, and its live Pod is stopped."""
    kube = FakeKube()
    job = _running_busybox_job(kube, settings)
    kube.end_pod("kj-a1", ok=False)  # a retry would be due
    kube.someone_writes(JOB_PLURAL, "kj", image="alpine:3.20")
    job.mem.body.set(None)
    kube.calls.clear()
    job.reconcile()
    assert not [c for c in kube.calls if c[0] == "create"] and set(kube.pods) == {"kj-a1"}
    status = job.status
    assert status["phase"] == "FAILED" and status["observedGeneration"] == 2
    assert "spec.image 'alpine:3.20' is not an allowed image" in status["message"]
    assert status["message"].startswith("The spec changed after the job was accepted")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "PolicyDenied")
    assert ("event", "PolicyDenied") in kube.calls


def test_a_running_attempt_of_a_refused_change_is_stopped(settings):
    kube = FakeKube()
    job = _running_busybox_job(kube, settings)
    kube.someone_writes(JOB_PLURAL, "kj", image="alpine:3.20")
    job.mem.body.set(None)
    job.reconcile()
    assert job.status["phase"] == "FAILED" and ("delete", "kj-a1") in kube.calls


def test_a_change_the_policy_allows_runs_from_the_next_attempt(settings):
    kube = FakeKube()
    job = _running_busybox_job(kube, settings)
    first = job.status["acceptedSpecSHA256"]
    kube.end_pod("kj-a1", ok=False)
    kube.someone_writes(JOB_PLURAL, "kj", image="busybox:1.37")
    job.mem.body.set(None)
    job.reconcile()
    assert job.status["phase"] in ("PENDING", "RUNNING") and "kj-a2" in kube.pods
    assert kube.pods["kj-a2"]["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert job.status["acceptedSpecSHA256"] != first


def test_a_cancel_is_never_refused_by_a_tightened_policy(settings):
    kube = FakeKube()
    job = _running_busybox_job(kube, settings)
    job.policy = Policy(allowed_images=("registry.example/",))  # busybox no longer allowed
    kube.someone_writes(JOB_PLURAL, "kj", cancel=True)
    job.mem.body.set(None)
    job.reconcile()
    assert job.status["phase"] == "CANCELLED"


def test_a_pod_kubernetes_rejects_fails_the_job(settings):
    kube = FakeKube()
    kube.reject["kj-a1"] = 'Pod "kj-a1" is invalid: spec.containers[0].resources: bad quantity'
    job = Job(kube, settings)
    assert job.reconcile() is None
    assert kube.calls == [
        ("get", "kj"),
        ("patch", "PENDING"),
        ("rejected", "kj-a1"),
        ("patch", "FAILED"),
        ("event", "Rejected"),
    ]
    st = job.status
    assert st["message"].startswith('Kubernetes rejected the Pod of attempt 1: Pod "kj-a1"')
    assert (st["attempts"][0]["outcome"], st["attempts"][0]["reason"]) == ("failure", "Rejected")
    assert kube.pods == {}
    kube.calls.clear()
    job.reconcile()  # FAILED is final: nothing is tried again
    assert kube.calls == []


def test_a_pod_that_could_not_be_created_for_a_moment_is_created_on_the_next_try(settings):
    """A timeout or a 500 on create raises (the serializer retries the reconcile with
    backoff); the retry must create the Pod, not wait forever for it to appear."""
    kube = FakeKube()
    kube.transient = 1
    job = Job(kube, settings)
    with pytest.raises(RuntimeError):
        job.reconcile()
    assert kube.pods == {}
    job.reconcile()
    assert "kj-a1" in kube.pods


def test_a_mangled_status_does_not_crash_and_adopts_the_pods(settings):
    kube = FakeKube()
    job = Job(kube, settings)
    kube.objects[(JOB_PLURAL, "kj")]["status"] = {"phase": "BOGUS", "attempt": "many"}
    kube.create_pod(
        {
            "metadata": {
                "name": "kj-a1",
                "labels": {"kinetic.dev/job": "kj", "kinetic.dev/attempt": "1"},
            }
        }
    )
    kube.run_pod("kj-a1")
    kube.calls.clear()
    job.reconcile()
    assert not any(c[0] == "create" for c in kube.calls)
    assert job.status["phase"] == "RUNNING" and job.status["attempt"] == 1


# ----------------------------------------------------------------------- finished Pods


def _finished_job(kube: FakeKube, settings: OperatorSettings, ended: datetime) -> Job:
    job = Job(kube, settings)
    job.reconcile()
    job.deliver()
    kube.run_pod("kj-a1")
    job.reconcile()
    kube.end_pod("kj-a1", message="the answer", finished=ended)
    return job


def test_a_finished_pod_goes_after_its_ttl_once_recorded_with_its_log_archived(settings):
    kube = FakeKube()
    job = _finished_job(kube, settings, NOW - timedelta(seconds=200))
    kube.logs["kj-a1"] = b"hello from kj-a1\n"
    archive = layout.job_home(settings.storage_root, "ns", "kj", "u").log_uri("kj-a1")
    at_delete: list[tuple[str, bytes]] = []
    kube.on_delete = lambda name: at_delete.append(
        (job.status["phase"], storage.read_bytes(archive))
    )
    job.reconcile()
    assert job.status["phase"] == "SUCCEEDED" and [d[:2] for d in job.mem.due] == [
        ("kj-a1", archive)
    ]
    reap_due(kube, job.mem.due)  # what the reaper does, off the reconcile path
    assert at_delete == [("SUCCEEDED", b"hello from kj-a1\n")]
    assert job.status["result"] == "the answer" and kube.pods == {}


def test_a_finished_pod_within_its_ttl_is_kept_and_looked_at_again_when_due(settings):
    kube = FakeKube()
    job = _finished_job(kube, settings, NOW - timedelta(seconds=30))
    assert job.reconcile() == pytest.approx(90)
    assert job.mem.due == [] and job.status["phase"] == "SUCCEEDED"
    job.reconcile(NOW + timedelta(seconds=91))
    assert [pod for pod, _, _ in job.mem.due] == ["kj-a1"]


def test_pods_of_a_job_still_running_are_kept(settings):
    kube = FakeKube()
    job = Job(kube, settings, {**SPEC, "retries": 2})
    job.reconcile()
    job.deliver()
    kube.end_pod("kj-a1", ok=False, finished=NOW - timedelta(hours=1))
    job.reconcile()
    assert job.status["attempt"] == 2 and job.status["phase"] == "PENDING"
    assert job.mem.due == []


def test_pods_being_reaped_are_not_handed_out_twice(settings):
    kube = FakeKube()
    job = _finished_job(kube, settings, NOW - timedelta(seconds=200))
    job.mem.reaping = {"kj-a1"}
    job.reconcile()
    assert job.mem.due == []


def test_a_log_that_cannot_be_archived_keeps_its_pod(settings, tmp_path):
    blocked = tmp_path / "store" / "namespaces" / "ns" / "jobs" / "kj" / "u" / "logs"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the log directory should be")
    kube = FakeKube()
    job = _finished_job(kube, settings, NOW - timedelta(seconds=200))
    assert job.reconcile() == 30.0  # looked at again soon
    reap_due(kube, job.mem.due)
    assert "kj-a1" in kube.pods and not any(c[0] == "delete" for c in kube.calls)


def test_without_a_storage_root_finished_pods_go_without_an_archive(settings):
    kube = FakeKube()
    ours = settings.model_copy(update={"storage_root": None})
    job = Job(kube, ours)
    job.reconcile()
    job.deliver()
    kube.end_pod("kj-a1", finished=NOW - timedelta(seconds=200))
    job.reconcile()
    assert [d[:2] for d in job.mem.due] == [("kj-a1", None)]
    reap_due(kube, job.mem.due)
    assert kube.pods == {}


def test_a_finished_pod_is_not_handed_out_before_its_outcome_is_written(settings):
    """The terminal write meets a 409 first: nothing is due in that round; after the fresh
    read the outcome is written, and only then the Pod is due."""
    kube = FakeKube()
    job = _finished_job(kube, settings, NOW - timedelta(seconds=200))
    races = [1]

    def once(plural: str, name: str) -> None:
        if races:
            races.pop()
            kube.someone_writes(plural, name)

    kube.interfere = once
    kube.calls.clear()
    job.reconcile()
    assert kube.calls.index(("conflict", "kj")) < kube.calls.index(("patch", "SUCCEEDED"))
    assert job.status["phase"] == "SUCCEEDED" and [p for p, _, _ in job.mem.due] == ["kj-a1"]
    kube.interfere = lambda plural, name: kube.someone_writes(plural, name)  # always racing
    job.mem = JobMemory()
    kube.objects[(JOB_PLURAL, "kj")]["status"] = {}
    with pytest.raises(Conflict):
        job.reconcile()
    assert job.mem.due == []  # never written: nothing may be deleted


def test_published_config(settings):
    ours = settings.model_copy(update={"storage_root": "gs://b"})
    assert setup.client_config(ours) == {
        "defaultImage": "img:1",
        "accelerators": ",".join(ours.accelerator_catalog.names()),
        "maxInputs": "1000000",
        "runnerPythons": "3.12",
        "storageRoot": "gs://b",
    }
    assert "storageRoot" not in setup.client_config(ours.model_copy(update={"storage_root": None}))


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


def test_an_unexpected_error_shows_on_the_job_until_a_reconcile_succeeds(settings):
    """`kubectl describe` shows why the operator is stuck: a condition and one Event per
    distinct error, while the serializer retries with backoff; cleared once it works."""
    kube = FakeKube()
    kube.transient = 2
    job = Job(kube, settings)

    def failing() -> list[dict[str, Any]]:
        return [c for c in job.status.get("conditions", []) if c["type"] == "ReconcileFailed"]

    with pytest.raises(RuntimeError):
        job.reconcile()
    (cond,) = failing()
    assert (cond["status"], cond["reason"]) == ("True", "RuntimeError")
    assert "the API server is not answering" in cond["message"]
    warned = [e for e in kube.events if e[1] == "ReconcileFailed"]
    assert warned == [("Warning", "ReconcileFailed", cond["message"])]
    with pytest.raises(RuntimeError):
        job.reconcile()  # the same error again: no second Event
    assert [e for e in kube.events if e[1] == "ReconcileFailed"] == warned
    job.reconcile()
    assert "kj-a1" in kube.pods
    assert all(c["status"] == "False" for c in failing())
    assert job.status["phase"] == "PENDING"


def test_write_conflicts_are_not_reported_as_failures(settings):
    kube = FakeKube()
    job = Job(kube, settings)

    def someone_writes(plural: str, name: str) -> None:
        obj = kube.objects[(plural, name)]
        kube._bump(obj)

    kube.interfere = someone_writes
    with pytest.raises(Conflict):
        job.reconcile()
    assert not [e for e in kube.events if e[1] == "ReconcileFailed"]
