"""A multi-host job's gang: names, rendezvous environment, admission of hosts, and verdicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kinetic.model import names
from kinetic.model.catalog import default_catalog
from kinetic.model.gang import (
    DEFAULT_RENDEZVOUS_PORT,
    effective_hosts,
    hosts_problems,
    member_pod_names,
    rendezvous_env,
)
from kinetic.model.limits import MAX_HOSTS
from kinetic_operator.logic.gang_verdicts import (
    Member,
    Outcome,
    Phase,
    gang_outcome,
    members_to_delete,
)

CATALOG = default_catalog()
T0 = datetime(2025, 1, 1, tzinfo=UTC)
DEADLINE = timedelta(minutes=5)

# --------------------------------------------------------------------------- names


def test_gang_pods_append_the_rank_to_the_attempt_pod():
    assert member_pod_names(names.job_pod_name("train", 2), 3) == [
        "train-a2-r0",
        "train-a2-r1",
        "train-a2-r2",
    ]
    assert member_pod_names(names.input_pod_name("grp-0a1b2c3d", 7, 1), 2) == [
        "grp-0a1b2c3d-i7-1-r0",
        "grp-0a1b2c3d-i7-1-r1",
    ]


def test_one_host_keeps_todays_pod_name():
    assert member_pod_names("train-a2", 1) == ["train-a2"]


@pytest.mark.parametrize(
    "owner, service",
    [
        ("train", "train-gang"),
        ("grp-0a1b2c3d", "grp-0a1b2c3d-gang"),
        ("my.job", None),  # dots: no DNS label
        ("7up", None),  # a Service name starts with a letter
        ("a" * 59, None),  # 59 + "-gang" is 64 characters
        ("a" * 58, "a" * 58 + "-gang"),
    ],
)
def test_gang_service_name_is_a_dns_label(owner, service):
    got = names.gang_service_name(owner)
    assert len(got) <= 63 and got[0].isalpha() and "." not in got
    if service is not None:
        assert got == service
    else:
        assert got.startswith("gang-") and got == names.gang_service_name(owner)  # stable
        assert got != names.gang_service_name(owner + "x")


@pytest.mark.parametrize(
    "pod, hashed",
    [("train-a2-r0", False), ("my.job-2-0", True), ("9lives-1-0", False), ("x" * 64, True)],
)
def test_gang_hostname_is_the_pod_name_when_it_can_be(pod, hashed):
    got = names.gang_hostname(pod)
    assert (got != pod) is hashed
    assert len(got) <= 63 and "." not in got
    # fully qualified: a relative name would be tried against the search path when rank 0
    # has no address yet, and there name a Service "<got>" in a namespace "train-gang"
    assert names.gang_address(got, "train-gang", "team-a") == (
        f"{got}.train-gang.team-a.svc.cluster.local"
    )
    assert names.gang_address(got, "s", "ns", "corp.example") == f"{got}.s.ns.svc.corp.example"


# --------------------------------------------------------------------------- environment


def test_rendezvous_env_for_torch_and_jax():
    env = rendezvous_env(2, 4, "train-1-0.train-gang", 29500, hostnames=None, tpu=False)
    assert env == {
        "MASTER_ADDR": "train-1-0.train-gang",
        "MASTER_PORT": "29500",
        "RANK": "2",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "KINETIC_PROCESS_ID": "2",
        "KINETIC_NUM_PROCESSES": "4",
        "KINETIC_COORDINATOR_ADDRESS": "train-1-0.train-gang:29500",
    }


def test_rendezvous_env_on_tpu_lists_every_host_by_rank():
    hosts = [f"t-1-{r}.t-gang" for r in range(4)]
    env = rendezvous_env(3, 4, hosts[0], DEFAULT_RENDEZVOUS_PORT, hostnames=hosts, tpu=True)
    assert env["TPU_WORKER_ID"] == "3"
    assert env["TPU_WORKER_HOSTNAMES"] == "t-1-0.t-gang,t-1-1.t-gang,t-1-2.t-gang,t-1-3.t-gang"
    assert env["RANK"] == "3" and env["MASTER_PORT"] == "29500"


def test_rendezvous_env_without_dns_uses_rank_0s_ip():
    env = rendezvous_env(1, 2, "10.244.0.7", 29500, hostnames=None, tpu=False)
    assert env["MASTER_ADDR"] == "10.244.0.7"
    assert env["KINETIC_COORDINATOR_ADDRESS"] == "10.244.0.7:29500"
    assert "TPU_WORKER_ID" not in env
    v6 = rendezvous_env(0, 2, "fd00::7", 29500, hostnames=None, tpu=False)
    assert v6["KINETIC_COORDINATOR_ADDRESS"] == "[fd00::7]:29500"


def test_every_rendezvous_name_is_declared_once():
    env = rendezvous_env(0, 1, "h", 1, hostnames=["h"], tpu=True)
    declared = {v for k, v in vars(names).items() if k.startswith("ENV_")}
    assert set(env) <= declared


@pytest.mark.parametrize(
    "rank, world, port, hostnames, tpu, message",
    [
        (4, 4, 29500, None, False, "rank must be in 0 .. world - 1"),
        (-1, 4, 29500, None, False, "rank must be in 0 .. world - 1"),
        (0, 0, 29500, None, False, "world >= 1"),
        (0, 2, 0, None, False, "port must be in 1 .. 65535"),
        (0, 2, 29500, ["a"], False, "one name per rank: 2 expected, got 1"),
        (0, 2, 29500, None, True, "hostnames are required on TPU"),
    ],
)
def test_rendezvous_env_refuses_what_members_could_not_agree_on(
    rank, world, port, hostnames, tpu, message
):
    with pytest.raises(ValueError, match=message):
        rendezvous_env(rank, world, "h", port, hostnames=hostnames, tpu=tpu)


# --------------------------------------------------------------------------- admission


@pytest.mark.parametrize(
    "hosts, accelerator, max_hosts, problems",
    [
        (None, "tpu-v5e-16", None, []),  # left out: the slice's own count
        (1, None, None, []),
        (2, "gpu-l4x1", None, []),  # a single-host accelerator allows any count
        (8, "cpu", 8, []),
        (4, "tpu-v5e-16", None, []),
        (4, "v5litepod-16", 4, []),
        (3, "tpu-v5e-8", None, []),  # three single-host slices
        (2, "tpu-v9-16", None, []),  # an unknown name is the accelerator check's refusal
        (0, None, None, ["spec.hosts is 0; a job runs on at least 1 host: set it to 1"]),
        (-3, "cpu", None, ["spec.hosts is -3; a job runs on at least 1 host"]),
        ("4", None, None, ["spec.hosts must be a whole number of hosts, at least 1; got '4'"]),
        (True, None, None, ["spec.hosts must be a whole number of hosts, at least 1; got True"]),
        (2.0, None, None, ["spec.hosts must be a whole number of hosts, at least 1; got 2.0"]),
        (MAX_HOSTS + 1, None, None, [f"the limit is {MAX_HOSTS} hosts per job: ask for fewer"]),
        (
            8,
            "cpu",
            4,
            [
                "spec.hosts is 8, above the policy's maxHostsPerJob of 4: ask for at most 4 "
                "hosts, or ask the cluster administrator to raise maxHostsPerJob"
            ],
        ),
        (
            2,
            "tpu-v5e-16",
            None,
            [
                "spec.hosts is 2, but spec.accelerator 'tpu-v5e-16' is a slice of 4 hosts, "
                "one Pod each: set spec.hosts to 4, or leave it out"
            ],
        ),
        (
            8,
            "tpu-v5e-16",
            4,
            ["above the policy's maxHostsPerJob of 4", "is a slice of 4 hosts"],
        ),
    ],
)
def test_hosts_problems(hosts, accelerator, max_hosts, problems):
    found = hosts_problems(hosts, accelerator, CATALOG, max_hosts, "spec.hosts")
    assert len(found) == len(problems)
    for got, want in zip(found, problems, strict=True):
        assert want in got
        assert got.startswith("spec.hosts")


def test_hosts_problems_name_the_field_of_a_batch_job():
    (why,) = hosts_problems(1, "tpu-v4-32", CATALOG, None, "spec.jobs[3].hosts")
    assert why.startswith("spec.jobs[3].hosts is 1, but spec.jobs[3].accelerator 'tpu-v4-32'")
    assert "set spec.jobs[3].hosts to 4" in why


@pytest.mark.parametrize(
    "hosts, accelerator, effective",
    [
        (None, None, 1),
        (None, "gpu-l4", 1),
        (None, "tpu-v5e-16", 4),
        (None, "tpu-v5e-3", 1),
        (3, "gpu-l4", 3),
    ],
)
def test_effective_hosts(hosts, accelerator, effective):
    assert effective_hosts(hosts, CATALOG, accelerator) == effective


# --------------------------------------------------------------------------- verdicts


def m(rank: int, phase: str, minutes: float | None = None, reason: str = "") -> Member:
    since = None if minutes is None else T0 + timedelta(minutes=minutes)
    return Member(rank, Phase(phase), reason, since)


NOW = T0 + timedelta(minutes=10)


@pytest.mark.parametrize(
    "members, outcome, ranks",
    [
        ([m(0, "running"), m(1, "running")], Outcome.RUNNING, ()),
        ([m(0, "running"), m(1, "succeeded")], Outcome.RUNNING, ()),  # workers may end first
        ([m(0, "succeeded"), m(1, "running")], Outcome.SUCCEEDED, (0,)),
        ([m(0, "succeeded"), m(1, "failed", 9)], Outcome.SUCCEEDED, (0,)),  # rank 0's result
        ([m(0, "failed", 9), m(1, "succeeded")], Outcome.FAILED, (0,)),
        ([m(0, "running"), m(1, "failed", 9)], Outcome.FAILED, (1,)),
        ([m(0, "running"), m(1, "gone", 9)], Outcome.DISRUPTED, (1,)),
        ([m(0, "running")], Outcome.DISRUPTED, (1,)),  # no Pod for rank 1
        ([m(0, "failed", 9), m(1, "gone", 8)], Outcome.DISRUPTED, (1,)),  # lost first
        ([m(0, "failed", 8), m(1, "gone", 8)], Outcome.DISRUPTED, (1,)),  # a tie: not charged
        ([m(0, "failed", 7), m(1, "gone", 8)], Outcome.FAILED, (0,)),  # failed first
        ([m(0, "failed", 7), m(1, "gone")], Outcome.DISRUPTED, (1,)),  # loss of unknown time
        ([m(0, "failed"), m(1, "gone", 8)], Outcome.DISRUPTED, (1,)),  # failure of unknown time
        ([m(0, "failed", 7), m(1, "failed", 8)], Outcome.FAILED, (0, 1)),
        ([m(0, "pending", 5), m(1, "running")], Outcome.UNSCHEDULABLE, (0,)),  # exactly 5 min
        ([m(0, "pending", 6), m(1, "running")], Outcome.RUNNING, ()),
        ([m(0, "pending"), m(1, "pending", 6)], Outcome.RUNNING, ()),  # unknown: not judged
        ([m(0, "pending", 0), m(1, "failed", 9)], Outcome.FAILED, (1,)),  # an ending first
        ([m(0, "running"), m(1, "running"), m(7, "failed", 1)], Outcome.RUNNING, ()),  # stray
        (
            [m(0, "running"), m(1, "running"), m(1, "failed", 1)],
            Outcome.RUNNING,
            (),
        ),  # one observation per rank: the first
    ],
)
def test_gang_outcome(members, outcome, ranks):
    verdict = gang_outcome(members, 2, NOW, DEADLINE)
    assert (verdict.outcome, verdict.ranks) == (outcome, ranks)


def test_verdict_messages_say_who_and_why():
    failed = gang_outcome([m(0, "running"), m(1, "failed", 1, "OOMKilled")], 2, NOW)
    assert failed.message == "rank 1 failed: OOMKilled"
    lost = gang_outcome([m(0, "gone", 1, "evicted"), m(1, "running")], 2, NOW)
    assert lost.message == "rank 0 was lost: evicted"
    assert gang_outcome([m(0, "succeeded")], 1, NOW).message == "rank 0 succeeded"


@pytest.mark.parametrize(
    "members, deleted",
    [
        ([m(0, "running"), m(1, "failed", 1), m(2, "pending", 9)], [0, 2]),
        ([m(0, "succeeded"), m(1, "running"), m(2, "succeeded")], [1]),
        ([m(0, "running"), m(1, "gone", 1), m(2, "running")], [0, 2]),
        ([m(0, "running"), m(1, "running"), m(2, "running")], []),  # nothing while it runs
    ],
)
def test_members_to_delete(members, deleted):
    verdict = gang_outcome(members, 3, NOW)
    assert members_to_delete(members, 3, verdict) == deleted


# --------------------------------------------------------------------------- a simulation


class Gang:
    """A gang as the operator would see it, one event at a time."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.members = {r: m(r, "pending", 0) for r in range(world)}

    def set(self, rank: int, phase: str, minutes: float, reason: str = "") -> None:
        self.members[rank] = m(rank, phase, minutes, reason)

    def judge(self, minutes: float) -> tuple[Outcome, list[int]]:
        seen = list(self.members.values())
        verdict = gang_outcome(seen, self.world, T0 + timedelta(minutes=minutes), DEADLINE)
        return verdict.outcome, members_to_delete(seen, self.world, verdict)


