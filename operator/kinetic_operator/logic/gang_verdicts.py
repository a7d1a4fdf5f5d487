"""A gang's verdict: one outcome for an attempt's members, and which of their Pods end with it.

The members of a multi-host attempt live and die as one (`kinetic.model.gang`): the
result is rank 0's, any member's failure fails the attempt, a member lost to a disruption
disrupts it, and a gang not placed whole within its deadline is torn down. `gang_outcome`
turns observations of the members into one of those verdicts, and `members_to_delete` says
which Pods end with it. The operator maps Pods to `Member` observations (`gangs`); nothing
here reads a Pod, and the time of the decision comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from kinetic.model.gang import COORDINATOR_RANK, DEFAULT_SCHEDULING_DEADLINE


class Phase(StrEnum):
    """What the operator saw of one member (it maps Pod phases and conditions to these).

    ``pending`` means not yet placed on a node: a Pod that is placed but still
    pulling its image is ``running`` here, so a slow pull never counts against
    the scheduling deadline. ``gone`` is a member lost without failing: its
    Pod deleted, evicted, preempted, or its node lost; a rank with no
    observation at all is gone too.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    GONE = "gone"


class Outcome(StrEnum):
    """Where one attempt of a gang stands."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # charged once to retries
    DISRUPTED = "disrupted"  # re-run without charging retries (bounded by maxDisruptions)
    UNSCHEDULABLE = "unschedulable"  # torn down and reported


@dataclass(frozen=True)
class Member:
    """One member as observed: ``since`` is when it became pending (its creation) for a
    pending one, when it ended for a failed or gone one (None when unknown)."""

    rank: int
    phase: Phase
    reason: str = ""
    since: datetime | None = None


@dataclass(frozen=True)
class Verdict:
    """An outcome, the ranks that decided it, and a sentence for the job's status."""

    outcome: Outcome
    ranks: tuple[int, ...] = ()
    message: str = ""


def by_rank(members: Iterable[Member], world: int) -> list[Member]:
    """One observation per rank 0 .. world-1: the first given for it, else ``gone``.

    Observations of ranks outside the gang are ignored here: such a Pod is a
    stray for the operator to delete, not a member whose fate moves the gang.
    """
    seen: dict[int, Member] = {}
    for m in members:
        if 0 <= m.rank < world and m.rank not in seen:
            seen[m.rank] = m
    return [
        seen.get(r, Member(r, Phase.GONE, "no Pod of this rank was found")) for r in range(world)
    ]


def gang_outcome(
    members: Iterable[Member],
    world: int,
    now: datetime,
    deadline: timedelta = DEFAULT_SCHEDULING_DEADLINE,
) -> Verdict:
    """The attempt's verdict; the first rule that applies decides.

    1. SUCCEEDED when rank 0 succeeded: its result is the job's, whatever the
       other ranks did; those still running are deleted.
    2. When members failed or were lost: DISRUPTED unless a failure came
       strictly before every loss, then FAILED. A member whose peer vanished
       usually crashes next, and that crash is the disruption's doing, not
       the job's. A loss of unknown time counts as first and a failure of
       unknown time as last: doubt goes to the user, and maxDisruptions
       still bounds how often a gang is re-run for free.
    3. UNSCHEDULABLE when any member has waited for a node for ``deadline``
       or longer: the gang cannot run without it.
    4. RUNNING otherwise (ranks other than 0 may finish first, and wait).
    """
    ranked = by_rank(members, world)
    if ranked[COORDINATOR_RANK].phase is Phase.SUCCEEDED:
        return Verdict(Outcome.SUCCEEDED, (COORDINATOR_RANK,), "rank 0 succeeded")
    ended = _ending(ranked)
    if ended is not None:
        return ended
    waiting = [m for m in ranked if _waited(m, now, deadline)]
    if waiting:
        return _unschedulable(waiting, world, deadline)
    return Verdict(Outcome.RUNNING)


def _ending(ranked: list[Member]) -> Verdict | None:
    """FAILED or DISRUPTED by rule 2 of `gang_outcome`, or None when nothing ended badly."""
    failed = [m for m in ranked if m.phase is Phase.FAILED]
    lost = [m for m in ranked if m.phase is Phase.GONE]
    if lost and (not failed or _first(lost, early=True) <= _first(failed, early=False)):
        first = min(lost, key=lambda m: _when(m, early=True))
        return Verdict(Outcome.DISRUPTED, _ranks(lost), _said(first, "was lost"))
    if failed:
        first = min(failed, key=lambda m: _when(m, early=False))
        return Verdict(Outcome.FAILED, _ranks(failed), _said(first, "failed"))
    return None


def _when(m: Member, early: bool) -> tuple[int] | tuple[int, datetime]:
    """A sort key for when ``m`` ended: its ``since``, or before (for a loss) or after (for
    a failure) every known time when unknown."""
    if m.since is not None:
        return (1, m.since)
    return (0,) if early else (2,)


def _first(ms: list[Member], early: bool) -> tuple[int] | tuple[int, datetime]:
    return min(_when(m, early) for m in ms)


def _waited(m: Member, now: datetime, deadline: timedelta) -> bool:
    return m.phase is Phase.PENDING and m.since is not None and now - m.since >= deadline


def _unschedulable(waiting: list[Member], world: int, deadline: timedelta) -> Verdict:
    ranks = _ranks(waiting)
    listed = ", ".join(map(str, ranks))
    return Verdict(
        Outcome.UNSCHEDULABLE,
        ranks,
        f"{len(ranks)} of {world} members (rank {listed}) waited for a node for "
        f"{int(deadline.total_seconds())} s or more; the gang was torn down",
    )


def _ranks(ms: Iterable[Member]) -> tuple[int, ...]:
    return tuple(sorted(m.rank for m in ms))


def _said(m: Member, what: str) -> str:
    return f"rank {m.rank} {what}" + (f": {m.reason}" if m.reason else "")


def members_to_delete(members: Iterable[Member], world: int, verdict: Verdict) -> list[int]:
    """Ranks whose Pods to delete, at once, now that ``verdict`` is in.

    Nothing while the gang runs. Once it has an outcome, every member still
    pending or running: on failure or disruption they cannot finish without
    their peers, after rank 0's success their work is done, and when the gang
    is unschedulable the placed ones hold accelerators for nothing. Members
    that ended keep their Pods, for their logs and termination messages.
    """
    if verdict.outcome is Outcome.RUNNING:
        return []
    live = (Phase.PENDING, Phase.RUNNING)
    return [m.rank for m in by_rank(members, world) if m.phase in live]
