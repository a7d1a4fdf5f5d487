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
attempt planner as a KineticJob's (`kinetic_operator.logic.attempts`): retries
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
from dataclasses import replace
from datetime import datetime, timedelta

from kinetic.model.batchjobs import batch_total, retries_of
from kinetic.model.grid import Grid
from kinetic.model.limits import DEFAULT_MAX_DISRUPTIONS
from kinetic.model.names import input_pod_name
from kinetic.model.progress import Mark
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    AttemptRecord,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
)

from kinetic_operator.logic import gangs
from kinetic_operator.logic.attempts import ENDED, Limits, UnitOutcome, UnitPlan, plan_unit
from kinetic_operator.logic.batch_changes import (
    MUTABLE_FIELDS,
    changed_fields,
    immutable_change,
    merge_mutable,
)
from kinetic_operator.logic.batch_status import (
    _actions,
    _runs,
    _settled,
    _status,
    compact_status,
    invalid_batch,
    with_condition,
)
from kinetic_operator.logic.batch_work import (
    Action,
    BatchDecision,
    CreatePods,
    Event,
    Recorded,
    StopPods,
    UnitObservation,
    Work,
    WriteManifest,
    WriteStop,
    failing_fast,
    parse_ranges,
    unit_inputs,
)
from kinetic_operator.logic.unit_sizing import size_next_unit, units_to_create
from kinetic_operator.logic.units import (
    InputState,
    Sizing,
    UnitLimits,
    UnitStep,
    running_input,
    units_sized,
)
from kinetic_operator.logic.units import plan_unit as plan_sized_unit

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
) -> Work:
    """The working sets: what the status recorded, plus what the manifest adds."""
    known = Recorded(
        parse_ranges(old.succeeded_indexes),
        parse_ranges(old.failed_indexes),
        parse_ranges(old.cancelled_indexes),
    )
    if extra is not None:
        known = known.union(extra)
    return Work(
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
        active=(parse_ranges(old.active_indexes) | known.active) - known.terminal,
        launched=old.launched,
    )


def _record_submissions(w: Work) -> IndexSet:
    """Inputs the client could not package are failures from the start."""
    listed = IndexSet(f.index for f in w.spec.submission_failures if f.index < w.total)
    new = listed - w.terminal
    w.failed = w.failed | new
    w.active = w.active - new
    return new


def _record_cancel_requests(w: Work) -> None:
    """Inputs named in spec.cancelIndexes end cancelled now, launched or not."""
    asked = parse_ranges(w.spec.cancel_indexes) & IndexSet.range(0, w.total)
    new = asked - w.terminal
    w.cancelled = w.cancelled | new


def _cancel_running(w: Work) -> bool:
    failing = w.spec.fail_fast and bool(w.failed) and w.spec.cancel_running_on_fail
    return w.spec.cancel or failing


def _follow_units(w: Work, units: Mapping[int, UnitObservation], *, cancel_all: bool) -> None:
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
    w: Work,
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
    stopped = cancel_all or w.spec.cancel or failing_fast(w)
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
    _record_sized_inputs(w, step, open_inputs, ended, running)
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


def _record_sized_inputs(
    w: Work,
    step: UnitStep,
    open_inputs: IndexSet,
    ended: dict[str, list[IndexSet]],
    running: list[IndexSet],
) -> None:
    """Each open input of a sized unit: its plan, and its outcome if it ended or runs."""
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


def _exits_by_itself(w: Work, obs: UnitObservation, cancel_all: bool) -> bool:
    """A sized unit whose inputs are all recorded, its Pod about to exit on its own (its
    marks say it ended them): left to exit, holding its slot until it has. Stopped
    instead when the batch cancels what runs, or the input it runs was cancelled."""
    if cancel_all or obs.unseen:
        return False
    pod = obs.pods.get(max(obs.pods, default=0))
    return pod is not None and not _running_cancelled(w, obs, pod.attempt)


def _running_cancelled(w: Work, obs: UnitObservation, attempt: int) -> list[str]:
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


def _settled_strays(w: Work, unit: int, obs: UnitObservation) -> list[str]:
    """The Pods of a settled unit still live, or still being created (by the name it was
    created under: someone else's Pod may hold the one it was meant to have)."""
    strays = [p.name for p in obs.pods.values() if p.live]
    if obs.unseen and obs.creating_name:
        strays.append(obs.creating_name)
    return strays


