"""How many inputs the next unit of a function batch runs, and how many units may start now.

A Pod costs a node far more than a short function does (on the local cluster's 2-core
node about half a second of its CPU and 11 API writes, against the bench function's 0.2 s
of sleep), so a function batch runs its inputs in *units*: one Pod runs a block of inputs,
one after another. How big a block is, is decided here each time the operator creates a
unit (or a long-lived Pod asks for its next block), from what the batch has measured so
far. The rules, and why (``bench/UNITS.md`` has the simulation behind each number):

* **About ``target_seconds`` of work per unit**, at most: enough that a Pod's start is a
  small part of what it does. The work is the unit's size times the planned duration.
* **Never more than its share of what is left** (guided self-scheduling): at most
  ``ceil((remaining + queued) / (live_units + free_slots))``, where ``queued`` are the
  inputs live units hold but have not started. Counting those sizes a unit created
  while others are about to finish as big as what they still have to do, so a batch
  needs fewer Pods than plain ``remaining / slots`` would make. Units created late
  shrink with what is left anywhere, and the last ones run single inputs.
* **Small until durations are known**: ``first_unit`` inputs before any is measured, then
  planned at the longest seen until ``min_samples`` are, then at the mean. A guess too
  large would put hours of unknown work in one Pod.
* **At least ``min_unit_seconds`` of work** once durations are known, while inputs are
  left: where a Pod's start costs half a second of a node's CPU, a unit of 0.4 s of work
  costs more than it does, however evenly it divides the tail. A batch whose target is
  below that gets its target.
* **Never below 1, never above ``max_unit``** (the most inputs a runner reports on), and
  never more than what is left. **A fixed ``chunk_size`` bypasses it all**: the user chose.

And pacing (`units_to_create`): at most ``max(start_at_once, running units)`` of a batch's
units are starting at once. A node with few cores starts Pods about as fast whether it is
asked for a few or for thirty at a time, since the starts share its cores; asked for a
few, the first units run, and measure durations so that later units are sized, seconds
earlier. Letting as many start as are running doubles a batch's units every start time,
so a cluster that starts Pods fast is held back for one start time at most.

Nothing here reads a clock, a random source, the API server or storage: the operator
passes in what it knows (counts, and the estimate it keeps in the batch's status) and
gets a number back, so a restarted operator decides the same, and the simulation in
``bench/unitsim.py`` runs this very code.

Durations come from the Pods (each input's start and end, as its runner reports them).
A Pod can lie about them; the worst a lie does here is size its own batch's units badly
(units of 1, or of ``max_unit``), never anything outside the batch. So a reported
duration is only sanitised (not a number: ignored; negative: 0), not trusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kinetic.model.limits import (
    DEFAULT_UNIT_FIRST_INPUTS,
    DEFAULT_UNIT_MIN_SECONDS,
    DEFAULT_UNIT_STARTS_AT_ONCE,
    MAX_CHUNK_SIZE,
)

__all__ = [
    "DEFAULT_RULES",
    "DurationEstimate",
    "SizingRules",
    "from_durations",
    "observe",
    "size_next_unit",
    "units_to_create",
]


@dataclass(frozen=True)
class DurationEstimate:
    """What a batch has measured of its inputs' durations: three numbers, so that it fits
    in the batch's status and a restarted operator goes on from it."""

    count: int
    total_seconds: float
    longest_seconds: float

    @property
    def mean_seconds(self) -> float:
        return self.total_seconds / self.count if self.count else 0.0

    def observe(self, seconds: float) -> DurationEstimate:
        """This estimate with one more measured duration (see `observe`)."""
        return observe(self, seconds) or self


def observe(estimate: DurationEstimate | None, seconds: float) -> DurationEstimate | None:
    """The estimate once one more input took ``seconds`` (a new value: nothing mutates).

    A duration that is not a finite number leaves the estimate as it was; a negative one
    (a Pod's clock stepped back) counts as 0.
    """
    if not math.isfinite(seconds):
        return estimate
    seconds = max(0.0, seconds)
    if estimate is None:
        return DurationEstimate(count=1, total_seconds=seconds, longest_seconds=seconds)
    return DurationEstimate(
        count=estimate.count + 1,
        total_seconds=estimate.total_seconds + seconds,
        longest_seconds=max(estimate.longest_seconds, seconds),
    )


def from_durations(durations: Iterable[float]) -> DurationEstimate | None:
    """The estimate of these durations (None: not one was a number)."""
    estimate: DurationEstimate | None = None
    for seconds in durations:
        estimate = observe(estimate, seconds)
    return estimate


