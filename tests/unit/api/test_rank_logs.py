"""Logs by rank: `job.logs(rank=i)`, `job.tail(rank=i)` and `kinetic jobs logs ID --rank i`.

A multi-host attempt has one log per member. These tests give the handle a
cluster in memory (what the API server would answer: the job, its Pods, their
logs) and real file:// storage for the archive the operator writes, and check
whose log the user gets, and what a rank the job does not have says.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kinetic import storage
from kinetic.api import handle as handles
from kinetic.api import kube
from kinetic.api.handle import JobHandle, member_pod, pod_of_rank, rank_problem, recorded_hosts
from kinetic.api.inputs import InputHandle
from kinetic.api.logstream import LogFollower
from kinetic.cli import jobs as jobs_cli
from kinetic.model import layout, names
from kubernetes.client import V1ObjectMeta, V1Pod
from typer.testing import CliRunner

NS = "team-a"


def pod(name: str, attempt: int, rank: int | None = None) -> V1Pod:
    labels = {names.LABEL_JOB: "train", names.LABEL_ATTEMPT: str(attempt)}
    if rank is not None:
        labels[names.LABEL_RANK] = str(rank)
    created = datetime(2025, 1, 1, tzinfo=UTC)
    return V1Pod(metadata=V1ObjectMeta(name=name, labels=labels, creation_timestamp=created))


def gang_attempt(attempt: int, hosts: int, outcome: str = "failed") -> dict[str, Any]:
    pod_name = names.job_pod_name("train", attempt)
    return {
        "attempt": attempt,
        "pod": pod_name,
        "outcome": "failure",
        "members": [
            {"rank": r, "pod": names.gang_pod_name(pod_name, r), "outcome": outcome}
            for r in range(hosts)
        ],
    }


class Cluster:
    """What the API server answers about one KineticJob ``train``: the object, its Pods and
    their logs (a Pod's log is its name, so the test sees whose it got)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]) -> None:
        self.job: dict[str, Any] | None = {"spec": spec, "status": {"attempts": []}}
        self.pods: list[V1Pod] = []
        monkeypatch.setattr(kube, "get", lambda *a, **k: self._recorded())
        monkeypatch.setattr(kube, "list_pods", lambda *a, **k: list(self.pods))
        monkeypatch.setattr(kube, "pod_log", self._log)

    def _recorded(self) -> dict[str, Any] | None:
        """The job, its status recording its Pods as the operator does (each attempt's Pod,
        or members): the handles read only the Pods the operator recorded."""
        if self.job is None or self.job["status"]["attempts"]:
            return self.job
        attempts: dict[int, dict[str, Any]] = {}
        for p in self.pods:
            a = int(p.metadata.labels[names.LABEL_ATTEMPT])
            rec = attempts.setdefault(a, {"attempt": a, "pod": names.job_pod_name("train", a)})
            if names.LABEL_RANK in p.metadata.labels:
                rank = int(p.metadata.labels[names.LABEL_RANK])
                rec.setdefault("members", []).append({"rank": rank, "pod": p.metadata.name})
        return {**self.job, "status": {"attempts": list(attempts.values())}}

    def _log(self, name: str, namespace: str, tail: int | None = None, context: Any = None) -> Any:
        live = {p.metadata.name for p in self.pods}
        return f"log of {name}\n" if name in live else None


@pytest.fixture
def root(tmp_path: Path) -> str:
    return f"file://{tmp_path}/store"


def job(root: str) -> JobHandle:
    return JobHandle(job_id="train", namespace=NS, uid="u-1", storage_root=root)


def archive(root: str, pod_name: str, text: str) -> None:
    """What the operator writes before it deletes a finished Pod."""
    storage.write_bytes(layout.job_home(root, NS, "train", "u-1").log_uri(pod_name), text.encode())


# --------------------------------------------------------------------------- live Pods


def test_a_live_gang_gives_each_ranks_own_log(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    cluster = Cluster(monkeypatch, {"accelerator": "gpu-l4", "hosts": 3})
    cluster.pods = [pod("train-a1-r0", 1, 0), pod("train-a1-r1", 1, 1), pod("train-a1-r2", 1, 2)]
    h = job(root)
    assert h.logs() == "log of train-a1-r0\n"  # rank 0 by default: the coordinator
    assert h.logs(rank=2) == "log of train-a1-r2\n"
    assert h.tail(5, rank=1) == "log of train-a1-r1\n"


def test_the_newest_attempts_member_is_read(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    cluster = Cluster(monkeypatch, {"hosts": 2})
    cluster.pods = [pod("train-a1-r1", 1, 1), pod("train-a2-r0", 2, 0), pod("train-a2-r1", 2, 1)]
    assert job(root).logs(rank=1) == "log of train-a2-r1\n"


def test_a_single_host_job_reads_its_one_pod(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    cluster = Cluster(monkeypatch, {"accelerator": "gpu-l4"})
    cluster.pods = [pod("train-a1", 1)]
    assert job(root).logs(rank=0) == "log of train-a1\n"


# --------------------------------------------------------------------------- the archive


def test_an_ended_gangs_logs_come_from_each_members_archive(
    monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    cluster = Cluster(monkeypatch, {"accelerator": "gpu-l4", "hosts": 2})
    assert cluster.job is not None
    cluster.job["status"]["attempts"] = [gang_attempt(1, 2)]
    archive(root, "train-a1-r0", "rank zero\n")
    archive(root, "train-a1-r1", "rank one\nlast\n")
    h = job(root)
    assert h.logs() == "rank zero\n"
    assert h.logs(rank=1) == "rank one\nlast\n"
    assert h.tail(1, rank=1) == "last\n"


def test_a_multi_host_slice_without_hosts_counts_its_own(
    monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    """tpu-v5e-16 is 4 hosts: rank 3 exists though the spec does not say hosts; and before
    the operator records members, the archive is still looked up by the member's name."""
    cluster = Cluster(monkeypatch, {"accelerator": "tpu-v5e-16"})
    assert cluster.job is not None
    cluster.job["status"]["attempts"] = [{"attempt": 1, "pod": "train-a1", "outcome": "failure"}]
    archive(root, "train-a1-r0", "coordinator\n")
    archive(root, "train-a1-r3", "worker 3\n")
    assert job(root).logs(rank=3) == "worker 3\n"
    assert job(root).logs() == "coordinator\n"


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("rank", [3, -1, 10])
def test_a_rank_the_gang_lacks_is_refused_naming_its_hosts(
    monkeypatch: pytest.MonkeyPatch, root: str, rank: int
) -> None:
    Cluster(monkeypatch, {"hosts": 3})
    with pytest.raises(ValueError) as refused:
        job(root).logs(rank=rank)
    assert str(refused.value) == (
        f"rank={rank}: job train runs on 3 hosts, ranks 0 to 2: pass a rank in that range "
        "(0, the coordinator, is the default)"
    )


def test_a_single_host_job_has_only_rank_0(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    Cluster(monkeypatch, {"accelerator": "gpu-l4"})
    with pytest.raises(ValueError, match=r"rank=1: job train runs on 1 host, so its only rank"):
        job(root).tail(10, rank=1)


def test_recorded_members_count_even_when_the_catalog_does_not_know_the_slice(
    monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    """A slice only the cluster's catalog has: its recorded members say how many hosts."""
    cluster = Cluster(monkeypatch, {"accelerator": "tpu-v5e-64"})
    assert cluster.job is not None
    cluster.job["status"]["attempts"] = [gang_attempt(1, 16)]
    archive(root, "train-a1-r15", "last rank\n")
    assert job(root).logs(rank=15) == "last rank\n"


@pytest.mark.parametrize(
    "rank,hosts,says",
    [
        (0, 1, None),
        (3, 4, None),
        (4, 4, "runs on 4 hosts, ranks 0 to 3"),
        (1, 1, "runs on 1 host, so its only rank is 0: leave rank out (or pass 0)"),
        ("1", 4, "rank='1'"),
        (True, 4, "rank=True"),
    ],
)
def test_rank_problem(rank: Any, hosts: int, says: str | None) -> None:
    problem = rank_problem("j", rank, hosts)
    assert problem is None if says is None else says in (problem or "")


# --------------------------------------------------------------------------- pure helpers


def test_pod_of_rank_takes_the_newest_attempt_and_none_before_that_rank_exists() -> None:
    pods = handles.sort_by_attempt(
        [pod("j-a2-r0", 2, 0), pod("j-a1-r1", 1, 1), pod("j-a1-r0", 1, 0)]
    )
    assert pod_of_rank(pods, 0).metadata.name == "j-a2-r0"  # type: ignore[union-attr]
    assert pod_of_rank(pods, 1) is None  # rank 1 of attempt 2 is not created yet
    assert pod_of_rank([pod("j-a1", 1)], 0).metadata.name == "j-a1"  # type: ignore[union-attr]
    assert pod_of_rank([], 0) is None


def test_member_pod_prefers_the_record_then_the_naming_rule() -> None:
    recorded = {"pod": "j-a1", "members": [{"rank": 1, "pod": "j-a1-r1"}]}
    assert member_pod(recorded, 1, 2) == "j-a1-r1"
    assert member_pod({"pod": "j-a1"}, 0, 1) == "j-a1"
    assert member_pod({"pod": "j-a1"}, 0, 4) == "j-a1-r0"
    assert recorded_hosts(recorded) == 2
    assert recorded_hosts(None) == recorded_hosts({"pod": "x"}) == 1


# --------------------------------------------------------------------------- inputs of a batch


def test_an_inputs_hosts_come_from_its_own_job_or_the_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = {"spec": {"jobs": [{"hosts": 2}, {"accelerator": "tpu-v5e-16"}, {}]}}
    monkeypatch.setattr(kube, "get", lambda *a, **k: batch)
    monkeypatch.setattr(kube, "list_pods", lambda *a, **k: [])

    def hosts(i: int) -> int:
        h = InputHandle(job_id=f"g-{i}", namespace=NS, group_id="g", group_index=i)
        return h._hosts(None)

    assert [hosts(0), hosts(1), hosts(2)] == [2, 4, 1]
    batch["spec"] = {"template": {"hosts": 3}, "inputs": {"count": 5}}
    assert hosts(4) == 3


# --------------------------------------------------------------------------- following


def test_following_a_gang_prints_rank_0_only() -> None:
    class Followed:
        namespace, context = NS, None

        def logs(self) -> str | None:
            return ""

        def _live_pods(self) -> list[V1Pod]:
            return [pod("j-a1-r0", 1, 0), pod("j-a1-r1", 1, 1), pod("j-a2", 2)]

    follower = LogFollower(Followed())
    assert [p.metadata.name for p in follower._unprinted()] == ["j-a1-r0", "j-a2"]


# --------------------------------------------------------------------------- the CLI


class Recorder:
    """A handle that records what the command asked of it."""

    def __init__(self, refuse: str | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.refuse = refuse

    def logs(self, **kw: Any) -> str:
        self.calls.append(("logs", kw))
        if self.refuse:
            raise ValueError(self.refuse)
        return "text\n"

    def tail(self, n: int, **kw: Any) -> str:
        self.calls.append(("tail", {"n": n, **kw}))
        return "tail\n"


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], ("logs", {"rank": 0})),
        (["--rank", "2"], ("logs", {"rank": 2})),
        (["--tail", "5", "--rank", "1"], ("tail", {"n": 5, "rank": 1})),
        (["-f", "--rank", "3"], ("logs", {"follow": True, "rank": 3})),
    ],
)
def test_the_cli_passes_the_rank(
    monkeypatch: pytest.MonkeyPatch, args: list[str], expected: tuple[str, dict[str, Any]]
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(jobs_cli, "_handle", lambda *a: recorder)
    result = CliRunner().invoke(jobs_cli.app, ["logs", "train", *args])
    assert result.exit_code == 0, result.output
    assert recorder.calls == [expected]


def test_the_cli_says_why_a_rank_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    said = rank_problem("train", 7, 4)
    assert said is not None
    monkeypatch.setattr(jobs_cli, "_handle", lambda *a: Recorder(refuse=said))
    result = CliRunner().invoke(jobs_cli.app, ["logs", "train", "--rank", "7"])
    assert result.exit_code == 1
    assert "rank=7: job train runs on 4 hosts, ranks 0 to 3" in " ".join(result.output.split())


def test_status_lists_the_newest_gang_attempts_members() -> None:
    rows = jobs_cli.member_rows(gang_attempt(2, 2, outcome="succeeded"))
    assert [(m["rank"], m["pod"], m["outcome"]) for m in rows] == [
        (0, "train-a2-r0", "succeeded"),
        (1, "train-a2-r1", "succeeded"),
    ]
