"""The KineticBatch controller's decisions, as pure functions.

`decide_batch` takes what the operator knows — the batch spec, the batch
status as last written, and what it has observed of the children — and
returns the status to write and the actions to take. It performs no I/O, so
every rule below is unit-tested without a cluster, and the handler layer
stays a thin loop:

1. Read the batch (spec, status, ``metadata.resourceVersion``) and the
   children of this batch from the Kopf index (`observe_child` turns a child
   body into a `ChildObservation`).
2. ``d = decide_batch(spec, status, children, now, generation=...)``.
3. If ``d.write_status``: PATCH the status subresource with
   ``metadata.resourceVersion`` set to the version the status was read at.
   On 409 Conflict stop here and retry from step 1 — the decision was made
   on stale data and none of its actions may run.
4. Only then run ``d.actions`` in order: `WriteManifest` (when ``blocking``,
   a failed write stops here and the reconcile is retried, so no child is
   created before the manifest exists), `Launch` (create each child;
   AlreadyExists is success), `Cancel` (set ``spec.cancel: true`` on each
   child), `Event`.

Why reserve-then-create is safe
-------------------------------

A launch is first *reserved*: the index enters ``status.activeIndexes`` and
the high-water mark ``status.launched`` moves, and that status is written
conditionally before any child is created. Hence:

* Two reconciles racing on the same status version both reserve the same
  indexes; only one write succeeds, the other gets 409 and creates nothing.
  No stale decision can push the number of active children past
  ``maxConcurrent``.
* A crash after the reserve and before the create leaves an index active
  whose child does not exist and was never observed; every decision asks to
  create such children again (`Launch` covers both), and since a child's
  name is ``<batch>-<index>`` a create that already happened just returns
  AlreadyExists. Nothing runs twice.
* An index recorded in ``succeededIndexes``/``failedIndexes``/
  ``cancelledIndexes`` is never launched again, so a child deleted by cleanup
  (whose outcome was recorded) is never relaunched. Clients must only delete
  a child once its index is recorded terminal in the batch status.

A child that disappears while it was non-terminal (someone deleted it; the
handler passes ``present=False`` with its last phase) is recorded cancelled,
not relaunched: it may have been running, and running an input twice is
worse than reporting it cancelled.

Fail-fast (the upstream table, exactly)
---------------------------------------

A *failure* is a child that ended FAILED (its retries are exhausted — retries
are entirely the child's business) or an input listed in
``spec.submissionFailures`` (recorded failed from the first decision).

========= ===================== =============================================
failFast  cancelRunningOnFail   on the first failure
========= ===================== =============================================
false     false                 everything continues; the batch ends FAILED
true      false                 nothing new is launched, running children
                                finish; the batch ends FAILED
true      true                  nothing new is launched, running children are
                                cancelled; the batch ends FAILED
false     true                  no effect: same as the first row
========= ===================== =============================================

Inputs never launched because of fail-fast or ``spec.cancel`` are recorded
cancelled at once. ``spec.cancel: true`` stops launching, cancels every
non-terminal child and ends the batch CANCELLED once they are done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from kinetic.fanout import input_count
from kinetic.ranges import IndexSet
from kinetic.resources import (
    LABEL_INDEX,
    Condition,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
    PhaseCounts,
)

__all__ = [
    "Action",
    "BatchDecision",
    "Cancel",
    "ChildObservation",
    "Event",
    "Launch",
    "MUTABLE_FIELDS",
    "WriteManifest",
    "decide_batch",
    "immutable_change",
    "invalid_batch",
    "merge_mutable",
    "observe_child",
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
R_CHILDREN_CANCELLED = "ChildrenCancelled"
R_INVALID_SPEC = "InvalidSpec"


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class ChildObservation:
    """What the operator last saw of one child KineticJob.

    ``present=False`` is a tombstone: the child was seen and then deleted
    (``phase`` is its last phase). A child never seen at all has no entry.
    """

    phase: Phase | str = Phase.PENDING
    present: bool = True
    attempts: int = 0
    cancel_requested: bool = False
    message: str | None = None

    @property
    def phase_enum(self) -> Phase:
        return Phase(self.phase)


def observe_child(body: Mapping[str, Any]) -> tuple[int, ChildObservation] | None:
    """``(index, observation)`` from a child KineticJob body, for a Kopf index.

    Returns None for an object without a valid ``kinetic.dev/index`` label
    (not a batch child, or tampered with), so the index simply skips it.
    """
    labels = (body.get("metadata") or {}).get("labels") or {}
    raw = labels.get(LABEL_INDEX)
    if not isinstance(raw, str) or not raw.isdigit() or (len(raw) > 1 and raw[0] == "0"):
        return None
    status = body.get("status") or {}
    try:
        phase = Phase(status.get("phase") or Phase.PENDING)
    except ValueError:
        phase = Phase.PENDING
    attempts = status.get("attempt")
    return int(raw), ChildObservation(
        phase=phase,
        present=True,
        attempts=attempts if isinstance(attempts, int) and attempts >= 0 else 0,
        cancel_requested=bool((body.get("spec") or {}).get("cancel")),
        message=status.get("message"),
    )


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Launch:
    """Make sure the children for ``indexes`` exist (create; AlreadyExists is fine).

    Holds fresh launches (already reserved in the returned status) and
    re-creations of reserved children that were never seen.
    """

    indexes: IndexSet


@dataclass(frozen=True)
class Cancel:
    """Set ``spec.cancel: true`` on the children for ``indexes`` (they exist)."""

    indexes: IndexSet


@dataclass(frozen=True)
class WriteManifest:
    """The manifest is out of date.

    ``urgent``: write now, bypassing the debounce (first write, or the batch
    just ended). ``blocking``: the `Launch` after it must not run until this
    write has succeeded (the manifest exists before the first child does).
    """

    urgent: bool = False
    blocking: bool = False


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the batch, for ``kubectl describe``."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = Launch | Cancel | WriteManifest | Event


@dataclass(frozen=True)
class BatchDecision:
    """The outcome of one reconcile.

    ``status``: the status to write. ``write_status``: a conditional status
    write is required before any action (the status changed, or children
    are to be created — a create must never run on a stale status).
    ``more``: launches were held back by ``max_launches``; reconcile again
    soon.
    """

    status: KineticBatchStatus
    actions: tuple[Action, ...]
    write_status: bool
    more: bool = False

    def of(self, kind: type) -> list[Any]:
        """The actions of one kind, in order (handy in handlers and tests)."""
        return [a for a in self.actions if isinstance(a, kind)]

    @property
    def launch(self) -> IndexSet:
        """All indexes to create in this decision."""
        return IndexSet().union(*(a.indexes for a in self.of(Launch)))

    @property
    def cancel(self) -> IndexSet:
        """All indexes to cancel in this decision."""
        return IndexSet().union(*(a.indexes for a in self.of(Cancel)))


# --------------------------------------------------------------------------- decision


def decide_batch(
    spec: KineticBatchSpec,
    status: KineticBatchStatus | None,
    children: Mapping[int, ChildObservation],
    now: datetime,
    *,
    generation: int | None = None,
    max_launches: int | None = None,
) -> BatchDecision:
    """Decide what a batch does next; see the module docstring for the rules.

    ``children`` maps index -> observation for every child the operator
    knows of. ``max_launches`` caps how many children one decision creates,
    so a 100k-input batch with ``maxConcurrent: null`` is created in bounded
    steps (``more`` is then True). Raises `kinetic.ranges.RangeError` only
    when the status holds a malformed range, which the operator never
    writes.
    """
    old = status if status is not None else KineticBatchStatus.model_validate({})
    stamp = _timestamp(now)
    total = input_count(spec.inputs)
    everything = IndexSet.range(0, total)

    succeeded = IndexSet.parse(old.succeeded_indexes)
    failed = IndexSet.parse(old.failed_indexes)
    cancelled = IndexSet.parse(old.cancelled_indexes)
    active = IndexSet.parse(old.active_indexes)
    launched = old.launched
    old_phase = Phase(old.phase)
    old_terminal = succeeded | failed | cancelled

    if old_phase.terminal:
        return _settled(old, children, generation)

    # 1. Record outcomes: submission failures, then what children reached.
    submission = IndexSet(f.index for f in spec.submission_failures if f.index < total)
    recorded = succeeded | failed | cancelled
    new_submission = submission - recorded
    failed = failed | new_submission
    recorded = recorded | new_submission

    ended: dict[Phase, list[int]] = {Phase.SUCCEEDED: [], Phase.FAILED: [], Phase.CANCELLED: []}
    adopt: list[int] = []
    fail_messages: list[str] = []
    for index, obs in children.items():
        if not 0 <= index < total or index in recorded:
            continue
        phase = obs.phase_enum
        if phase.terminal:
            ended[phase].append(index)
            if phase is Phase.FAILED and len(fail_messages) < 1:
                fail_messages.append(_failure_text(index, obs))
        elif not obs.present:
            ended[Phase.CANCELLED].append(index)  # deleted while running: never rerun
        elif index not in active:
            adopt.append(index)
    newly_failed = IndexSet(ended[Phase.FAILED])
    succeeded = succeeded | ended[Phase.SUCCEEDED]
    failed = failed | newly_failed
    cancelled = cancelled | ended[Phase.CANCELLED]
    adopted = IndexSet(adopt)
    active = (active | adopted) - (succeeded | failed | cancelled)
    if adopted:
        launched = max(launched, adopted.max() + 1)  # type: ignore[operator]

    # 2. Stop or launch.
    fail_fast = spec.fail_fast and bool(failed)
    stopping = spec.cancel or fail_fast
    cancel_running = spec.cancel or (fail_fast and spec.cancel_running_on_fail)
    cancel_now: list[int] = []
    never_created: list[int] = []
    fresh = IndexSet()
    more = False
    terminal = succeeded | failed | cancelled
    unlaunched = everything - terminal - active

    if stopping:
        cancelled = cancelled | unlaunched
        if cancel_running:
            for index in active:
                seen = children.get(index)
                if seen is None:
                    never_created.append(index)  # reserved, never seen: it never ran
                elif not seen.cancel_requested:
                    cancel_now.append(index)
            cancelled = cancelled | never_created
            active = active - never_created
    else:
        slots = len(unlaunched)
        if spec.max_concurrent is not None:
            slots = min(slots, max(0, spec.max_concurrent - len(active)))
        if max_launches is not None and slots > max_launches:
            slots, more = max_launches, True
        fresh = unlaunched.first(slots)
        if fresh:
            active = active | fresh
            launched = max(launched, fresh.max() + 1)  # type: ignore[operator]

    terminal = succeeded | failed | cancelled
    # Present, non-terminal children whose index is already settled (a child
    # that showed up after its index was recorded cancelled): stop them.
    strays = [
        i
        for i, obs in children.items()
        if obs.present
        and not obs.phase_enum.terminal
        and not obs.cancel_requested
        and i in terminal
        and (i < total)
    ]
    cancel_set = IndexSet(cancel_now) | strays
    recreate = IndexSet(i for i in active - fresh if i not in children)
    to_create = fresh | recreate

    # 3. Status.
    running = sum(1 for i in active if i in children and children[i].phase_enum is Phase.RUNNING)
    counts = PhaseCounts(
        succeeded=len(succeeded),
        failed=len(failed),
        cancelled=len(cancelled),
        running=running,
        pending=total - len(terminal) - running,
    )
    done = len(terminal) == total and not active
    phase, reason = _phase(
        done=done,
        old_phase=old_phase,
        spec_cancel=spec.cancel,
        fail_fast=fail_fast,
        counts=counts,
        total=total,
        submissions=len(submission),
    )
    running_reason = R_CANCELLING if spec.cancel else R_FAIL_FAST if fail_fast else R_RUNNING
    message = _message(phase, reason, counts, total, fail_fast, spec.cancel)
    new = old.model_copy(
        update={
            "phase": phase.value,
            "total": total,
            "counts": counts,
            "progress": f"{counts.succeeded}/{total}",
            "launched": launched,
            "active_indexes": str(active),
            "succeeded_indexes": str(succeeded),
            "failed_indexes": str(failed),
            "cancelled_indexes": str(cancelled),
            "start_time": old.start_time or (stamp if (fresh or adopted) else None),
            "completion_time": old.completion_time or (stamp if phase.terminal else None),
            "message": message,
            "conditions": _conditions(
                old.conditions, phase, reason, running_reason, message, stamp
            ),
            "observed_generation": generation
            if generation is not None
            else old.observed_generation,
        },
        deep=True,
    )

    # 4. Actions, in the order they must run.
    actions: list[Action] = []
    manifest_missing = old.manifest_uri is None
    manifest_dirty = (
        bool(fresh)
        or bool(adopted)
        or terminal != old_terminal
        or phase is not old_phase
        or (manifest_missing and bool(to_create))
    )
    blocking = manifest_missing and bool(to_create)
    if manifest_dirty and blocking:
        actions.append(WriteManifest(urgent=True, blocking=True))
    if to_create:
        actions.append(Launch(to_create))
    if cancel_set:
        actions.append(Cancel(cancel_set))
    if manifest_dirty and not blocking:
        actions.append(WriteManifest(urgent=phase.terminal or manifest_missing))
    actions.extend(
        _events(
            old=old,
            new=new,
            spec=spec,
            fresh=fresh,
            adopted=adopted,
            new_submission=new_submission,
            newly_failed=newly_failed,
            fail_messages=fail_messages,
            unlaunched=unlaunched if stopping else IndexSet(),
            cancelling=len(cancel_set),
            active=len(active),
            running_reason=running_reason,
        )
    )
    changed = new.wire() != old.wire()
    return BatchDecision(
        status=new, actions=tuple(actions), write_status=changed or bool(to_create), more=more
    )


def _settled(
    old: KineticBatchStatus,
    children: Mapping[int, ChildObservation],
    generation: int | None,
) -> BatchDecision:
    """A finished batch changes no more; it only stops strays that show up late."""
    new = old
    if generation is not None and generation != old.observed_generation:
        new = old.model_copy(update={"observed_generation": generation})
    strays = IndexSet(
        i
        for i, obs in children.items()
        if obs.present and not obs.phase_enum.terminal and not obs.cancel_requested
    )
    actions: tuple[Action, ...] = (Cancel(strays),) if strays else ()
    return BatchDecision(status=new, actions=actions, write_status=new is not old)


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
    ends FAILED; otherwise cancelled children (cancelled one by one) end
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
        return f"Cancelling: waiting for running children to stop; {summary}."
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
    """Running, Complete, Failed for this phase; other conditions are kept.

    Complete is True only when every input succeeded, Failed is True when
    the batch ended FAILED or CANCELLED (so ``kubectl wait
    --for=condition=Failed`` catches every unsuccessful end).
    ``lastTransitionTime`` moves only when a condition's status flips.
    """
    if phase is Phase.PENDING:
        wanted = {
            COND_RUNNING: ("False", R_PENDING),
            COND_COMPLETE: ("False", R_IN_PROGRESS),
            COND_FAILED: ("False", R_IN_PROGRESS),
        }
    elif phase is Phase.RUNNING:
        wanted = {
            COND_RUNNING: ("True", running_reason),
            COND_COMPLETE: ("False", R_IN_PROGRESS),
            COND_FAILED: ("False", R_IN_PROGRESS),
        }
    elif phase is Phase.SUCCEEDED:
        wanted = {
            COND_RUNNING: ("False", reason),
            COND_COMPLETE: ("True", reason),
            COND_FAILED: ("False", reason),
        }
    else:
        wanted = {
            COND_RUNNING: ("False", reason),
            COND_COMPLETE: ("False", reason),
            COND_FAILED: ("True", reason),
        }
    by_type = {c.type: c for c in old}
    out: list[Condition] = []
    for ctype, (cstatus, creason) in wanted.items():
        prev = by_type.get(ctype)
        moved = prev is None or prev.status != cstatus
        out.append(
            Condition(
                type=ctype,
                status=cstatus,  # type: ignore[arg-type]
                reason=creason,
                message=message,
                last_transition_time=stamp if moved else prev.last_transition_time,  # type: ignore[union-attr]
            )
        )
    out.extend(c for c in old if c.type not in wanted)
    return out


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
    events: list[Event] = []
    if fresh and old.launched == 0 and not old.active_indexes:
        limit = (
            "all at once"
            if spec.max_concurrent is None
            else f"at most {spec.max_concurrent} at a time"
        )
        events.append(Event("Normal", "Launching", f"Launching {new.total} inputs, {limit}."))
    if adopted:
        events.append(
            Event(
                "Warning",
                "Adopted",
                f"Found children for inputs {adopted} that the status did not record; "
                "adopted them instead of launching them again.",
            )
        )
    if new_submission:
        first = next((f for f in spec.submission_failures if f.index == new_submission.min()), None)
        detail = f" Input {first.index}: {first.message}" if first else ""
        events.append(
            Event(
                "Warning",
                "SubmissionFailed",
                f"{_inputs(new_submission)} could not be submitted and count as failed.{detail}",
            )
        )
    if newly_failed:
        detail = f" {fail_messages[0]}" if fail_messages else ""
        events.append(Event("Warning", "InputsFailed", f"{_inputs(newly_failed)} failed.{detail}"))
    old_running = next((c for c in old.conditions if c.type == COND_RUNNING), None)
    old_reason = old_running.reason if old_running else None
    if running_reason != old_reason and running_reason in (R_FAIL_FAST, R_CANCELLING):
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
        events.append(
            Event(
                "Warning" if running_reason == R_FAIL_FAST else "Normal",
                running_reason,
                "; ".join(parts) + ".",
            )
        )
    new_phase = Phase(new.phase)
    if new_phase.terminal and new_phase is not Phase(old.phase):
        kind = "Normal" if new_phase is Phase.SUCCEEDED else "Warning"
        reason = {Phase.SUCCEEDED: "Succeeded", Phase.FAILED: "Failed"}.get(new_phase, "Cancelled")
        events.append(Event(kind, reason, new.message or ""))  # type: ignore[arg-type]
    return events


def _inputs(indexes: IndexSet) -> str:
    return f"Input {indexes}" if len(indexes) == 1 else f"Inputs {indexes}"


def _failure_text(index: int, obs: ChildObservation) -> str:
    tries = (
        f" after {obs.attempts} attempt{'s' if obs.attempts != 1 else ''}" if obs.attempts else ""
    )
    why = f": {obs.message}" if obs.message else ""
    return f"Input {index} failed{tries}{why}"


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
) -> BatchDecision:
    """A batch whose spec cannot run ends FAILED at once, launching nothing.

    A batch that already ended keeps its outcome: a spec that became
    unreadable later (someone edited it) must not rewrite history.
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
            "conditions": _conditions(
                old.conditions, Phase.FAILED, R_INVALID_SPEC, R_INVALID_SPEC, message, stamp
            ),
            "observed_generation": generation
            if generation is not None
            else old.observed_generation,
        },
        deep=True,
    )
    return BatchDecision(
        status=new,
        actions=(Event("Warning", R_INVALID_SPEC, message),),
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

MUTABLE_FIELDS = frozenset({"max_concurrent", "cancel"})


def immutable_change(old: KineticBatchSpec, new: KineticBatchSpec) -> str | None:
    """A message for users when ``new`` changes anything but maxConcurrent or cancel.

    A batch's children are a function of its template and inputs; changing
    them midway would leave children built from two different specs under
    one group id. The message names every changed field, e.g. "spec.template
    cannot change on an existing batch (only spec.maxConcurrent and
    spec.cancel can): create a new batch instead".
    """
    changed = [
        f"spec.{info.alias or name}"
        for name, info in KineticBatchSpec.model_fields.items()
        if name not in MUTABLE_FIELDS
        and _wire_value(getattr(old, name)) != _wire_value(getattr(new, name))
    ]
    if not changed:
        return None
    return (
        f"{', '.join(changed)} cannot change on an existing batch (only spec.maxConcurrent "
        "and spec.cancel can): create a new batch instead"
    )


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
