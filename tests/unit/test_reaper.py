"""Finished attempt Pods past their TTL: which are due, and archive-then-delete."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from kinetic import storage
from kinetic.names import fmt_time
from kinetic_operator.observed import PodView
from kinetic_operator.reaper import Reaper, due_pods, reap
from test_operator_reconcile import NOW, FakeKube


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
    reap(kube, "ns", [("a", f"{root}/a.log"), ("b", f"{root}/b.log"), ("c", None)])
    assert sorted(order) == [("a", True), ("b", True), ("c", False)]
    assert storage.read_bytes(f"{root}/b.log") == b"log b" and kube.pods == {}


def test_a_pod_whose_log_cannot_be_archived_is_kept(tmp_path):
    kube = FakeKube()
    kube.pods["a"] = {"metadata": {"name": "a"}}
    (tmp_path / "blocked").write_text("a file, not a directory")
    reap(kube, "ns", [("a", f"file://{tmp_path}/blocked/a.log")])
    assert "a" in kube.pods and not any(c[0] == "delete" for c in kube.calls)


def test_the_reaper_runs_one_pass_per_owner_in_the_background(tmp_path):
    kube = FakeKube()
    gate = threading.Event()
    kube.pods["p"] = {"metadata": {"name": "p"}}

    def slow_log(namespace: str, name: str) -> bytes:
        gate.wait(5)
        return b"x"

    kube.pod_log = slow_log  # type: ignore[method-assign]

    async def main() -> None:
        reaper = Reaper()
        reaper.submit(kube, "owner", "ns", [("p", f"file://{tmp_path}/p.log")])
        assert reaper.in_flight("owner") == {"p"}
        reaper.submit(kube, "owner", "ns", [("q", None)])  # a pass is running: not now
        reaper.submit(kube, "other", "ns", [])  # nothing to do
        assert reaper.in_flight("other") == set()
        gate.set()
        while reaper.tasks:
            await asyncio.sleep(0.01)
        assert reaper.in_flight("owner") == set()

    asyncio.run(main())
    assert [c for c in kube.calls if c[0] == "delete"] == [("delete", "p")]