def test_a_failing_rank_stops_the_whole_gang():
    gang = Gang(3)
    for r in range(3):
        gang.set(r, "running", 1)
    assert gang.judge(2) == (Outcome.RUNNING, [])
    gang.set(1, "failed", 3, "Error: exit code 1")
    assert gang.judge(3) == (Outcome.FAILED, [0, 2])


def test_an_evicted_member_disrupts_the_gang_even_if_a_peer_then_crashes():
    gang = Gang(3)
    for r in range(3):
        gang.set(r, "running", 1)
    gang.set(2, "gone", 4, "Evicted")
    gang.set(0, "failed", 4.5, "connection to rank 2 lost")
    assert gang.judge(5) == (Outcome.DISRUPTED, [1])


def test_a_half_placed_gang_is_torn_down_after_the_deadline():
    gang = Gang(4)
    gang.set(0, "running", 1)
    gang.set(1, "running", 1)
    assert gang.judge(4.9) == (Outcome.RUNNING, [])
    outcome, deleted = gang.judge(5)
    assert (outcome, deleted) == (Outcome.UNSCHEDULABLE, [0, 1, 2, 3])
    verdict = gang_outcome(list(gang.members.values()), 4, T0 + timedelta(minutes=5), DEADLINE)
    assert verdict.ranks == (2, 3)
    assert verdict.message.startswith("2 of 4 members (rank 2, 3) waited for a node for 300 s")