def _stop(w: Work, stopping: set[str], pods: Sequence[str]) -> None:
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
    """Each multi-host unit's members as one view per attempt (`kinetic_operator.logic.gangs`),
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
    """Each gang attempt's name -> its live member Pods: what stopping that attempt deletes
    (`Gang.members_named`, as a KineticJob asks it; an attempt none of whose members was
    created has none)."""
    return {
        view.name: obs.gang.members_named(view.name) or ()
        for obs in units.values()
        if obs.gang is not None
        for view in obs.pods.values()
    }


def _follow_gangs(w: Work, units: Mapping[int, UnitObservation]) -> None:
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


def _plan(w: Work, unit: int, obs: UnitObservation, *, cancel_all: bool) -> UnitPlan:
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


def _follow_plan(w: Work, unit: int, plan: UnitPlan, stopping: set[str]) -> None:
    """Keep the unit's plan, and take its Pods to stop and to create."""
    w.plans[unit] = plan
    _stop(w, stopping, plan.stop)
    if plan.create is not None and (unit, plan.create) not in w.creates:
        w.creates.append((unit, plan.create))


def _merge_outcomes(w: Work, running: list[IndexSet], ended: dict[str, list[IndexSet]]) -> None:
    """Merge what one pass found into the working sets, once."""
    w.running = w.running.union(*running)
    w.succeeded = w.succeeded.union(*ended["succeeded"])
    w.failed = w.failed.union(*ended["failed"])
    w.newly_failed = w.newly_failed.union(*ended["failed"])
    w.cancelled = w.cancelled.union(*ended["cancelled"])
    done = IndexSet().union(*ended["succeeded"], *ended["failed"], *ended["cancelled"])
    w.active = w.active - done


def _record_unit(
    w: Work, plan: UnitPlan, open_inputs: IndexSet, ended: dict[str, list[IndexSet]]
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
            ok = ok | parse_ranges(report["succeeded"])
    return ok


def _adopt(w: Work, units: Mapping[int, UnitObservation]) -> None:
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
    w: Work, max_launches: int | None, units: Mapping[int, UnitObservation]
) -> tuple[IndexSet, IndexSet, bool]:
    """Reserve new units up to maxConcurrent, or, when stopping, cancel what never ran.

    Returns the inputs reserved now, the inputs cancelled because they never
    ran, and whether ``max_launches`` held launches back.
    """
    terminal = w.terminal
    unlaunched = IndexSet.range(0, w.total) - terminal - w.active
    if w.spec.cancel or failing_fast(w):
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
    w: Work, wanted: int, max_launches: int | None, units: Mapping[int, UnitObservation]
) -> tuple[int, bool]:
    """How many units may be launched now, and whether ``max_launches`` held some back."""
    slots = wanted
    if w.spec.max_concurrent is not None:
        slots = min(slots, max(0, w.spec.max_concurrent - len(_held_units(w, units))))
    if max_launches is not None and slots > max_launches:
        return max_launches, True
    return slots, False


def _held_units(w: Work, units: Mapping[int, UnitObservation]) -> set[int]:
    """Units holding a slot: every active unit, and every unit with a Pod still live or
    being created (the Pod of a cancelled input holds its slot until it stops)."""
    return {w.unit_of(i) for i in w.active} | {
        u for u, obs in units.items() if u < w.total and (obs.unseen or obs.live)
    }


def _pick_units(w: Work, unlaunched: IndexSet, slots: int) -> list[int]:
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


def _starts(obs: UnitObservation) -> bool:
    """Whether a unit's Pod is starting: created (the watch may not show it yet) and not
    running. Counting the ones not yet seen keeps the pacing when reconciles come faster
    than the watch."""
    return obs.unseen or (obs.live and not _runs(obs))


def _pick_sized_units(
    w: Work,
    sizing: Sizing,
    unlaunched: IndexSet,
    slots: int,
    units: Mapping[int, UnitObservation],
) -> list[int]:
    """New units from the first inputs not launched yet, each sized now
    (`unit_sizing.size_next_unit`: about the target's work, never more than its share of
    what is left), as many as may start at once (`unit_sizing.units_to_create`); each
    extends the grid past every unit launched so far."""
    starting = sum(1 for obs in units.values() if _starts(obs))
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
