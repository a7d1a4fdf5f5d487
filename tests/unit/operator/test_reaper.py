"""Finished attempt Pods past their TTL: which are due, and archive-then-delete."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from kinetic import storage
from kinetic.model.names import fmt_time
from kinetic_operator.logic.observed import PodView
from kinetic_operator.reaper import Reaper, cannot_have_started, due_pods
from kinetic_testing.fake_kube import NOW, FakeKube, reap_due


def view(name: str, phase: str = "Succeeded", ago: float | None = 200, **kw) -> PodView:
    if ago is not None:
        kw.setdefault("finished_at", fmt_time(NOW - timedelta(seconds=ago)))
    return PodView(name=name, attempt=1, phase=phase, **kw)


def test_only_finished_pods_past_their_ttl_are_due():
    pods = [
        view("old"),
        view("failed-old", "Failed"),
        view("young", ago=30),
        view("running", "Running", ago=None),
        view("deleting", deleting=True),
        view("gone", gone=True),
        view("busy"),
    ]
    due, wait = due_pods(pods, NOW, 120, skip={"busy"})
    assert [p.name for p in due] == ["old", "failed-old"]
    assert wait == 90


def test_a_pod_without_a_finish_time_counts_from_its_start_or_creation():
    started = view("s", ago=None, start_time=fmt_time(NOW - timedelta(seconds=500)))
    created = view("c", ago=None, created=fmt_time(NOW - timedelta(seconds=10)))
    due, wait = due_pods([started, created], NOW, 120)
    assert [p.name for p in due] == ["s"] and wait == 110
    assert due_pods([], NOW, 120) == ([], None)


def test_reap_archives_each_log_then_deletes_its_pod(tmp_path):
    kube = FakeKube()
    root = f"file://{tmp_path}"
    for name in ("a", "b", "c"):
        kube.pods[name] = {"metadata": {"name": name}}
        kube.logs[name] = f"log {name}".encode()
    order: list[tuple[str, bool]] = []
    kube.on_delete = lambda name: order.append((name, storage.exists(f"{root}/{name}.log")))
    reap_due(kube, [("a", f"{root}/a.log", None), ("b", f"{root}/b.log", None), ("c", None, None)])
    assert sorted(order) == [("a", True), ("b", True), ("c", False)]
    assert storage.read_bytes(f"{root}/b.log") == b"log b" and kube.pods == {}


def test_a_pod_whose_log_cannot_be_archived_is_kept(tmp_path):
    kube = FakeKube()
    kube.pods["a"] = {"metadata": {"name": "a"}}
    (tmp_path / "blocked").write_text("a file, not a directory")
    reap_due(kube, [("a", f"file://{tmp_path}/blocked/a.log", None)])
    assert "a" in kube.pods and not any(c[0] == "delete" for c in kube.calls)


def test_each_pod_is_reaped_on_its_own_as_soon_as_it_is_due(tmp_path):
    """A Pod whose log is slow holds back no other, and none is reaped twice."""
    kube = FakeKube()
    gate = threading.Event()
    for name in ("slow", "quick"):
        kube.pods[name] = {"metadata": {"name": name}}

    def log_of(namespace: str, name: str) -> bytes:
        if name == "slow":
            gate.wait(5)
        return name.encode()

    kube.pod_log = log_of  # type: ignore[method-assign]
    reaper = Reaper()
    reaper.submit(kube, "owner", "ns", [("slow", f"file://{tmp_path}/slow.log", None)])
    assert reaper.in_flight("owner") == {"slow"}
    quick = ("quick", f"file://{tmp_path}/q.log", None)
    reaper.submit(kube, "owner", "ns", [("slow", None, None), quick])
    reaper.submit(kube, "other", "ns", [])  # nothing to do
    assert reaper.in_flight("other") == set()
    deadline = time.monotonic() + 5
    while "quick" in kube.pods and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "quick" not in kube.pods and "slow" in kube.pods  # not waiting for the slow one
    gate.set()
    while not reaper.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reaper.in_flight("owner") == set()
    assert [c for c in kube.calls if c[0] == "delete"] == [("delete", "quick"), ("delete", "slow")]
    assert storage.read_bytes(f"file://{tmp_path}/slow.log") == b"slow"


def test_a_pod_made_again_under_the_name_by_someone_else_is_not_reaped(tmp_path):
    """The operator's Pod was deleted meanwhile and someone made another of its name: the
    deletion names the instance (its UID), so the API server refuses it for the other."""
    kube = FakeKube()
    kube.pods["a"] = {"metadata": {"name": "a", "uid": "someone-elses"}}
    kube.logs["a"] = b"not ours"
    reap_due(kube, [("a", None, "the-operators")])
    assert "a" in kube.pods and ("not ours", "a") in kube.calls


@pytest.mark.parametrize(
    ("phase", "waiting", "unschedulable", "at_once"),
    [
        ("Pending", "ImagePullBackOff", None, True),  # the image is not there: nothing ran
        ("Pending", "ErrImagePull", None, True),
        ("Pending", "CreateContainerConfigError", None, True),
        ("Pending", None, "0/1 nodes are available: 1 Insufficient cpu.", True),
        # Starting, or started before the watch said so: its process may be running.
        ("Pending", "ContainerCreating", None, False),
        ("Pending", None, None, False),
        ("Running", None, None, False),
        ("Running", "CrashLoopBackOff", None, False),
    ],
)
def test_only_a_pod_that_cannot_have_started_is_deleted_without_grace(
    phase: str, waiting: str | None, unschedulable: str | None, at_once: bool
) -> None:
    view = PodView(
        name="b-i0-1", attempt=1, phase=phase, waiting_reason=waiting, unschedulable=unschedulable
    )
    assert cannot_have_started(view) is at_once
