"""Work-sized units of a function batch: which inputs each Pod runs, and how each input
stands. Pure: no API calls, no clock, no storage.

With ``chunkSize: auto`` a Pod runs a *unit*: a block of consecutive inputs, one after
another, whose size the operator decides when it launches the unit, from the durations
it has measured (`kinetic_operator.logic.unit_sizing`). Two things are kept here.

**The grid** (`Grid`): where each unit starts and how many inputs it holds. Inputs are
launched in order, so a unit's size is decided for the inputs past the last one launched,
and the grid only ever grows past them: a segment ``start:size`` says that units of
``size`` inputs start at ``start``, ``start + size``, ... up to the next segment. The grid
is written in the batch's status with the launch that extends it, before the unit's Pod is
created, so a restarted operator knows every unit's inputs.

**An input's own story** (`plan_unit`): a unit has attempts (its Pods ``<grp>-i<s>-<a>``);
each attempt runs the unit's inputs that are not settled yet, and says in its log when each
begins and ends, and how (`kinetic.model.progress`). From those marks and how each Pod
ended, every input keeps its own attempts, retries and outcome:

* an input that ended ``ok`` succeeded (with the digest of the result its runner stored);
* one that ended ``failed`` (the function raised) spends a retry; the unit goes on;
* when an attempt's Pod ended, the input it was at (begun, not ended; else the first it
  had not begun) takes the Pod's end: a failure (out of memory, a crash) spends one of
  *its* retries, a disruption (the Pod was deleted, evicted) is free, as for one Pod;
* the inputs it had not begun are not charged: the unit's next attempt runs them;
* an input whose retries are spent fails, one disrupted too often fails, and the unit
  goes on with the rest.

A unit's next attempt starts once its current one ended and an input is left unsettled.
Every attempt charges at least one input, so a unit ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from kinetic.model import digest
from kinetic.model.names import fmt_micro_time
from kinetic.model.progress import Mark
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import AttemptRecord, KineticBatchSpec

from kinetic_operator.logic.attempts import End, pod_end
from kinetic_operator.logic.observed import PodView
from kinetic_operator.logic.unit_sizing import DurationEstimate, SizingRules

_STOPPED = End(
    "disruption",
    "Stopped",
    "the unit was told to start no more inputs before this one began (the stop object in "
    "the batch's storage) while it was still to run; it runs again",
)

InputOutcome = Literal["pending", "running", "succeeded", "failed"]


@dataclass(frozen=True)
class Sizing:
    """How a sized batch's new units are sized: the rules, the work one unit is given, and
    what its inputs' durations measured so far say (from its status)."""

    rules: SizingRules
    target_seconds: float
    estimate: DurationEstimate | None = None


def units_sized(spec: KineticBatchSpec) -> bool:
    """Whether the operator sizes the batch's units: ``chunkSize: auto`` on a function
    template that runs on one host. (A container runs its own command once per Pod, a gang
    one input on several Pods: for those, auto means one input per Pod.)"""
    template = spec.template
    return (
        spec.sized_units
        and template is not None
        and template.function is not None
        and (template.hosts or 1) == 1
    )


# --------------------------------------------------------------------------- one unit


@dataclass(frozen=True)
class InputState:
    """How one input of a unit stands, and its attempts so far (oldest first)."""

    index: int
    outcome: InputOutcome
    records: tuple[AttemptRecord, ...] = ()
    failures: int = 0
    disruptions: int = 0
    sha256: str | None = None  # the digest of its result, once it succeeded
    seconds: float | None = None  # how long its last run took, by the Pod's clock
    message: str = ""
    reason: str = ""

    @property
    def terminal(self) -> bool:
        return self.outcome in ("succeeded", "failed")


@dataclass(frozen=True)
class UnitStep:
    """What a unit does next, and each of its inputs' state."""

    inputs: Mapping[int, InputState]
    attempt: int  # the current attempt after this step
    create: int | None = None  # the attempt whose Pod to create now
    stop: tuple[str, ...] = ()  # live Pods to delete
    live: bool = False  # a Pod of the unit runs or is about to

    def of(self, outcome: InputOutcome) -> IndexSet:
        return IndexSet(i for i, s in self.inputs.items() if s.outcome == outcome)


@dataclass(frozen=True)
class UnitLimits:
    """Retries per input, free disruptions per input."""

    retries: int
    max_disruptions: int


@dataclass
class _Input:
    """One input while its unit's attempts are walked."""

    index: int
    records: list[AttemptRecord] = field(default_factory=list)
    failures: int = 0
    disruptions: int = 0
    sha256: str | None = None
    seconds: float | None = None
    reason: str = ""
    message: str = ""
    running: bool = False
    succeeded: bool = False

    def settled(self, limits: UnitLimits) -> bool:
        return (
            self.succeeded
            or self.failures > limits.retries
            or self.disruptions > limits.max_disruptions
        )


