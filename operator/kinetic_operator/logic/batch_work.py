"""A KineticBatch decision's vocabulary: what it reads, what it may ask for, and its working state.

`batch_logic.decide_batch` reads the observed units (`UnitObservation`) and the recorded outcomes
(`Recorded`), moves the sets of one `Work`, and answers with a `BatchDecision` whose actions
(`CreatePods`, `StopPods`, `WriteManifest`, `WriteStop`, `Event`) the handler carries out. They
live apart from the decision so the status and event steps (`batch_status`) share them without a
cycle. Pure: no API calls, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from kinetic.model.grid import Grid
from kinetic.model.progress import Mark, StopOrder
from kinetic.model.ranges import IndexSet, RangeError
from kinetic.model.resources import (
    AttemptRecord,
    KineticBatchSpec,
    KineticBatchStatus,
)

from kinetic_operator.logic.attempts import UnitPlan
from kinetic_operator.logic.gangs import Gang
from kinetic_operator.logic.observed import PodView
from kinetic_operator.logic.units import Sizing

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

    @property
    def unseen(self) -> bool:
        """This process created an attempt whose Pod the watch has not shown yet: it
        counts as starting (and holds its slot) until the watch catches up."""
        return self.creating is not None and self.creating not in self.pods


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
class Work:
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


def parse_ranges(text: str | None) -> IndexSet:
    """A range string we wrote; a cut one ends at a whole item, so it parses too."""
    try:
        return IndexSet.parse(text)
    except RangeError:
        return IndexSet()


def failing_fast(w: Work) -> bool:
    """An input failed and failFast is set: nothing new is launched."""
    return w.spec.fail_fast and bool(w.failed)


def running_reason(w: Work) -> str:
    """The Running condition's reason while the batch runs: why it launches no more, if so."""
    return R_CANCELLING if w.spec.cancel else R_FAIL_FAST if failing_fast(w) else R_RUNNING


def stop_order(w: Work) -> StopOrder | None:
    """What a sized batch's running units must not begin, while any may run."""
    if not w.sized or not (w.active - w.terminal):
        return None
    if w.spec.cancel or failing_fast(w):
        return StopOrder(everything=True)
    cancelled = parse_ranges(w.spec.cancel_indexes)
    return StopOrder(cancelled=cancelled) if cancelled else None
