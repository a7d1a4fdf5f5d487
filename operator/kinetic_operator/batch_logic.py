"""The KineticBatch controller's decisions, as pure functions.

`decide_batch` takes what the operator knows — the batch spec, the batch
status as last written, and what it has observed of each unit's attempt
Pods — and returns the status to write and the actions to take. It performs
no I/O, so every rule below is unit-tested without a cluster, and the
handler layer stays a thin loop:

1. Read the batch (the freshest copy held, or a GET) and the attempt Pods
   of this batch from the Kopf index, grouped by unit.
2. ``d = decide_batch(spec, status, units, now, ...)``.
3. If ``d.write_status``: PATCH the status subresource with
   ``metadata.resourceVersion`` set to the version the status was read at.
   On 409 Conflict stop here and decide again from a fresh read — the
   decision was made on stale data and none of its actions may run.
4. Only then run ``d.actions`` in order: `WriteManifest` (when ``blocking``,
   a failed write stops here, so no Pod is created before the manifest
   exists), `CreatePods`, `StopPods`, `Event`.

A *unit* is what one Pod runs: one input, or ``spec.chunkSize``
consecutive inputs; unit ``u`` starts at input ``u*chunkSize``. Its
attempts are Pods ``<batch>-<start>-<attempt>``, planned by the same
attempt planner as a KineticJob's (`kinetic_operator.attempts`): retries
count failures, disruptions are retried for free, cancellation stops the
live Pod.

Why reserve-then-create is safe
-------------------------------

A launch is first *reserved*: the unit's inputs enter
``status.activeIndexes`` and the high-water mark ``status.launched`` moves,
and that status is written conditionally before any Pod is created. Two
reconciles racing on the same status version both reserve the same
inputs; only one write succeeds, so no stale decision can push the number
of Pods past ``maxConcurrent``. A crash after the reserve and before the
create leaves an active unit with no Pod; the planner creates attempt 1
again (AlreadyExists if it had been made). An input recorded in
``succeededIndexes``/``failedIndexes``/``cancelledIndexes`` never changes
again and is never launched again, so deleting finished Pods cannot make
anything run twice.

Fail-fast (the upstream table, exactly)
---------------------------------------

A *failure* is an input whose retries are exhausted, or an input listed in
``spec.submissionFailures`` (recorded failed from the first decision).

========= ===================== =============================================
failFast  cancelRunningOnFail   on the first failure
========= ===================== =============================================
false     false                 everything continues; the batch ends FAILED
true      false                 nothing new is launched, running inputs
                                finish; the batch ends FAILED
true      true                  nothing new is launched, running inputs are
                                cancelled; the batch ends FAILED
false     true                  no effect: same as the first row
========= ===================== =============================================

Inputs never launched because of fail-fast or ``spec.cancel`` are recorded
cancelled at once. ``spec.cancel: true`` stops launching, cancels every
running input and ends the batch CANCELLED once they are done. An input
listed in ``spec.cancelIndexes`` is recorded cancelled at once, and its Pod
is stopped (for a chunk, once every input of the chunk is settled).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from kinetic.model.batchjobs import batch_total, retries_of
from kinetic.model.grid import Grid
from kinetic.model.limits import DEFAULT_MAX_DISRUPTIONS
from kinetic.model.names import input_pod_name
from kinetic.model.progress import Mark, StopOrder
from kinetic.model.ranges import IndexSet, RangeError
from kinetic.model.resources import (
    AttemptRecord,
    Condition,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
    PhaseCounts,
    UnitDurations,
)

from kinetic_operator import gangs
from kinetic_operator.attempts import ENDED, Limits, UnitOutcome, UnitPlan, plan_unit
from kinetic_operator.conditions import READINESS, readiness
from kinetic_operator.gangs import Gang
from kinetic_operator.observed import PodView
from kinetic_operator.unit_sizing import observe, size_next_unit, units_to_create
from kinetic_operator.units import InputState, Sizing, UnitLimits, running_input, units_sized
from kinetic_operator.units import plan_unit as plan_sized_unit

__all__ = [
    "Action",
    "BatchDecision",
    "CreatePods",
    "Event",
    "MUTABLE_FIELDS",
    "Recorded",
    "StopPods",
    "UnitObservation",
    "WriteManifest",
    "WriteStop",
    "changed_fields",
    "compact_status",
    "decide_batch",
    "immutable_change",
    "invalid_batch",
    "merge_mutable",
    "unit_inputs",
    "with_condition",
]

COND_RUNNING, COND_COMPLETE, COND_FAILED = "Running", "Complete", "Failed"

# Reasons, one CamelCase word each, as conditions and events use them.
R_PENDING = "Pending"
R_RUNNING = "Running"
R_IN_PROGRESS = "InProgress"
R_FAIL_FAST = "FailFast"
R_CANCELLING = "Cancelling"
R_ALL_SUCCEEDED = "AllSucceeded"
R_INPUTS_FAILED = "InputsFailed"
R_CANCELLED = "Cancelled"
R_CHILDREN_CANCELLED = "InputsCancelled"
R_INVALID_SPEC = "InvalidSpec"

# Each index range string in the status is cut beyond this many characters
# (`truncated` says so; the manifest header holds them complete), so the
# status stays small whatever the pattern of outcomes.
RANGE_CAP = 12_000


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class UnitObservation:
    """What the operator knows of one unit's attempt Pods.

    ``pods`` maps attempt number to the Pod's last sight (``gone`` for a
    tombstone). ``creating`` is an attempt this process created whose Pod
    the watch has not shown yet. A multi-host unit's Pods come as
    ``members``; `see_gangs` turns them into one view per attempt.
    """

    pods: Mapping[int, PodView] = field(default_factory=dict)
    creating: int | None = None
    creating_name: str | None = None  # the name ``creating``'s Pod was created under
    members: tuple[PodView, ...] = ()  # a gang's member Pods, tombstones included
    gang: Gang | None = None  # set by `see_gangs`: then ``pods`` are one view per attempt
    # Attempts whose end an earlier decision recorded (the verdict stands, whatever their
    # Pods show later: a Pod the operator stopped for a failure then reads as deleted).
    ended: Mapping[int, AttemptRecord] = field(default_factory=dict)
    # Members this process is creating or deleting and the watch has not shown so yet,
    # read with the Pods (the same moment): a later read could miss one the watch just
    # showed, while the Pods read here still lack it, and create or delete it twice.
    making: frozenset[str] = frozenset()
    stopping: frozenset[str] = frozenset()

    @property
    def live(self) -> bool:
        """A Pod of the unit runs or is about to: an attempt's, or any member of a gang
        (one stopped with its gang holds its node until it is gone)."""
        return any(p.live for p in self.pods.values()) or any(m.live for m in self.members)


@dataclass(frozen=True)
class Recorded:
    """Every recorded outcome, complete (the status's ranges may be cut)."""

    succeeded: IndexSet = field(default_factory=IndexSet)
    failed: IndexSet = field(default_factory=IndexSet)
    cancelled: IndexSet = field(default_factory=IndexSet)
    active: IndexSet = field(default_factory=IndexSet)  # reserved, not ended (when known)

    @property
    def terminal(self) -> IndexSet:
        return self.succeeded | self.failed | self.cancelled

    def union(self, other: Recorded) -> Recorded:
        return Recorded(
            self.succeeded | other.succeeded,
            self.failed | other.failed,
            self.cancelled | other.cancelled,
            self.active | other.active,
        )


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class CreatePods:
    """Create these ``(unit start, attempt)`` Pods (AlreadyExists is fine)."""

    units: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class StopPods:
    """Delete these live Pods (cancelled, or strays)."""

    pods: tuple[str, ...]


@dataclass(frozen=True)
class WriteManifest:
    """The manifest is out of date.

    ``urgent``: write now, bypassing the debounce (first write, or the batch
    just ended). ``blocking``: the `CreatePods` after it must not run until
    this write has succeeded (the manifest exists before the first Pod does).
    """

    urgent: bool = False
    blocking: bool = False


@dataclass(frozen=True)
class WriteStop:
    """Tell a sized batch's units what not to begin: anything more (it stopped launching),
    or the inputs cancelled one by one. Each unit reads it before its next input
    (`kinetic.runtime.runner`)."""

    order: StopOrder


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the batch, for ``kubectl describe``."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = CreatePods | StopPods | WriteManifest | WriteStop | Event


@dataclass(frozen=True)
class BatchDecision:
    """The outcome of one reconcile.

    ``status``: the status to write (range strings complete; see
    `compact_status`). ``write_status``: a conditional status write is
    required before any action. ``urgent``: write it now rather than
    coalesce it with the next (Pods to create, or the batch ended).
    ``more``: launches were held back by ``max_launches``. ``recorded``:
    every outcome, complete. ``plans``: the plan of every unit looked at,
    by unit start (the manifest's attempt history).
    """

    status: KineticBatchStatus
    actions: tuple[Action, ...]
    write_status: bool
    urgent: bool = False
    more: bool = False
    recorded: Recorded = field(default_factory=Recorded)
    plans: Mapping[int, UnitPlan] = field(default_factory=dict)
    input_plans: Mapping[int, UnitPlan] = field(default_factory=dict)  # a sized batch's

    def of(self, kind: type) -> list[Any]:
        """The actions of one kind, in order (handy in handlers and tests)."""
        return [a for a in self.actions if isinstance(a, kind)]

    @property
    def creates(self) -> list[tuple[int, int]]:
        return [u for a in self.of(CreatePods) for u in a.units]

    @property
    def stops(self) -> list[str]:
        return [p for a in self.of(StopPods) for p in a.pods]


def unit_inputs(start: int, chunk: int, total: int) -> IndexSet:
    """The inputs the unit starting at ``start`` runs."""
    return IndexSet.range(start, min(start + chunk, total))


# --------------------------------------------------------------------------- decision


@dataclass
class _Work:
    """One decision in progress: the sets it moves and what it has found."""

    spec: KineticBatchSpec
    batch: str
    total: int
    grid: Grid
    now: datetime
    max_disruptions: int
    unschedulable_seconds: float | None
    succeeded: IndexSet
    failed: IndexSet
    cancelled: IndexSet
    active: IndexSet
    launched: int
    plans: dict[int, UnitPlan] = field(default_factory=dict)
    creates: list[tuple[int, int]] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    running: IndexSet = field(default_factory=IndexSet)
    newly_failed: IndexSet = field(default_factory=IndexSet)
    fail_messages: list[str] = field(default_factory=list)
    adopted: IndexSet = field(default_factory=IndexSet)
    members: dict[str, tuple[str, ...]] = field(default_factory=dict)  # gang attempt -> Pods
    dns: bool = True  # gang members reach rank 0 by name (else by its Pod IP)
    sizing: Sizing | None = None  # chunkSize auto: how new units are sized
    marks: Mapping[str, Sequence[Mark]] = field(default_factory=dict)  # by unit Pod
    unread: frozenset[str] = frozenset()  # ended unit Pods whose log's end is not read yet
    input_plans: dict[int, UnitPlan] = field(default_factory=dict)  # chunkSize auto
    measured: list[float] = field(default_factory=list)  # durations of inputs ended now
    queued: int = 0  # inputs live units hold and have not begun

    @property
    def chunk(self) -> int:
        """The fixed number of inputs per unit (1 with sized units: see ``grid``)."""
        return self.spec.fixed_chunk

    @property
    def sized(self) -> bool:
        return self.sizing is not None

    @property
    def terminal(self) -> IndexSet:
        return self.succeeded | self.failed | self.cancelled

    def unit_of(self, index: int) -> int:
        return self.grid.unit_of(index)

    def inputs_of(self, unit: int) -> IndexSet:
        return self.grid.inputs_of(unit, self.total)


def decide_batch(
    spec: KineticBatchSpec,
    status: KineticBatchStatus | None,
    units: Mapping[int, UnitObservation],
    now: datetime,
    *,
    batch: str,
    generation: int | None = None,
    max_launches: int | None = None,
    max_disruptions: int = DEFAULT_MAX_DISRUPTIONS,
    extra: Recorded | None = None,
    dns: bool = True,
    unschedulable_seconds: float | None = None,
    sizing: Sizing | None = None,
    marks: Mapping[str, Sequence[Mark]] | None = None,
    unread: frozenset[str] = frozenset(),
) -> BatchDecision:
    """Decide what a batch does next; see the module docstring for the rules.

    ``units`` maps unit start -> observation for every unit with Pods (or
    Pods being created). A sized batch's ``marks`` are what its unit Pods' logs said,
    by Pod name; ``unread``, the ended ones whose log's end is not read yet. ``extra``
    adds outcomes recorded elsewhere (the manifest) when the status's ranges were cut.
    ``max_launches`` caps how many Pods one decision creates, so a 100k-input batch with
    ``maxConcurrent: null`` is created in bounded steps (``more`` is then
    True).
    """
    old = status if status is not None else KineticBatchStatus.model_validate({})
    w = _start(spec, old, batch, now, max_disruptions, extra)
    w.unschedulable_seconds = unschedulable_seconds
    w.sizing = sizing if units_sized(spec) else None
    w.marks, w.unread = marks or {}, unread
    w.members, w.dns = _gang_members(units), dns
    if Phase(old.phase).terminal:
        recorded = Recorded(w.succeeded, w.failed, w.cancelled)
        return _settled(old, units, generation, recorded, w.members)
    old_recorded = Recorded(w.succeeded, w.failed, w.cancelled)

    new_submission = _record_submissions(w)
    _record_cancel_requests(w)
    _follow_units(w, units, cancel_all=_cancel_running(w))
    if _cancel_running(w):  # the first failure was just recorded: cancel the rest too
        _follow_units(w, units, cancel_all=True)
    _follow_gangs(w, units)
    terminal = w.terminal
    w.creates = [(u, a) for u, a in w.creates if (w.inputs_of(u) - terminal) & w.active]
    _adopt(w, units)
    fresh, unlaunched, more = _launch_or_stop(w, max_launches, units)
    new = _status(w, old, generation, fresh)
    actions = _actions(w, old, old_recorded, new, fresh, unlaunched, new_submission)
    recorded = Recorded(w.succeeded, w.failed, w.cancelled, w.active - w.terminal)
    changed = new.wire() != old.wire()
    return BatchDecision(
        status=new,
        actions=tuple(actions),
        write_status=changed or bool(w.creates),
        urgent=bool(w.creates)
        or Phase(new.phase).terminal
        or Phase(old.phase) is not Phase(new.phase),
        more=more,
        recorded=recorded,
        plans=dict(w.plans),
        input_plans=dict(w.input_plans),
    )


def _start(
    spec: KineticBatchSpec,
    old: KineticBatchStatus,
    batch: str,
    now: datetime,
    max_disruptions: int,
    extra: Recorded | None,
) -> _Work:
    """The working sets: what the status recorded, plus what the manifest adds."""
    known = Recorded(
        _parse(old.succeeded_indexes), _parse(old.failed_indexes), _parse(old.cancelled_indexes)
    )
    if extra is not None:
        known = known.union(extra)
    return _Work(
        spec=spec,
        batch=batch,
        total=batch_total(spec),
        grid=Grid.parse(old.unit_grid) if spec.sized_units else Grid.fixed(spec.fixed_chunk),
        now=now,
        max_disruptions=max_disruptions,
        unschedulable_seconds=None,
        succeeded=known.succeeded,
        failed=known.failed,
        cancelled=known.cancelled - known.succeeded - known.failed,
        active=(_parse(old.active_indexes) | known.active) - known.terminal,
        launched=old.launched,
    )


def _parse(text: str | None) -> IndexSet:
    """A range string we wrote; a cut one ends at a whole item, so it parses too."""
    try:
        return IndexSet.parse(text)
    except RangeError:
        return IndexSet()


def _record_submissions(w: _Work) -> IndexSet:
    """Inputs the client could not package are failures from the start."""
    listed = IndexSet(f.index for f in w.spec.submission_failures if f.index < w.total)
    new = listed - w.terminal
    w.failed = w.failed | new
    w.active = w.active - new
    return new


def _record_cancel_requests(w: _Work) -> None:
    """Inputs named in spec.cancelIndexes end cancelled now, launched or not."""
    asked = _parse(w.spec.cancel_indexes) & IndexSet.range(0, w.total)
    new = asked - w.terminal
    w.cancelled = w.cancelled | new


def _cancel_running(w: _Work) -> bool:
    failing = w.spec.fail_fast and bool(w.failed) and w.spec.cancel_running_on_fail
    return w.spec.cancel or failing


def _failing_fast(w: _Work) -> bool:
    """An input failed and failFast is set: nothing new is launched."""
    return w.spec.fail_fast and bool(w.failed)


def _running_reason(w: _Work) -> str:
    """The Running condition's reason while the batch runs: why it launches no more, if so."""
    return R_CANCELLING if w.spec.cancel else R_FAIL_FAST if _failing_fast(w) else R_RUNNING


def _follow_units(w: _Work, units: Mapping[int, UnitObservation], *, cancel_all: bool) -> None:
    """Plan every active unit (and stop live Pods of settled ones); record what ended.

    Units with no live Pod and no active input (finished, waiting out their
    TTL) are skipped without a look: at 10,000 inputs most units are those.
    Outcomes are collected and merged into the sets once, at the end, so a
    pass costs the same however scattered the recorded outcomes are.
    """
    active_units = {w.unit_of(i) for i in w.active}
    terminal = w.terminal
    stopping = set(w.stops)
    ended: dict[str, list[IndexSet]] = {"succeeded": [], "failed": [], "cancelled": []}
    running: list[IndexSet] = []
    for unit in sorted(active_units | _busy_units(units)):
        obs = units.get(unit, UnitObservation())
        open_inputs = w.inputs_of(unit) - terminal
        if not open_inputs:  # settled: stop any Pod still live, or still being created
            if not (w.sized and _exits_by_itself(w, obs, cancel_all)):
                _stop(w, stopping, _settled_strays(w, unit, obs))
            continue
        if unit not in active_units:
            continue  # Pods the status does not know of: `_adopt` looks at them
        if w.sized:
            _follow_sized(w, unit, obs, open_inputs, cancel_all, stopping, ended, running)
            continue
        plan = _plan(w, unit, obs, cancel_all=cancel_all)
        _follow_plan(w, unit, plan, stopping)
        if plan.outcome == "running":
            running.append(open_inputs)
        if plan.terminal:
            _record_unit(w, plan, open_inputs, ended)
    _merge_outcomes(w, running, ended)


def _follow_sized(
    w: _Work,
    unit: int,
    obs: UnitObservation,
    open_inputs: IndexSet,
    cancel_all: bool,
    stopping: set[str],
    ended: dict[str, list[IndexSet]],
    running: list[IndexSet],
) -> None:
    """One unit of a sized batch: each of its inputs as its Pods' marks and ends tell
    (`units.plan_unit`), its next attempt, and its Pod stopped when the batch cancels."""
    inputs = list(w.inputs_of(unit))
    stopped = cancel_all or w.spec.cancel or _failing_fast(w)
    step = plan_sized_unit(
        inputs,
        obs.pods,
        w.marks,
        reserved=max(1, obs.creating or 0),
        creating=obs.creating is not None and obs.creating >= max(obs.pods, default=0),
        limits=UnitLimits(retries_of(w.spec, unit), w.max_disruptions),
        settled=IndexSet(inputs) - open_inputs,
        stopping=stopped,
        now=w.now,
        unread=w.unread,
    )
    for index in open_inputs:
        state = step.inputs[index]
        w.input_plans[index] = input_plan(state, step.attempt)
        if state.outcome in ("succeeded", "failed"):
            ended[state.outcome].append(IndexSet([index]))
            if state.seconds is not None:
                w.measured.append(state.seconds)
            if state.outcome == "failed" and not w.fail_messages:
                w.fail_messages.append(f"Input {index} failed: {state.reason}: {state.message}")
        elif state.outcome == "running":
            running.append(IndexSet([index]))
    settle = step.of("pending") | step.of("running") if cancel_all else step.of("pending")
    if stopped:  # what never began is cancelled; with cancel_all, what runs too
        ended["cancelled"].append(settle & open_inputs)
        if cancel_all:
            _stop(w, stopping, [p.name for p in obs.pods.values() if p.live])
        return
    if step.live:
        w.queued += len(step.of("pending") & open_inputs)
    _stop(w, stopping, step.stop or _running_cancelled(w, obs, step.attempt))
    if step.create is not None and (unit, step.create) not in w.creates:
        w.creates.append((unit, step.create))


def _exits_by_itself(w: _Work, obs: UnitObservation, cancel_all: bool) -> bool:
    """A sized unit whose inputs are all recorded, its Pod about to exit on its own (its
    marks say it ended them): left to exit, holding its slot until it has. Stopped
    instead when the batch cancels what runs, or the input it runs was cancelled."""
    if cancel_all or (obs.creating is not None and obs.creating not in obs.pods):
        return False
    pod = obs.pods.get(max(obs.pods, default=0))
    return pod is not None and not _running_cancelled(w, obs, pod.attempt)


def _running_cancelled(w: _Work, obs: UnitObservation, attempt: int) -> list[str]:
    """The unit's live Pod, when the input it runs now was cancelled: stopping it is the
    only way to stop that input (the rest of the unit runs again, uncharged)."""
    pod = obs.pods.get(attempt)
    if pod is None or not pod.live:
        return []
    now = running_input(w.marks.get(pod.name, ()))
    return [pod.name] if now is not None and now in w.cancelled else []


def input_plan(state: InputState, attempt: int) -> UnitPlan:
    """An input's story as the manifest records it (the same shape as a unit's plan)."""
    outcome: UnitOutcome = state.outcome
    return UnitPlan(
        outcome,
        max((r.attempt for r in state.records), default=attempt),
        state.reason or outcome.title(),
        state.message or outcome,
        records=state.records,
        failures=state.failures,
        disruptions=state.disruptions,
    )


def _busy_units(units: Mapping[int, UnitObservation]) -> set[int]:
    """Units with a Pod live or being created."""
    return {u for u, obs in units.items() if obs.creating is not None or obs.live}


def _settled_strays(w: _Work, unit: int, obs: UnitObservation) -> list[str]:
    """The Pods of a settled unit still live, or still being created (by the name it was
    created under: someone else's Pod may hold the one it was meant to have)."""
    strays = [p.name for p in obs.pods.values() if p.live]
    if obs.creating is not None and obs.creating not in obs.pods and obs.creating_name:
        strays.append(obs.creating_name)
    return strays


def _stop_order(w: _Work) -> StopOrder | None:
    """What a sized batch's running units must not begin, while any may run."""
    if not w.sized or not (w.active - w.terminal):
        return None
    if w.spec.cancel or _failing_fast(w):
        return StopOrder(everything=True)
    cancelled = _parse(w.spec.cancel_indexes)
    return StopOrder(cancelled=cancelled) if cancelled else None


def _stop(w: _Work, stopping: set[str], pods: Sequence[str]) -> None:
    """Stop these Pods, each once in a decision; a gang's attempt is its live members."""
    pods = [m for p in pods for m in w.members.get(p, (p,))]
    w.stops.extend(p for p in pods if p not in stopping)
    stopping.update(pods)


# --------------------------------------------------------------------------- gangs


def see_gangs(
    units: Mapping[int, UnitObservation],
    hosts_of: Callable[[int], int],
    now: datetime,
    deadline: timedelta,
    settled: Mapping[int, Mapping[int, AttemptRecord]] | None = None,
) -> dict[int, UnitObservation]:
    """Each multi-host unit's members as one view per attempt (`kinetic_operator.gangs`),
    beside the attempts that could not be created at all; other units as they are.
    ``settled``: unit -> attempt -> its recorded end (`gangs.see`)."""
    out: dict[int, UnitObservation] = {}
    for unit, obs in units.items():
        hosts = hosts_of(unit)
        if hosts <= 1 and not obs.members:
            out[unit] = obs
            continue
        ended = (settled or {}).get(unit)
        refused = {a: v for a, v in obs.pods.items() if v.terminal}  # a member not created
        views, gang = gangs.see(
            obs.members, max(hosts, 2), now, deadline, obs.making, ended, refused, obs.stopping
        )
        out[unit] = replace(obs, pods={**obs.pods, **views}, gang=gang)
    return out


def settled_units(plans: Mapping[int, UnitPlan]) -> dict[int, dict[int, AttemptRecord]]:
    """The ended attempts of each unit this decision planned, to be remembered: from then on
    their verdicts stand (`UnitObservation.ended`; for gangs, `gangs.see`)."""
    return {
        unit: ended
        for unit, plan in plans.items()
        if (ended := {r.attempt: r for r in plan.records if r.outcome in ENDED})
    }


def _gang_members(units: Mapping[int, UnitObservation]) -> dict[str, tuple[str, ...]]:
    """Each gang attempt's name -> its live member Pods: what stopping that attempt deletes."""
    return {
        view.name: obs.gang.members_of(attempt)
        for obs in units.values()
        if obs.gang is not None
        for attempt, view in obs.pods.items()
    }


def _follow_gangs(w: _Work, units: Mapping[int, UnitObservation]) -> None:
    """A gang's own steps: stop the members of attempts that have a verdict, and create the
    ranks still missing from a running attempt once rank 0 can be reached."""
    stopping = set(w.stops)
    for unit, obs in units.items():
        gang, plan = obs.gang, w.plans.get(unit)
        if gang is None:
            continue
        w.stops.extend(p for p in gang.teardown if p not in stopping)
        stopping.update(gang.teardown)
        if plan is None or plan.terminal or plan.create is not None:
            continue
        if plan.attempt in gang.members and (unit, plan.attempt) not in w.creates:
            pod = input_pod_name(w.batch, unit, plan.attempt)
            if gangs.ranks_to_create(gang, plan.attempt, pod, gang.hosts, dns=w.dns):
                w.creates.append((unit, plan.attempt))


def _plan(w: _Work, unit: int, obs: UnitObservation, *, cancel_all: bool) -> UnitPlan:
    """The attempt planner's next step for one active unit."""
    return plan_unit(
        obs.pods,
        reserved=max(1, obs.creating or 0),
        creating=obs.creating is not None and obs.creating >= max(obs.pods, default=0),
        limits=Limits(retries_of(w.spec, unit), w.max_disruptions, w.unschedulable_seconds),
        cancel=cancel_all,
        pod_name=functools.partial(input_pod_name, w.batch, unit),
        now=w.now,
        known=obs.ended,
    )


def _follow_plan(w: _Work, unit: int, plan: UnitPlan, stopping: set[str]) -> None:
    """Keep the unit's plan, and take its Pods to stop and to create."""
    w.plans[unit] = plan
    _stop(w, stopping, plan.stop)
    if plan.create is not None and (unit, plan.create) not in w.creates:
        w.creates.append((unit, plan.create))


def _merge_outcomes(w: _Work, running: list[IndexSet], ended: dict[str, list[IndexSet]]) -> None:
    """Merge what one pass found into the working sets, once."""
    w.running = w.running.union(*running)
    w.succeeded = w.succeeded.union(*ended["succeeded"])
    w.failed = w.failed.union(*ended["failed"])
    w.newly_failed = w.newly_failed.union(*ended["failed"])
    w.cancelled = w.cancelled.union(*ended["cancelled"])
    done = IndexSet().union(*ended["succeeded"], *ended["failed"], *ended["cancelled"])
    w.active = w.active - done


def _record_unit(
    w: _Work, plan: UnitPlan, open_inputs: IndexSet, ended: dict[str, list[IndexSet]]
) -> None:
    """A unit ended: its inputs' outcomes, with a chunk's own per-input report."""
    if plan.outcome == "succeeded":
        ended["succeeded"].append(open_inputs)
        return
    ok = _reported_ok(plan) & open_inputs if w.chunk > 1 else IndexSet()
    rest = open_inputs - ok
    if ok:
        ended["succeeded"].append(ok)
    ended[plan.outcome].append(rest)
    if plan.outcome == "failed" and rest and not w.fail_messages:
        w.fail_messages.append(f"Input {rest.min()} failed: {plan.message}")


def _reported_ok(plan: UnitPlan) -> IndexSet:
    """Inputs a chunk's runner reported succeeded in any attempt's termination message."""
    ok = IndexSet()
    for rec in plan.records:
        try:
            report = json.loads(rec.message or "")
        except ValueError:
            continue
        if isinstance(report, dict) and isinstance(report.get("succeeded"), str):
            ok = ok | _parse(report["succeeded"])
    return ok


def _adopt(w: _Work, units: Mapping[int, UnitObservation]) -> None:
    """Pods of open inputs the status does not list as active (a lost write): adopt them."""
    terminal, seen = w.terminal, IndexSet(units)
    candidates = seen - terminal - w.active if w.chunk == 1 else seen
    for unit in candidates:
        obs = units[unit]
        if unit in w.plans or not obs.pods:
            continue
        open_inputs = w.inputs_of(unit) - terminal
        if open_inputs and not (open_inputs & w.active):
            w.adopted = w.adopted | open_inputs
    if w.adopted:
        w.active = w.active | w.adopted
        w.launched = max(w.launched, (w.adopted.max() or 0) + 1)


def _launch_or_stop(
    w: _Work, max_launches: int | None, units: Mapping[int, UnitObservation]
) -> tuple[IndexSet, IndexSet, bool]:
    """Reserve new units up to maxConcurrent, or, when stopping, cancel what never ran.

    Returns the inputs reserved now, the inputs cancelled because they never
    ran, and whether ``max_launches`` held launches back.
    """
    terminal = w.terminal
    unlaunched = IndexSet.range(0, w.total) - terminal - w.active
    if w.spec.cancel or _failing_fast(w):
        w.cancelled = w.cancelled | unlaunched
        return IndexSet(), unlaunched, False
    slots, more = _free_slots(w, len(unlaunched), max_launches, units)
    if w.sizing is not None:
        picked = _pick_sized_units(w, w.sizing, unlaunched, slots, units)
    else:
        picked = _pick_units(w, unlaunched, slots)
    w.creates.extend((unit, 1) for unit in picked)
    fresh = IndexSet().union(*(w.inputs_of(unit) - terminal - w.active for unit in picked))
    if fresh:
        w.active = w.active | fresh
        w.launched = max(w.launched, (fresh.max() or 0) + 1)
    return fresh, IndexSet(), more


def _free_slots(
    w: _Work, wanted: int, max_launches: int | None, units: Mapping[int, UnitObservation]
) -> tuple[int, bool]:
    """How many units may be launched now, and whether ``max_launches`` held some back."""
    slots = wanted
    if w.spec.max_concurrent is not None:
        slots = min(slots, max(0, w.spec.max_concurrent - len(_held_units(w, units))))
    if max_launches is not None and slots > max_launches:
        return max_launches, True
    return slots, False


def _held_units(w: _Work, units: Mapping[int, UnitObservation]) -> set[int]:
    """Units holding a slot: every active unit, and every unit with a Pod still live or
    being created (the Pod of a cancelled input holds its slot until it stops)."""
    return {w.unit_of(i) for i in w.active} | {
        u
        for u, obs in units.items()
        if u < w.total and ((obs.creating is not None and obs.creating not in obs.pods) or obs.live)
    }


def _pick_units(w: _Work, unlaunched: IndexSet, slots: int) -> list[int]:
    """The first ``slots`` units with an unlaunched input, in input order."""
    picked: list[int] = []
    for a, b in unlaunched.intervals:
        i = a
        while i <= b and len(picked) < slots:
            unit = w.unit_of(i)
            if not picked or picked[-1] != unit:
                picked.append(unit)
            i = unit + w.chunk
        if len(picked) >= slots:
            break
    return picked


def _pick_sized_units(
    w: _Work,
    sizing: Sizing,
    unlaunched: IndexSet,
    slots: int,
    units: Mapping[int, UnitObservation],
) -> list[int]:
    """New units from the first inputs not launched yet, each sized now
    (`unit_sizing.size_next_unit`: about the target's work, never more than its share of
    what is left), as many as may start at once (`unit_sizing.units_to_create`); each
    extends the grid past every unit launched so far."""
    starting = sum(1 for obs in units.values() if obs.live and not _runs(obs))
    running = sum(1 for obs in units.values() if _runs(obs))
    now = min(slots, units_to_create(slots, starting, running, sizing.rules))
    live = len(_held_units(w, units))
    picked: list[int] = []
    left = unlaunched
    for k in range(now):  # paced: but each sized as a share of every slot free
        start = left.min()
        if start is None:
            break
        size = size_next_unit(
            len(left),
            slots - k,
            live + k,
            sizing.estimate,
            sizing.target_seconds,
            queued=w.queued,
            rules=sizing.rules,
        )
        w.grid = w.grid.with_unit(start, size)
        unit = w.unit_of(start)
        picked.append(unit)
        left = left - w.inputs_of(unit)
    return picked


def _runs(obs: UnitObservation) -> bool:
    """Whether a unit's Pod runs (rather than starts)."""
    return any(p.live and p.phase == "Running" for p in obs.pods.values())


def _status(
    w: _Work, old: KineticBatchStatus, generation: int | None, fresh: IndexSet
) -> KineticBatchStatus:
    """Counts, ranges, phase, message and conditions as this decision leaves the batch."""
    stamp = _timestamp(w.now)
    terminal = w.terminal
    counts = _counts(w)
    phase, reason = _batch_phase(w, old, counts)
    message = _message(phase, reason, counts, w.total, _failing_fast(w), w.spec.cancel)
    return old.model_copy(
        update={
            "phase": phase.value,
            "total": w.total,
            "counts": counts,
            "progress": f"{counts.succeeded}/{w.total}",
            "launched": w.launched,
            "active_indexes": str(w.active - terminal),
            "succeeded_indexes": str(w.succeeded),
            "failed_indexes": str(w.failed),
            "cancelled_indexes": str(w.cancelled),
            "truncated": False,
            "start_time": old.start_time or (stamp if (fresh or w.adopted) else None),
            "completion_time": old.completion_time or (stamp if phase.terminal else None),
            "message": message,
            "conditions": _conditions(
                old.conditions, phase, reason, _running_reason(w), message, stamp
            ),
            "observed_generation": generation
            if generation is not None
            else old.observed_generation,
            **_sizing_status(w),
        },
        deep=True,
    )


def _sizing_status(w: _Work) -> dict[str, Any]:
    """A sized batch's grid and measured durations, as the next decision (or a restarted
    operator) reads them back."""
    if w.sizing is None:
        return {}
    estimate = w.sizing.estimate
    for seconds in w.measured:
        estimate = observe(estimate, seconds) or estimate
    durations = (
        UnitDurations(
            count=estimate.count,
            total_seconds=round(estimate.total_seconds, 3),
            longest_seconds=round(estimate.longest_seconds, 3),
        )
        if estimate is not None
        else None
    )
    return {"unit_grid": w.grid.text(), "unit_durations": durations}


def _counts(w: _Work) -> PhaseCounts:
    """How many inputs stand in each phase; pending is whatever is not otherwise counted."""
    terminal = w.terminal
    running = len(w.running - terminal)
    return PhaseCounts(
        succeeded=len(w.succeeded),
        failed=len(w.failed),
        cancelled=len(w.cancelled),
        running=running,
        pending=w.total - len(terminal) - running,
    )


def _batch_phase(w: _Work, old: KineticBatchStatus, counts: PhaseCounts) -> tuple[Phase, str]:
    """The phase and its reason: done once every input is settled and nothing is left to start."""
    terminal = w.terminal
    submissions = sum(1 for f in w.spec.submission_failures if f.index < w.total)
    done = len(terminal) == w.total and not (w.active - terminal) and not w.creates
    return _phase(
        done=done,
        old_phase=Phase(old.phase),
        spec_cancel=w.spec.cancel,
        fail_fast=_failing_fast(w),
        counts=counts,
        total=w.total,
        submissions=submissions,
    )


def _actions(
    w: _Work,
    old: KineticBatchStatus,
    old_recorded: Recorded,
    new: KineticBatchStatus,
    fresh: IndexSet,
    unlaunched: IndexSet,
    new_submission: IndexSet,
) -> list[Action]:
    """The actions, in the order they must run.

    The manifest is written first, and blocks the creates, while it does not
    exist yet; otherwise after the Pods are created and stopped.
    """
    actions: list[Action] = []
    phase = Phase(new.phase)
    manifest_missing = old.manifest_uri is None
    blocking = manifest_missing and bool(w.creates)
    dirty = _manifest_stale(w, old, old_recorded, phase, fresh) or blocking
    if dirty and blocking:
        actions.append(WriteManifest(urgent=True, blocking=True))
    if w.creates:
        actions.append(CreatePods(tuple(w.creates)))
    if w.stops:
        actions.append(StopPods(tuple(w.stops)))
    order = _stop_order(w)
    if order is not None:
        actions.append(WriteStop(order))
    if dirty and not blocking:
        actions.append(WriteManifest(urgent=phase.terminal or manifest_missing))
    actions.extend(
        _events(
            old=old,
            new=new,
            spec=w.spec,
            fresh=fresh,
            adopted=w.adopted,
            new_submission=new_submission,
            newly_failed=w.newly_failed,
            fail_messages=w.fail_messages,
            unlaunched=unlaunched,
            cancelling=len(w.stops),
            active=len(w.active - w.terminal),
            running_reason=_running_reason(w),
        )
    )
    return actions


def _manifest_stale(
    w: _Work, old: KineticBatchStatus, old_recorded: Recorded, phase: Phase, fresh: IndexSet
) -> bool:
    """Whether this decision changed what the manifest holds: launches, adoptions,
    outcomes, the phase, or any unit's attempt history."""
    return (
        bool(fresh)
        or bool(w.adopted)
        or Recorded(w.succeeded, w.failed, w.cancelled).terminal != old_recorded.terminal
        or phase is not Phase(old.phase)
        or any(p.records for p in w.plans.values())
        or any(p.records for p in w.input_plans.values())
    )


def _settled(
    old: KineticBatchStatus,
    units: Mapping[int, UnitObservation],
    generation: int | None,
    recorded: Recorded | None = None,
    members: Mapping[str, tuple[str, ...]] | None = None,
) -> BatchDecision:
    """A finished batch changes no more; it only stops Pods still live."""
    new = old
    if generation is not None and generation != old.observed_generation:
        new = old.model_copy(update={"observed_generation": generation})
    live = (p.name for obs in units.values() for p in obs.pods.values() if p.live)
    strays = tuple(m for name in live for m in (members or {}).get(name, (name,)))
    actions: tuple[Action, ...] = (StopPods(strays),) if strays else ()
    return BatchDecision(
        status=new, actions=actions, write_status=new is not old, recorded=recorded or Recorded()
    )


def compact_status(status: KineticBatchStatus, cap: int = RANGE_CAP) -> KineticBatchStatus:
    """``status`` with each range string cut to ``cap`` characters at an item boundary,
    and ``truncated`` set when anything was cut.

    The manifest has the outcome ranges whole, and the operator keeps the
    active ones in memory; after a restart, inputs cut from ``activeIndexes``
    are found again through their Pods.
    """
    cut = False
    update: dict[str, Any] = {}
    for name in ("succeeded_indexes", "failed_indexes", "cancelled_indexes", "active_indexes"):
        text = getattr(status, name)
        if len(text) > cap:
            update[name] = text[: text.rfind(",", 0, cap)]
            cut = True
    if not cut:
        return status
    return status.model_copy(update={**update, "truncated": True})


def _phase(
    *,
    done: bool,
    old_phase: Phase,
    spec_cancel: bool,
    fail_fast: bool,
    counts: PhaseCounts,
    total: int,
    submissions: int,
) -> tuple[Phase, str]:
    """The batch phase and the reason behind it.

    Done: a user cancel ends CANCELLED (what the user asked for, even if
    some inputs had failed — the counts still say so); otherwise any failure
    ends FAILED; otherwise cancelled inputs (cancelled one by one) end
    CANCELLED; otherwise SUCCEEDED. Not done: PENDING until something has
    happened — a child running, or any outcome other than a submission
    failure — then RUNNING, and never back to PENDING.
    """
    if done:
        if spec_cancel:
            return Phase.CANCELLED, R_CANCELLED
        if counts.failed:
            return Phase.FAILED, R_FAIL_FAST if fail_fast else R_INPUTS_FAILED
        if counts.cancelled:
            return Phase.CANCELLED, R_CHILDREN_CANCELLED
        return Phase.SUCCEEDED, R_ALL_SUCCEEDED
    settled = counts.succeeded + counts.failed + counts.cancelled
    if old_phase is Phase.RUNNING or counts.running or settled > submissions:
        return Phase.RUNNING, R_RUNNING
    return Phase.PENDING, R_PENDING


def _message(
    phase: Phase, reason: str, c: PhaseCounts, total: int, fail_fast: bool, spec_cancel: bool
) -> str:
    summary = (
        f"{c.succeeded}/{total} succeeded, {c.failed} failed, {c.cancelled} cancelled, "
        f"{c.running} running, {c.pending} pending"
    )
    if phase is Phase.SUCCEEDED:
        return f"All {total} inputs succeeded."
    if phase is Phase.FAILED:
        head = "Stopped by fail-fast" if reason == R_FAIL_FAST else "Done with failures"
        return f"{head}: {summary}."
    if phase is Phase.CANCELLED:
        head = "Cancelled" if reason == R_CANCELLED else "Done, some inputs cancelled"
        return f"{head}: {summary}."
    if spec_cancel:
        return f"Cancelling: waiting for running inputs to stop; {summary}."
    if fail_fast:
        return f"An input failed and failFast is set: launching no more; {summary}."
    return f"{summary}."


def _conditions(
    old: list[Condition],
    phase: Phase,
    reason: str,
    running_reason: str,
    message: str,
    stamp: str,
) -> list[Condition]:
    """Running, Complete, Failed for this phase, then Ready, Reconciling and Stalled
    (kstatus, see `conditions`); other conditions are kept.

    Complete is True only when every input succeeded, Failed is True when
    the batch ended FAILED or CANCELLED (so ``kubectl wait
    --for=condition=Failed`` catches every unsuccessful end).
    ``lastTransitionTime`` moves only when a condition's status flips.
    """
    wanted = _wanted_conditions(phase, reason, running_reason)
    by_type = {c.type: c for c in old}
    out = [
        _flipped(by_type.get(ctype), ctype, cstatus, creason, message, stamp)
        for ctype, (cstatus, creason) in wanted.items()
    ]
    now_reason = running_reason if phase is Phase.RUNNING else reason
    out += readiness(old, phase, now_reason, message, stamp)
    out.extend(c for c in old if c.type not in wanted and c.type not in READINESS)
    return out


def _wanted_conditions(
    phase: Phase, reason: str, running_reason: str
) -> dict[str, tuple[str, str]]:
    """Running, Complete and Failed as ``(status, reason)`` for this phase."""
    if phase is Phase.PENDING:
        return {
            COND_RUNNING: ("False", R_PENDING),
            COND_COMPLETE: ("False", R_IN_PROGRESS),
            COND_FAILED: ("False", R_IN_PROGRESS),
        }
    if phase is Phase.RUNNING:
        return {
            COND_RUNNING: ("True", running_reason),
            COND_COMPLETE: ("False", R_IN_PROGRESS),
            COND_FAILED: ("False", R_IN_PROGRESS),
        }
    if phase is Phase.SUCCEEDED:
        return {
            COND_RUNNING: ("False", reason),
            COND_COMPLETE: ("True", reason),
            COND_FAILED: ("False", reason),
        }
    return {
        COND_RUNNING: ("False", reason),
        COND_COMPLETE: ("False", reason),
        COND_FAILED: ("True", reason),
    }


def _flipped(
    prev: Condition | None, ctype: str, cstatus: str, creason: str, message: str, stamp: str
) -> Condition:
    """The condition as wanted; its ``lastTransitionTime`` moves only if its status flips."""
    moved = prev is None or prev.status != cstatus
    return Condition(
        type=ctype,
        status=cstatus,  # type: ignore[arg-type]
        reason=creason,
        message=message,
        last_transition_time=stamp if moved else prev.last_transition_time,  # type: ignore[union-attr]
    )


def _events(
    *,
    old: KineticBatchStatus,
    new: KineticBatchStatus,
    spec: KineticBatchSpec,
    fresh: IndexSet,
    adopted: IndexSet,
    new_submission: IndexSet,
    newly_failed: IndexSet,
    fail_messages: list[str],
    unlaunched: IndexSet,
    cancelling: int,
    active: int,
    running_reason: str,
) -> list[Event]:
    """Events for what changed in this decision only, so reconciles never repeat them."""
    found = (
        _launching_event(old, new, spec, fresh),
        _adopted_event(adopted),
        _submission_event(spec, new_submission),
        _failed_event(newly_failed, fail_messages),
        _stopping_event(old, running_reason, unlaunched, cancelling, active),
        _ended_event(old, new),
    )
    return [e for e in found if e is not None]


def _launching_event(
    old: KineticBatchStatus, new: KineticBatchStatus, spec: KineticBatchSpec, fresh: IndexSet
) -> Event | None:
    """The first launch of the batch: how many inputs, and how many at a time."""
    if not fresh or old.launched != 0 or old.active_indexes:
        return None
    limit = (
        "all at once" if spec.max_concurrent is None else f"at most {spec.max_concurrent} at a time"
    )
    return Event("Normal", "Launching", f"Launching {new.total} inputs, {limit}.")


def _adopted_event(adopted: IndexSet) -> Event | None:
    """Pods found for inputs the status did not record (a lost status write)."""
    if not adopted:
        return None
    return Event(
        "Warning",
        "Adopted",
        f"Found Pods for inputs {adopted} that the status did not record; "
        "adopted them instead of launching them again.",
    )


def _submission_event(spec: KineticBatchSpec, new_submission: IndexSet) -> Event | None:
    """Inputs the client could not submit, with the first one's reason."""
    if not new_submission:
        return None
    first = next((f for f in spec.submission_failures if f.index == new_submission.min()), None)
    detail = f" Input {first.index}: {first.message}" if first else ""
    return Event(
        "Warning",
        "SubmissionFailed",
        f"{_inputs(new_submission)} could not be submitted and count as failed.{detail}",
    )


def _failed_event(newly_failed: IndexSet, fail_messages: list[str]) -> Event | None:
    """Inputs that failed in this decision, with the first failure's message."""
    if not newly_failed:
        return None
    detail = f" {fail_messages[0]}" if fail_messages else ""
    return Event("Warning", "InputsFailed", f"{_inputs(newly_failed)} failed.{detail}")


def _stopping_event(
    old: KineticBatchStatus, running_reason: str, unlaunched: IndexSet, cancelling: int, active: int
) -> Event | None:
    """The batch just stopped launching (a cancel, or fail-fast): what becomes of the rest."""
    old_running = next((c for c in old.conditions if c.type == COND_RUNNING), None)
    old_reason = old_running.reason if old_running else None
    if running_reason == old_reason or running_reason not in (R_FAIL_FAST, R_CANCELLING):
        return None
    return Event(
        "Warning" if running_reason == R_FAIL_FAST else "Normal",
        running_reason,
        _stopping_message(running_reason, unlaunched, cancelling, active),
    )


def _stopping_message(
    running_reason: str, unlaunched: IndexSet, cancelling: int, active: int
) -> str:
    """Why launching stopped, what never launched, and what is being cancelled or awaited."""
    what = (
        "Cancel requested"
        if running_reason == R_CANCELLING
        else "An input failed and failFast is set"
    )
    parts = [f"{what}: launching no more inputs"]
    if unlaunched:
        parts.append(f"{len(unlaunched)} never launched are counted cancelled")
    if cancelling:
        parts.append(f"cancelling {cancelling} running")
    elif active:
        parts.append(f"waiting for {active} running to finish")
    return "; ".join(parts) + "."


def _ended_event(old: KineticBatchStatus, new: KineticBatchStatus) -> Event | None:
    """The batch ended in this decision: Succeeded, Failed or Cancelled, with its message."""
    new_phase = Phase(new.phase)
    if not new_phase.terminal or new_phase is Phase(old.phase):
        return None
    kind = "Normal" if new_phase is Phase.SUCCEEDED else "Warning"
    reason = {Phase.SUCCEEDED: "Succeeded", Phase.FAILED: "Failed"}.get(new_phase, "Cancelled")
    return Event(kind, reason, new.message or "")  # type: ignore[arg-type]


def _inputs(indexes: IndexSet) -> str:
    return f"Input {indexes}" if len(indexes) == 1 else f"Inputs {indexes}"


def _timestamp(now: datetime) -> str:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- other outcomes


def invalid_batch(
    status: KineticBatchStatus | None,
    problems: list[str],
    now: datetime,
    *,
    generation: int | None = None,
    reason: str = R_INVALID_SPEC,
) -> BatchDecision:
    """A batch whose spec cannot run ends FAILED at once, launching nothing.

    A batch that already ended keeps its outcome: a spec that became
    unreadable later (someone edited it) must not rewrite history.
    ``reason`` is the Failed condition's and the Event's (``InvalidSpec``, or
    ``ManifestTampered`` when what it needs from storage was forged).
    """
    old = status if status is not None else KineticBatchStatus.model_validate({})
    if Phase(old.phase).terminal:
        return _settled(old, {}, generation)
    stamp = _timestamp(now)
    message = "Invalid batch: " + "; ".join(problems)
    new = old.model_copy(
        update={
            "phase": Phase.FAILED.value,
            "message": message,
            "completion_time": old.completion_time or stamp,
            "conditions": _conditions(old.conditions, Phase.FAILED, reason, reason, message, stamp),
            "observed_generation": generation
            if generation is not None
            else old.observed_generation,
        },
        deep=True,
    )
    return BatchDecision(
        status=new,
        actions=(Event("Warning", reason, message),),
        write_status=True,
    )


def with_condition(
    status: KineticBatchStatus,
    type_: str,
    value: Literal["True", "False", "Unknown"],
    reason: str,
    message: str,
    now: datetime,
) -> KineticBatchStatus:
    """``status`` with one condition set (others untouched).

    ``lastTransitionTime`` moves only when the condition's value flips, so
    setting the same condition on every reconcile changes nothing.
    """
    prev = next((c for c in status.conditions if c.type == type_), None)
    moved = prev is None or prev.status != value
    cond = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=_timestamp(now) if moved else prev.last_transition_time,  # type: ignore[union-attr]
    )
    if prev is not None and prev.wire() == cond.wire():
        return status
    if prev is None:
        conditions = [*status.conditions, cond]
    else:
        conditions = [cond if c.type == type_ else c for c in status.conditions]
    return status.model_copy(update={"conditions": conditions}, deep=True)