def plan_unit(
    inputs: Sequence[int],
    pods: Mapping[int, PodView],
    marks: Mapping[str, Sequence[Mark]],
    *,
    reserved: int,
    creating: bool,
    limits: UnitLimits,
    settled: IndexSet,
    stopping: bool,
    now: datetime,
    unread: frozenset[str] = frozenset(),
) -> UnitStep:
    """The next step for the unit holding ``inputs``, from its attempts' Pods (by attempt
    number, tombstones included) and the marks their logs hold (by Pod name).

    ``reserved``: the highest attempt the batch's status names (0: none); ``creating``:
    this process created that attempt's Pod and the watch has not shown it yet.
    ``settled``: inputs whose outcome the batch recorded already (cancelled ones among
    them): no attempt runs them again. ``stopping``: the batch launches nothing more
    (a cancel, fail-fast): no next attempt. ``unread``: Pods that ended but whose log's
    end could not be read yet: judged as still running, since their marks are not all in
    (a Pod gone is judged on what was read: its log went with it).
    """
    current = max(reserved, max(pods, default=0))
    ended = _Ends(now, unread)
    state = _walk_attempts(inputs, pods, marks, current, settled, limits, ended)
    states = {i: _state(state[i], limits) for i in inputs}
    open_inputs = [i for i in inputs if i not in settled and not states[i].terminal]
    return _next_step(states, pods.get(current) if current else None, current, creating,
                      finished=not open_inputs or stopping, ended=ended)  # fmt: skip


@dataclass(frozen=True)
class _Ends:
    """How a unit's Pods ended, as far as their marks can be trusted to be all in."""

    now: datetime
    unread: frozenset[str]

    def of(self, pod: PodView) -> End | None:
        """The Pod's end; None while it runs, or while its log's end is still unread."""
        if pod.name in self.unread and not pod.gone:
            return None
        return pod_end(pod, self.now)


def _walk_attempts(
    inputs: Sequence[int],
    pods: Mapping[int, PodView],
    marks: Mapping[str, Sequence[Mark]],
    current: int,
    settled: IndexSet,
    limits: UnitLimits,
    ended: _Ends,
) -> dict[int, _Input]:
    """Each input's history over the unit's attempts 1..current, in order."""
    state = {i: _Input(i) for i in inputs}
    for attempt in range(1, current + 1):
        pod = pods.get(attempt)
        if pod is None:
            continue  # not created yet, or lost before it was seen: it ran nothing we know
        todo = [i for i in inputs if i not in settled and not state[i].settled(limits)]
        _walk(state, todo, pod, marks.get(pod.name, ()), ended)
    return state


def _next_step(
    states: dict[int, InputState],
    pod: PodView | None,
    current: int,
    creating: bool,
    *,
    finished: bool,
    ended: _Ends,
) -> UnitStep:
    """Whether the unit's current attempt runs on, needs its Pod, or a next attempt
    takes over; ``finished``: nothing left to run (or the batch stops)."""
    live = pod is not None and pod.live
    if finished:  # a live Pod has ended its inputs and exits, or the batch decides its fate
        return UnitStep(states, current, live=live)
    if current == 0:
        return UnitStep(states, 1, create=1, live=True)
    if pod is None:  # committed, not seen: create it (again: its name makes that idempotent)
        return UnitStep(states, current, create=None if creating else current, live=True)
    if ended.of(pod) is None:
        return UnitStep(states, current, live=True)  # starting or running
    return UnitStep(
        states,
        current + 1,
        create=current + 1,
        stop=(pod.name,) if live else (),  # ended (its deadline, a container that won't start)
        live=True,
    )


def _walk(
    state: dict[int, _Input],
    todo: list[int],
    pod: PodView,
    marks: Sequence[Mark],
    ended: _Ends,
) -> None:
    """What one attempt did to each input it ran (``todo``, in order)."""
    begun, done, skipped = _follow_marks(state, todo, pod, marks)
    end = ended.of(pod)
    at = next((i for i in todo if i in begun and i not in done), None)
    if end is None:  # the Pod runs on: the input it began and has not ended runs
        if at is not None:
            state[at].running = True
            state[at].records.append(_running(len(state[at].records) + 1, pod, begun[at]))
        return
    if at is None and running_input(marks) is not None:
        return  # it ended in an input settled already (cancelled): no other input pays
    if at is None:  # it ended before beginning this one (it never started, or it stopped)
        at = next((i for i in todo if i not in done), None)
    if at is not None:
        _charged(state[at], end, pod, begun.get(at))
    elif skipped:  # told to stop while these were open: a stop object anyone could write
        _charged(state[skipped[0]], _STOPPED, pod, None)  # so a disruption, bounded


