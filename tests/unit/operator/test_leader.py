"""Leader election's decisions (`kinetic_operator.logic.leader`): tables, and two replicas simulated
on one clock through crashes, stalls and clean hand-overs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from kinetic.model.names import holder_identity, holder_pod
from kinetic_operator.logic.leader import (
    LeaseRecord,
    Move,
    Observation,
    Timings,
    next_look,
    next_move,
    observe,
    record_after,
    released,
    still_leading,
)

T = Timings()
WALL = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def held_by(holder: str, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_duration_seconds=15, transitions=transitions)


@pytest.mark.parametrize(
    "record, changed_at, now, move",
    [
        (None, 0.0, 0.0, Move.CREATE),
        (held_by("a"), 0.0, 100.0, Move.RENEW),  # ours, however old
        (held_by(""), 0.0, 0.0, Move.TAKE),  # released: at once
        (held_by("b"), 0.0, 14.9, Move.WAIT),
        (held_by("b"), 0.0, 15.0, Move.TAKE),  # unchanged for a lease duration
        (held_by("b"), 10.0, 20.0, Move.WAIT),  # it changed at 10: alive
    ],
)
def test_the_next_move(record, changed_at, now, move):
    seen = Observation(record=record, version="1", changed_at=changed_at)
    assert next_move(seen, "a", now, T) is move


@pytest.mark.parametrize(
    "holder, move",
    [
        ("op-7d9-x2_1f3a", Move.TAKE),  # this Pod's earlier process: it has exited
        ("op-7d9-y5_77aa", Move.WAIT),  # the other Pod's: alive until its lease runs out
        ("op-7d9-x2", Move.TAKE),  # a holder without a process part is still this Pod
    ],
)
def test_a_restarted_container_takes_its_own_pods_lease_at_once(holder, move):
    seen = Observation(record=held_by(holder), version="1", changed_at=0.0)
    me = holder_identity("op-7d9-x2", "c0ffee")
    assert holder_pod(me) == "op-7d9-x2"
    assert next_move(seen, me, 1.0, T) is move


@pytest.mark.parametrize(
    "holder, changed_at, now, pause",
    [
        ("a", 0.0, 5.0, 2.0),  # leading: renew every retry period
        ("", 0.0, 5.0, 2.0),  # released: taken at this look; then renewing
        ("b", 0.0, 5.0, 2.0),  # ten seconds to go: a whole period
        ("b", 0.0, 14.5, 0.5),  # half a second to go: look then, not 1.5 s late
        ("b", 0.0, 16.0, 0.0),  # already out: at once
    ],
)
def test_when_to_look_again(holder, changed_at, now, pause):
    seen = Observation(record=held_by(holder), version="1", changed_at=changed_at)
    assert next_look(seen, "a", now, T) == pytest.approx(pause)


def test_a_lease_is_alive_while_its_record_changes_not_while_its_version_does():
    first = observe(None, held_by("b"), "1", now=0.0)
    same = observe(first, held_by("b"), "2", now=9.0)  # rewritten with the same content
    assert same.changed_at == 0.0 and same.version == "2"
    renewed = observe(same, LeaseRecord("b", 15, renew_time="x"), "3", now=12.0)
    assert renewed.changed_at == 12.0


def test_what_each_move_writes():
    created = record_after(Move.CREATE, None, "a", WALL, T)
    assert created == LeaseRecord(
        holder="a",
        lease_duration_seconds=15,
        acquire_time="2026-11-27T12:00:00.000000Z",
        renew_time="2026-11-27T12:00:00.000000Z",
        transitions=0,
    )
    later = WALL + timedelta(seconds=2, microseconds=5)
    renewed = record_after(Move.RENEW, created, "a", later, T)
    assert renewed.acquire_time == created.acquire_time
    assert renewed.renew_time == "2026-11-27T12:00:02.000005Z" and renewed.transitions == 0
    taken = record_after(Move.TAKE, renewed, "b", later, T)
    assert (taken.holder, taken.transitions, taken.acquire_time) == ("b", 1, renewed.renew_time)
    assert released(taken, later).holder == "" and released(taken, later).transitions == 1
    with pytest.raises(ValueError):
        record_after(Move.WAIT, taken, "a", later, T)


def test_a_leader_stops_before_anyone_may_take_over():
    assert still_leading(last_renewed=0.0, now=9.9, timings=T)
    assert not still_leading(last_renewed=0.0, now=10.0, timings=T)
    assert T.problems() == []
    assert Timings(lease_duration=10, renew_deadline=10).problems()
    assert Timings(retry_period=0).problems()


# ----------------------------------------------------------------------- simulation


@dataclass
class Server:
    """The API server's Lease: writes are guarded by resourceVersion, as the real one does."""

    record: LeaseRecord | None = None
    version: int = 0
    writes: list[tuple[float, str]] = field(default_factory=list)

    def write(self, expected: str | None, record: LeaseRecord, at: float) -> bool:
        if (None if self.record is None else str(self.version)) != expected:
            return False  # 409 (or 409 AlreadyExists on create)
        self.record, self.version = record, self.version + 1
        self.writes.append((at, record.holder))
        return True


