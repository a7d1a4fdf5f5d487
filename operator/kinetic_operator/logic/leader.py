"""Who leads: the pure decisions of Lease-based leader election, as client-go makes them.

Two operator replicas share one ``coordination.k8s.io/v1`` Lease in the
operator's namespace. Only its holder reconciles; both serve the admission
webhook. The thin layer that reads and writes the Lease (`election`) asks this
module what to do next, given what it last read and when.

The rules, with client-go's defaults (`Timings`):

* A replica that finds no Lease creates one naming itself (`Move.CREATE`).
* The holder renews it every ``retry_period`` (`Move.RENEW`). If it has not
  renewed successfully for ``renew_deadline``, it must stop leading at once
  (`still_leading` is False): it exits before anyone else may take over,
  because ``renew_deadline`` < ``lease_duration``.
* Another replica takes the Lease (`Move.TAKE`) when the holder released it
  (an empty holder: a clean shutdown hands over at once), or when the record
  has not changed for ``lease_duration`` *as measured on its own clock* from
  when it last saw the record change. Comparing the record's ``renewTime``
  with the local wall clock would trust two machines' clocks to agree; the
  local monotonic clock needs no such trust.
* A replica also takes the Lease at once when its holder was an earlier
  process of the same Pod (``"<pod>_<process>"``, `holder_pod`): the kubelet
  restarts a container only after the old one has exited, so that holder can
  no longer act, and waiting out its lease would only delay the restart.
* Otherwise it waits (`Move.WAIT`) and looks again after ``retry_period``, or
  sooner when the holder's lease would run out before then (`next_look`).

Every write is guarded by the ``resourceVersion`` that was read, so two
replicas racing for an expired Lease cannot both win: the loser's write is a
409 and it reads again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime

from kinetic.model.names import fmt_micro_time, holder_pod

__all__ = [
    "LeaseRecord",
    "Move",
    "Observation",
    "Timings",
    "next_look",
    "next_move",
    "observe",
    "record_after",
    "still_leading",
]


@dataclass(frozen=True)
class Timings:
    """client-go's leader election defaults, in seconds."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """Why these timings cannot keep two leaders apart (empty: they can)."""
        found = []
        if not 0 < self.retry_period < self.renew_deadline:
            found.append("retry_period must be above 0 and below renew_deadline")
        if not self.renew_deadline < self.lease_duration:
            found.append(
                "renew_deadline must be below lease_duration: a leader that cannot renew must "
                "stop before another replica may take the Lease"
            )
        return found


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease's spec says. ``holder`` is empty once released."""

    holder: str
    lease_duration_seconds: int
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @property
    def released(self) -> bool:
        return not self.holder


@dataclass(frozen=True)
class Observation:
    """The Lease as this replica last read it, and when (monotonic) it last saw it change."""

    record: LeaseRecord | None  # None: there is no Lease yet
    version: str | None  # its resourceVersion, the precondition of the next write
    changed_at: float


class Move(enum.Enum):
    CREATE = "create"  # no Lease: create one naming this replica
    TAKE = "take"  # released or expired: write this replica in, one more transition
    RENEW = "renew"  # ours: write a fresh renewTime
    WAIT = "wait"  # someone else's and alive: look again later


def observe(
    previous: Observation | None, record: LeaseRecord | None, version: str | None, now: float
) -> Observation:
    """A new read, remembering when the record last changed (by content, not version:
    a write that changes nothing would otherwise look like a renewal)."""
    if previous is not None and previous.record == record:
        return replace(previous, version=version)
    return Observation(record=record, version=version, changed_at=now)


def next_move(seen: Observation, me: str, now: float, timings: Timings) -> Move:
    """What this replica does after reading the Lease at monotonic time `now`."""
    record = seen.record
    if record is None:
        return Move.CREATE
    if record.holder == me:
        return Move.RENEW
    if record.released or holder_pod(record.holder) == holder_pod(me):
        return Move.TAKE
    if now - seen.changed_at >= _duration(record, timings):
        return Move.TAKE
    return Move.WAIT


def next_look(seen: Observation, me: str, now: float, timings: Timings) -> float:
    """Seconds until this replica reads the Lease again: every ``retry_period``, but a
    standby looks again the moment the holder's lease would run out, not up to a whole
    period later."""
    record = seen.record
    if record is None or record.holder == me or record.released:
        return timings.retry_period
    expires_in = seen.changed_at + _duration(record, timings) - now
    return max(0.0, min(timings.retry_period, expires_in))


def _duration(record: LeaseRecord, timings: Timings) -> float:
    return record.lease_duration_seconds or timings.lease_duration


def record_after(
    move: Move, old: LeaseRecord | None, me: str, wall: datetime, timings: Timings
) -> LeaseRecord:
    """The record to write for `move` (not WAIT) at wall-clock time `wall`."""
    if move is Move.WAIT:
        raise ValueError("a wait writes nothing")
    stamp = fmt_micro_time(wall)
    duration = round(timings.lease_duration)
    if move is Move.RENEW and old is not None:
        return replace(old, renew_time=stamp, lease_duration_seconds=duration)
    transitions = 0 if old is None else old.transitions + (0 if old.holder == me else 1)
    return LeaseRecord(
        holder=me,
        lease_duration_seconds=duration,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=transitions,
    )


def released(old: LeaseRecord, wall: datetime) -> LeaseRecord:
    """What a leader writes on a clean shutdown: no holder, so a standby takes over at once."""
    return replace(old, holder="", lease_duration_seconds=1, renew_time=fmt_micro_time(wall))


def still_leading(last_renewed: float, now: float, timings: Timings) -> bool:
    """Whether a leader whose last successful write was at `last_renewed` may still act.

    Past ``renew_deadline`` it may not: another replica may take the Lease
    once ``lease_duration`` has passed, and acting in between could put two
    writers on the same objects.
    """
    return now - last_renewed < timings.renew_deadline