@dataclass(frozen=True)
class SizingRules:
    """The policy's settings other than the per-batch target. The defaults are the ones
    the simulation chose (``bench/UNITS.md``)."""

    first_unit: int = DEFAULT_UNIT_FIRST_INPUTS  # inputs per unit before any is measured
    min_samples: int = 4  # measured inputs before the mean, not the longest, sizes units
    min_unit_seconds: float = DEFAULT_UNIT_MIN_SECONDS  # the least work worth a Pod
    max_unit: int = MAX_CHUNK_SIZE  # the runner reports on at most this many inputs
    start_at_once: int | None = DEFAULT_UNIT_STARTS_AT_ONCE  # starting at once (None: no pacing)

    def problems(self) -> list[str]:
        """Why these rules cannot size a unit (empty: they can)."""
        found = []
        if not 1 <= self.max_unit <= MAX_CHUNK_SIZE:
            found.append(f"max_unit is {self.max_unit}: it must be between 1 and {MAX_CHUNK_SIZE}")
        if not 1 <= self.first_unit <= self.max_unit:
            found.append(f"first_unit is {self.first_unit}: it must be between 1 and max_unit")
        if self.min_samples < 1:
            found.append(f"min_samples is {self.min_samples}: it must be at least 1")
        if not (math.isfinite(self.min_unit_seconds) and self.min_unit_seconds >= 0):
            found.append(f"min_unit_seconds is {self.min_unit_seconds}: it must be 0 or more")
        if self.start_at_once is not None and self.start_at_once < 1:
            found.append(
                f"start_at_once is {self.start_at_once}: it must be at least 1 (None: no pacing)"
            )
        return found


DEFAULT_RULES = SizingRules()


def size_next_unit(
    remaining: int,
    free_slots: int,
    live_units: int,
    estimate: DurationEstimate | None,
    target_seconds: float,
    *,
    chunk_size: int | None = None,
    queued: int = 0,
    rules: SizingRules = DEFAULT_RULES,
) -> int:
    """How many of the ``remaining`` inputs (those in no unit yet) the next unit runs.

    ``free_slots`` counts the units that may still be created now, this one included
    (``maxConcurrent`` minus the live units); ``live_units`` counts the units starting or
    running, and ``queued`` the inputs they hold and have not started. A long-lived Pod
    asking for its next block passes ``free_slots=1`` and the rest of its pool (the pool's
    full size, less one) as ``live_units``. Returns 0 only when nothing remains.
    """
    if remaining < 1:
        return 0
    if free_slots < 1:
        raise ValueError(f"free_slots is {free_slots}: size a unit only when one may start")
    if not (math.isfinite(target_seconds) and target_seconds > 0):
        raise ValueError(f"target_seconds is {target_seconds}: it must be a number above 0")
    if chunk_size is not None:
        return min(max(1, chunk_size), remaining)
    share = math.ceil((remaining + queued) / (live_units + free_slots))
    per_input = _seconds_per_input(estimate, rules)
    if per_input is None:
        size = min(rules.first_unit, share)
    else:
        size = min(_inputs_for(target_seconds, per_input, rules, math.floor), share)
        least = min(rules.min_unit_seconds, target_seconds)  # a batch may ask for less
        size = max(size, _inputs_for(least, per_input, rules, math.ceil))
    return max(1, min(size, rules.max_unit, remaining))


def units_to_create(
    free_slots: int, starting_units: int, running_units: int, rules: SizingRules = DEFAULT_RULES
) -> int:
    """How many of its ``free_slots`` the operator may fill with new units now.

    ``starting_units``: created, their Pods not yet running; ``running_units``: running.
    At most ``max(start_at_once, running_units)`` may be starting at once.
    """
    if rules.start_at_once is None:
        return max(0, free_slots)
    allowed = max(rules.start_at_once, running_units)
    return max(0, min(free_slots, allowed - starting_units))


def _seconds_per_input(estimate: DurationEstimate | None, rules: SizingRules) -> float | None:
    """What to plan an input at: the mean once enough are measured, the longest before
    (one slow input seen is reason enough for small units), None while none is."""
    if estimate is None or estimate.count < 1:
        return None
    if estimate.count < rules.min_samples:
        return estimate.longest_seconds
    return estimate.mean_seconds


def _inputs_for(
    seconds: float, per_input: float, rules: SizingRules, rounding: Callable[[float], int]
) -> int:
    """Inputs that make about ``seconds`` of work at ``per_input`` each (at least 1)."""
    if seconds <= 0:
        return 1
    if per_input <= 0:
        return rules.max_unit
    return max(1, rounding(seconds / per_input))