@dataclass
class Replica:
    name: str
    seen: Observation | None = None
    last_renewed: float | None = None
    stalled_until: float = -1.0
    dead: bool = False
    acted_as_leader: list[float] = field(default_factory=list)

    def leading(self, now: float) -> bool:
        return self.last_renewed is not None and still_leading(self.last_renewed, now, T)

    def step(self, server: Server, now: float) -> None:
        if self.dead or now < self.stalled_until:
            return
        if self.last_renewed is not None and not self.leading(now):
            self.dead = True  # it exits, as the controller-runtime way: restarted as a standby
            return
        version = None if server.record is None else str(server.version)
        self.seen = observe(self.seen, server.record, version, now)
        move = next_move(self.seen, self.name, now, T)
        if move is not Move.WAIT:
            record = record_after(move, server.record, self.name, WALL + timedelta(seconds=now), T)
            if server.write(version, record, now):
                self.last_renewed = now
        if self.leading(now):
            self.acted_as_leader.append(now)


def simulate(until: float, replicas: list[Replica], server: Server, tick: float = 0.5) -> None:
    now = 0.0
    while now <= until:
        for r in replicas:
            if int(now / tick) % int(T.retry_period / tick) == 0:
                r.step(server, now)
        now = round(now + tick, 3)


def leaders_at(replicas: list[Replica], now: float) -> list[str]:
    return [r.name for r in replicas if r.acted_as_leader and now in r.acted_as_leader]


def test_one_leader_and_a_standby_that_takes_over_when_the_leader_dies():
    server, a, b = Server(), Replica("a"), Replica("b")
    simulate(6, [a, b], server)
    assert server.record is not None and server.record.holder == "a"
    a.dead = True  # SIGKILL
    simulate(40, [a, b], server)
    assert server.record.holder == "b" and server.record.transitions == 1
    took_over = min(t for t in b.acted_as_leader)
    assert took_over - 6 <= T.lease_duration + T.retry_period + 0.5


def test_a_stalled_leader_never_acts_after_the_other_takes_over():
    server, a, b = Server(), Replica("a"), Replica("b")
    simulate(4, [a, b], server)
    a.stalled_until = 30.0  # SIGSTOP past its renew deadline, then SIGCONT
    simulate(60, [a, b], server)
    assert server.record is not None and server.record.holder == "b"
    taken = min(b.acted_as_leader)
    assert all(t < taken for t in a.acted_as_leader), "the stalled leader acted after losing"
    assert a.dead  # it exits on waking past its deadline, writing nothing
    assert all(holder == "b" for t, holder in server.writes if t >= taken)


def test_a_released_lease_is_taken_at_the_next_look():
    server, a, b = Server(), Replica("a"), Replica("b")
    simulate(4, [a, b], server)
    server.write(str(server.version), released(server.record, WALL), 4.0)
    a.dead = True
    simulate(10, [a, b], server)
    assert server.record.holder == "b"
    assert min(b.acted_as_leader) <= 4.0 + T.retry_period + 0.5


# ----------------------------------------------------------------------- the elector


@dataclass
class GuardedStore:
    """A Lease store that refuses a write naming a stale version, as the API server does
    (a fault-injection fake: the real one is exercised on the local cluster)."""

    server: Server = field(default_factory=Server)
    now: float = 0.0

    def read(self):
        return self.server.record, None if self.server.record is None else str(self.server.version)

    def write(self, record, version):
        return self.server.write(version, record, self.now)


