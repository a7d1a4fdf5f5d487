"""A KineticBatch decision's last step: the status, conditions and events it leaves behind.

`batch_logic.decide_batch` follows the units; this module turns what it found (`Work`) into
the counts, ranges, phase, message and conditions of the new status and the Events that report
the change, and writes the outcomes that need no units (`invalid_batch`, `with_condition`).
Pure: the time comes in on `Work.now`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    Condition,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
    PhaseCounts,
    UnitDurations,
)

from kinetic_operator.logic.batch_work import (
    COND_COMPLETE,
    COND_FAILED,
    COND_RUNNING,
    R_ALL_SUCCEEDED,
    R_CANCELLED,
    R_CANCELLING,
    R_CHILDREN_CANCELLED,
    R_FAIL_FAST,
    R_IN_PROGRESS,
    R_INPUTS_FAILED,
    R_INVALID_SPEC,
    R_PENDING,
    R_RUNNING,
    RANGE_CAP,
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
    running_reason,
    stop_order,
)
from kinetic_operator.logic.conditions import READINESS, readiness
from kinetic_operator.logic.unit_sizing import observe


def _runs(obs: UnitObservation) -> bool:
    """Whether a unit's Pod runs (rather than starts)."""
    return any(p.live and p.phase == "Running" for p in obs.pods.values())


def _status(
    w: Work, old: KineticBatchStatus, generation: int | None, fresh: IndexSet
) -> KineticBatchStatus:
    """Counts, ranges, phase, message and conditions as this decision leaves the batch."""
    stamp = _timestamp(w.now)
    terminal = w.terminal
    counts = _counts(w)
    phase, reason = _batch_phase(w, old, counts)
    message = _message(phase, reason, counts, w.total, failing_fast(w), w.spec.cancel)
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
                old.conditions, phase, reason, running_reason(w), message, stamp
            ),
            "observed_generation": generation
            if generation is not None
            else old.observed_generation,
            **_sizing_status(w),
        },
        deep=True,
    )


def _sizing_status(w: Work) -> dict[str, Any]:
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


def _counts(w: Work) -> PhaseCounts:
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


def _batch_phase(w: Work, old: KineticBatchStatus, counts: PhaseCounts) -> tuple[Phase, str]:
    """The phase and its reason: done once every input is settled and nothing is left to start."""
    terminal = w.terminal
    submissions = sum(1 for f in w.spec.submission_failures if f.index < w.total)
    done = len(terminal) == w.total and not (w.active - terminal) and not w.creates
    return _phase(
        done=done,
        old_phase=Phase(old.phase),
        spec_cancel=w.spec.cancel,
        fail_fast=failing_fast(w),
        counts=counts,
        total=w.total,
        submissions=submissions,
    )


def _actions(
    w: Work,
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
    order = stop_order(w)
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
            running_reason=running_reason(w),
        )
    )
    return actions


def _manifest_stale(
    w: Work, old: KineticBatchStatus, old_recorded: Recorded, phase: Phase, fresh: IndexSet
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