# --------------------------------------------------------------------------- immutability

MUTABLE_FIELDS = frozenset({"max_concurrent", "cancel", "cancel_indexes"})


def immutable_change(old: KineticBatchSpec, new: KineticBatchSpec) -> str | None:
    """A message for users when ``new`` changes anything but maxConcurrent, cancel or
    cancelIndexes.

    A batch's Pods are a function of its template and inputs; changing
    them midway would leave Pods built from two different specs under
    one group id. The message names every changed field, e.g. "spec.template
    cannot change on an existing batch (only spec.maxConcurrent and
    spec.cancel can): create a new batch instead".
    """
    changed = changed_fields(old, new)
    if not changed:
        return None
    return (
        f"{', '.join(changed)} cannot change on an existing batch (only spec.maxConcurrent, "
        "spec.cancel and spec.cancelIndexes can): create a new batch instead"
    )


def changed_fields(old: KineticBatchSpec, new: KineticBatchSpec) -> list[str]:
    """The fields (``spec.template``, ...) in which ``new`` differs from ``old``, the ones that
    may change on a running batch (maxConcurrent, cancel, cancelIndexes) left aside."""
    return [
        f"spec.{info.alias or name}"
        for name, info in KineticBatchSpec.model_fields.items()
        if name not in MUTABLE_FIELDS
        and _wire_value(getattr(old, name)) != _wire_value(getattr(new, name))
    ]


def merge_mutable(accepted: KineticBatchSpec, new: KineticBatchSpec) -> KineticBatchSpec:
    """``accepted`` with the mutable fields (maxConcurrent, cancel) taken from ``new``.

    What the operator acts on when someone changed an immutable field
    anyway: the change is refused (see `immutable_change`) but a cancel or a
    new limit in the same edit still takes effect.
    """
    return accepted.model_copy(update={f: getattr(new, f) for f in MUTABLE_FIELDS})


def _wire_value(value: Any) -> Any:
    if hasattr(value, "wire"):
        return value.wire()
    if isinstance(value, list):
        return [_wire_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _wire_value(v) for k, v in value.items()}
    return value