def test_two_electors_on_one_store_take_turns_only_through_expiry_or_release():
    from kinetic_operator.election import Elector

    clock = {"t": 0.0}
    store = GuardedStore()
    a = Elector(store, "a", clock=lambda: clock["t"])
    b = Elector(store, "b", clock=lambda: clock["t"])
    assert a.step() is True and b.step() is False
    for t in range(2, 30, 2):  # a keeps renewing: b never leads
        clock["t"] = store.now = float(t)
        assert a.step() and not b.step()
    a.release()
    clock["t"] = store.now = 31.0
    assert b.step() is True and a.leading is False
    assert store.server.record is not None and store.server.record.transitions == 1


def test_a_leader_that_sees_another_holder_stops_leading_at_once():
    """A stalled leader wakes within its deadline on the clock it had, but the Lease is
    someone else's now: what it read wins over the clock."""
    from kinetic_operator.election import Elector

    clock = {"t": 0.0}
    store = GuardedStore()
    a = Elector(store, "a", clock=lambda: clock["t"])
    assert a.step()
    store.server.write(str(store.server.version), held_by("b", transitions=1), 1.0)
    clock["t"] = 1.0
    assert a.step() is False and a.leading is False


def test_writes_are_refused_while_handing_over_and_end_the_process_past_the_deadline(
    monkeypatch,
):
    from kinetic_operator import election
    from kinetic_operator.election import Elector, Resigned

    exits: list[int] = []

    def exit_(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(election.os, "_exit", exit_)
    clock = {"t": 0.0}
    a = Elector(GuardedStore(), "a", clock=lambda: clock["t"])
    assert a.step()
    a.require()  # leading: the write goes on
    clock["t"] = T.renew_deadline  # no renewal since 0
    with pytest.raises(SystemExit):
        a.require()
    assert exits == [election.LOST_EXIT]
    a.resign()
    with pytest.raises(Resigned, match="shutting down"):
        a.require()


def test_the_fence_stops_a_write_before_it_leaves_the_process():
    """A real API client towards a closed port: a read reaches the network (and fails
    there), a write is stopped by the fence before any connection is tried."""
    from kinetic_operator.election import Resigned
    from kinetic_operator.kube import fenced
    from kubernetes import client
    from urllib3.exceptions import MaxRetryError

    def refuse() -> None:
        raise Resigned("not the leader")

    conf = client.Configuration(host="http://127.0.0.1:9")
    conf.retries = 0
    core = client.CoreV1Api(fenced(client.ApiClient(conf), refuse))
    with pytest.raises(MaxRetryError):
        core.read_namespace("default", _request_timeout=2)
    with pytest.raises(Resigned):
        core.create_namespace({"metadata": {"name": "x"}}, _request_timeout=2)


def _pod(name: str, command: list[str], phase: str = "Running") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "operator", "command": command}]},
        "status": {"phase": phase},
    }


ELECTED = ["python", "-m", "kinetic_operator", "--leader-election", "--all-namespaces"]
OLDER = ["kopf", "run", "--standalone", "--all-namespaces", "-m", "kinetic_operator.main"]


@pytest.mark.parametrize(
    "pods, blocking",
    [
        ([_pod("new-a", ELECTED), _pod("new-b", ELECTED)], []),
        ([_pod("new-a", ELECTED), _pod("old", OLDER)], ["old"]),  # an upgrade mid-rollout
        ([_pod("new-a", ELECTED), _pod("old", OLDER, "Succeeded")], []),  # it has ended
        ([_pod("old", ["python", "-m", "kinetic_operator"])], ["old"]),  # one replica alone
    ],
)
def test_an_operator_without_election_keeps_the_replicas_from_leading(pods, blocking):
    from kinetic_operator.election import unelected_operators

    assert unelected_operators(pods) == blocking


def test_a_replica_waits_while_an_older_operator_runs_and_leads_once_it_is_gone():
    from kinetic_operator.election import Elector

    running = ["old-7f9"]
    a = Elector(GuardedStore(), "a", clock=lambda: 0.0, blockers=lambda: list(running))
    assert a.step() is False and a.store.server.record is None  # nothing created yet
    running.clear()
    assert a.step() is True