def _follow_marks(
    state: dict[int, _Input], todo: list[int], pod: PodView, marks: Sequence[Mark]
) -> tuple[dict[int, Mark], set[int], list[int]]:
    """The attempt's marks, in order: the inputs it began, those it ended (each recorded
    as it ended) or skipped, and those it skipped."""
    begun: dict[int, Mark] = {}
    done: set[int] = set()
    skipped: list[int] = []
    for mark in marks:
        if mark.index not in todo:
            continue
        if mark.event == "begin":
            begun[mark.index] = mark
        elif mark.event == "end":
            done.add(mark.index)
            _ended(state[mark.index], mark, begun.get(mark.index), pod)
        else:
            done.add(mark.index)  # skipped: not begun
            skipped.append(mark.index)
    return begun, done, skipped


def running_input(marks: Sequence[Mark]) -> int | None:
    """The input a unit Pod's marks say it runs now (begun, not ended), if any."""
    now: int | None = None
    for mark in marks:
        if mark.event == "begin":
            now = mark.index
        elif mark.index == now:
            now = None
    return now


def _ended(entry: _Input, mark: Mark, begin: Mark | None, pod: PodView) -> None:
    """An input's end as its Pod marked it."""
    ok = bool(mark.ok)
    entry.seconds = mark.seconds
    if ok:
        entry.succeeded, entry.sha256 = True, mark.sha256
        summary = "ok"
    else:
        entry.failures += 1
        entry.reason = "Error"
        entry.message = summary = "the function raised: its result holds the exception"
    message = digest.with_sha256(summary, mark.sha256, size=mark.size) if mark.sha256 else summary
    entry.records.append(
        AttemptRecord(
            attempt=len(entry.records) + 1,
            pod=pod.name,
            pod_uid=pod.uid,
            outcome="success" if ok else "failure",
            reason="Completed" if ok else "Error",
            message=message,
            start_time=_time(begin.at_ms if begin else None),
            end_time=_time(mark.at_ms),
        )
    )


def _charged(entry: _Input, end: End, pod: PodView, begin: Mark | None) -> None:
    """The input a Pod's end falls on: a failure spends one of its retries, a disruption
    is free; a Pod that ended 0 without marking it is a failure of the runner's."""
    outcome, reason, message = end.outcome, end.reason, end.message or ""
    if outcome == "success":
        outcome, reason = "failure", "NoOutcome"
        message = "the unit ended without saying how this input ended"
    if outcome == "failure":
        entry.failures += 1
    else:
        entry.disruptions += 1
    entry.reason, entry.message = reason, message
    entry.records.append(
        AttemptRecord(
            attempt=len(entry.records) + 1,
            pod=pod.name,
            pod_uid=pod.uid,
            outcome=outcome,
            reason=reason,
            exit_code=end.exit_code,
            message=message[:4096] or None,
            start_time=_time(begin.at_ms if begin else None) or pod.start_time,
            end_time=pod.finished_at,
        )
    )


def _running(attempt: int, pod: PodView, begin: Mark) -> AttemptRecord:
    return AttemptRecord(
        attempt=attempt,
        pod=pod.name,
        pod_uid=pod.uid,
        outcome="running",
        start_time=_time(begin.at_ms),
    )


def _state(entry: _Input, limits: UnitLimits) -> InputState:
    outcome: InputOutcome
    if entry.succeeded:
        outcome = "succeeded"
    elif entry.failures > limits.retries or entry.disruptions > limits.max_disruptions:
        outcome = "failed"
        if entry.disruptions > limits.max_disruptions:
            entry.reason = "TooManyDisruptions"
            entry.message = (
                f"disrupted {entry.disruptions} times (the operator allows "
                f"{limits.max_disruptions}); last: {entry.message}"
            )
    elif entry.running:
        outcome = "running"
    else:
        outcome = "pending"
    return InputState(
        index=entry.index,
        outcome=outcome,
        records=tuple(entry.records),
        failures=entry.failures,
        disruptions=entry.disruptions,
        sha256=entry.sha256,
        seconds=entry.seconds,
        message=entry.message,
        reason=entry.reason,
    )


def _time(at_ms: int | None) -> str | None:
    """A Pod-clock time in milliseconds, kept to the microsecond (an input may take far
    less than a second, and its start, end and duration are in its record)."""
    if at_ms is None:
        return None
    return fmt_micro_time(datetime.fromtimestamp(at_ms / 1000, UTC))
