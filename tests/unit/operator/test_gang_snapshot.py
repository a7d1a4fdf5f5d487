"""A reconcile reads a gang's Pods and the memory of members being created or deleted at
one moment, on the event loop. Read later, in the reconcile's thread, the memory may have
forgotten a member the watch has just shown while the Pods read earlier still lack it, and
the member is created (409) or deleted a second time."""

from __future__ import annotations

from kinetic_operator.handlers.batch_memory import BatchMemory
from kinetic_operator.handlers.batches import observe_units
from kinetic_operator.handlers.jobs import JobMemory, observe_job
from kinetic_testing.pod_views import member


def test_a_job_reconcile_keeps_what_was_being_created_when_it_looked() -> None:
    mem = JobMemory()
    mem.creating_pods.add("kj-a1-r1")
    mem.stopping.add("kj-a1-r0")
    seen = observe_job([member(0)], mem)
    mem.saw(member(1), deleted=False)  # the watch shows rank 1 after the look
    mem.saw(member(0, deleting=True), deleted=False)
    assert seen.making == {"kj-a1-r1"} and seen.stopping == {"kj-a1-r0"}
    assert [p.name for p in seen.pods] == ["kj-a1-r0"]
    assert not mem.creating_pods and not mem.stopping


def test_a_batch_reconcile_keeps_what_was_being_created_when_it_looked() -> None:
    mem = BatchMemory()
    mem.pods.creating_members.add("g-i0-1-r1")
    units = observe_units([member(0, owner="g", index=0)], mem)
    mem.pods.saw(member(1, owner="g", index=0), deleted=False)
    assert units[0].making == {"g-i0-1-r1"}
    assert [p.name for p in units[0].members] == ["g-i0-1-r0"]
    assert not mem.pods.creating_members
