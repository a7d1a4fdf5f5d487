"""A batch whose template runs on 2 hosts: each input's attempt is a gang of 2 Pods.

`Batch` plays the handler's round: the members grouped by input, `see_gangs`
(with the verdicts `settled_units` remembered), `decide_batch`, then the
status is written and each `(input, attempt)` created as the ranks
`ranks_to_create` names. Stops are not applied at once: the watch shows
a deleted Pod only later, which is when a stopped member still holds its
input's slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kinetic.model.gang import DEFAULT_SCHEDULING_DEADLINE
from kinetic.model.names import fmt_time
from kinetic.model.resources import AttemptRecord, KineticBatchSpec, KineticBatchStatus
from kinetic_operator.logic import gangs
from kinetic_operator.logic.batch_logic import (
    BatchDecision,
    UnitObservation,
    decide_batch,
    see_gangs,
    settled_units,
)
from kinetic_operator.logic.observed import PodView
from kinetic_testing.pod_views import T0, member


def gang_batch(n: int = 3, **extra: Any) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {"container": {"command": ["train"]}, "hosts": 2},
            "inputs": {"items": list(range(n))},
            **extra,
        }
    )


@dataclass
class Batch:
    """The member Pods of batch ``g`` by name, its status, and the gang verdicts recorded."""

    spec: KineticBatchSpec
    dns: bool = True
    pods: dict[str, PodView] = field(default_factory=dict)
    status: KineticBatchStatus | None = None
    settled: dict[int, dict[int, AttemptRecord]] = field(default_factory=dict)
    stopping: list[str] = field(default_factory=list)
    now: datetime = T0

    def units(self) -> dict[int, UnitObservation]:
        grouped: dict[int, list[PodView]] = {}
        for pod in self.pods.values():
            grouped.setdefault(pod.index or 0, []).append(pod)
        seen = {u: UnitObservation(members=tuple(ms)) for u, ms in grouped.items()}
        return see_gangs(seen, lambda _: 2, self.now, DEFAULT_SCHEDULING_DEADLINE, self.settled)

    def decide(self) -> BatchDecision:
        units = self.units()
        d = decide_batch(self.spec, self.status, units, self.now, batch="g", dns=self.dns)
        for unit, ended in settled_units(d.plans).items():
            self.settled.setdefault(unit, {}).update(ended)
        self.status = d.status.model_copy(update={"manifest_uri": "gs://b/g/manifest.json"})
        for unit, attempt in d.creates:
            gang = units.get(unit, UnitObservation()).gang
            todo = gangs.ranks_to_create(gang, attempt, f"g-{unit}-{attempt}", 2, dns=self.dns)
            for rank in todo.ranks if todo is not None else ():
                pod = member(rank, "Pending", attempt, owner="g", index=unit)
                self.pods.setdefault(pod.name, replace(pod, created=fmt_time(self.now)))
        self.stopping += d.stops
        self.now += timedelta(seconds=1)
        return d

    def deliver_stops(self) -> None:
        """The watch shows the Pods the operator deleted: terminating, then gone."""
        for name in self.stopping:
            self.pods[name] = replace(self.pods[name], deleting=True, gone=True)
        self.stopping = []

    def change(self, name: str, **kw: Any) -> None:
        self.pods[name] = replace(self.pods[name], **kw)

    def run(self, *names: str) -> None:
        for name in names:
            self.change(name, phase="Running", start_time=fmt_time(self.now))

    def end(self, name: str, code: int) -> None:
        self.change(
            name,
            phase="Succeeded" if code == 0 else "Failed",
            exit_code=code,
            terminated_reason="Completed" if code == 0 else "Error",
            finished_at=fmt_time(self.now),
        )


def test_max_concurrent_counts_a_gang_once_and_a_live_member_holds_its_slot():
    b = Batch(gang_batch(3, maxConcurrent=1))
    d = b.decide()
    assert d.creates == [(0, 1)]
    assert sorted(b.pods) == ["g-i0-1-r0", "g-i0-1-r1"]  # one input, both of its ranks
    assert b.status is not None and b.status.active_indexes == "0"

    b.run("g-i0-1-r0", "g-i0-1-r1")
    d = b.decide()
    assert d.creates == [] and b.status.counts.running == 1

    b.end("g-i0-1-r0", 0)
    d = b.decide()
    assert d.stops == ["g-i0-1-r1"] and d.creates == []
    assert b.status.succeeded_indexes == "0" and b.status.counts.succeeded == 1

    # The delete is not seen yet: rank 1 still runs, and holds input 0's slot.
    d = b.decide()
    assert d.creates == [] and sorted(b.pods) == ["g-i0-1-r0", "g-i0-1-r1"]
    assert b.status.active_indexes == ""

    # Rank 1 ends (killed by the stop, exit 143): the success stands, the slot is free.
    b.end("g-i0-1-r1", 143)
    d = b.decide()
    assert d.creates == [(1, 1)] and b.status.succeeded_indexes == "0"
    assert b.status.failed_indexes == "" and b.status.active_indexes == "1"
    assert sorted(p for p in b.pods if p.startswith("g-i1-")) == ["g-i1-1-r0", "g-i1-1-r1"]


def test_a_gang_that_is_gone_frees_its_slot_for_the_next_input():
    b = Batch(gang_batch(3, maxConcurrent=1))
    b.decide()
    b.run("g-i0-1-r0", "g-i0-1-r1")
    b.end("g-i0-1-r0", 0)
    b.decide()
    b.deliver_stops()
    d = b.decide()
    assert d.creates == [(1, 1)]


def test_a_failing_rank_fails_its_input_and_stops_its_peer():
    b = Batch(gang_batch(2, maxConcurrent=2))
    b.decide()
    b.run("g-i0-1-r0", "g-i0-1-r1", "g-i1-1-r0", "g-i1-1-r1")
    b.decide()
    b.end("g-i1-1-r1", 3)
    d = b.decide()
    assert d.stops == ["g-i1-1-r0"] and d.creates == []
    assert b.status is not None and b.status.failed_indexes == "1"
    assert b.status.counts.failed == 1
    b.deliver_stops()
    d = b.decide()  # rank 0's deletion, seen after the failure, does not undo it
    assert b.status.failed_indexes == "1" and d.creates == []


def test_without_dns_a_unit_creates_rank_0_then_the_rest_once_it_has_an_ip():
    b = Batch(gang_batch(1), dns=False)
    d = b.decide()
    assert d.creates == [(0, 1)] and sorted(b.pods) == ["g-i0-1-r0"]
    assert b.decide().creates == []
    b.change("g-i0-1-r0", phase="Running", start_time=fmt_time(b.now), pod_ip="10.0.0.7")
    d = b.decide()
    assert d.creates == [(0, 1)] and sorted(b.pods) == ["g-i0-1-r0", "g-i0-1-r1"]
    assert b.decide().creates == []


def test_cancelling_the_batch_stops_every_member_of_its_running_gangs():
    b = Batch(gang_batch(3, maxConcurrent=2))
    b.decide()
    b.run("g-i0-1-r0", "g-i0-1-r1", "g-i1-1-r0", "g-i1-1-r1")
    b.decide()
    b.spec = gang_batch(3, maxConcurrent=2, cancel=True)
    d = b.decide()
    assert sorted(d.stops) == ["g-i0-1-r0", "g-i0-1-r1", "g-i1-1-r0", "g-i1-1-r1"]
    assert d.creates == []
    assert b.status is not None and b.status.cancelled_indexes == "0-2"


def test_cancel_indexes_stops_the_members_of_that_input_only():
    b = Batch(gang_batch(2, maxConcurrent=2))
    b.decide()
    b.run("g-i0-1-r0", "g-i0-1-r1", "g-i1-1-r0", "g-i1-1-r1")
    b.decide()
    b.spec = gang_batch(2, maxConcurrent=2, cancelIndexes="1")
    d = b.decide()
    assert d.stops == ["g-i1-1-r0", "g-i1-1-r1"]
    assert b.status is not None and b.status.cancelled_indexes == "1"
