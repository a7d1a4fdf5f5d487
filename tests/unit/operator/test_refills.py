"""How long a batch's freed slots stand empty: each Pod's end is matched, once, to the
next Pod created, oldest end first (`kinetic_slot_refill_seconds`)."""

from __future__ import annotations

from kinetic_operator.handlers.batch_memory import Refills
from kinetic_operator.logic.observed import PodView

T = 1_800_000_000  # 2027-01-15T08:00:00Z


def ended(name: str, at: str) -> PodView:
    return PodView(name=name, attempt=1, index=0, phase="Succeeded", finished_at=at)


def test_each_end_is_taken_once_oldest_first() -> None:
    refills = Refills()
    refills.saw([ended("a", "2027-01-15T08:00:02Z"), ended("b", "2027-01-15T08:00:01Z")])
    refills.saw([ended("a", "2027-01-15T08:00:02Z")])  # seen again: not a second end
    assert refills.taken(1, T + 3) == [2.0]  # b ended first
    assert refills.taken(5, T + 4) == [2.0]  # then a; nothing else was freed
    assert refills.taken(1, T + 5) == []


def test_running_pods_free_nothing_and_pods_gone_are_forgotten() -> None:
    refills = Refills()
    refills.saw([PodView(name="r", attempt=1, index=0, phase="Running")])
    assert refills.taken(1, T) == []
    refills.saw([ended("a", "2027-01-15T08:00:00Z")])
    refills.taken(1, T + 1)
    refills.saw([])  # reaped
    assert refills.counted == set()
