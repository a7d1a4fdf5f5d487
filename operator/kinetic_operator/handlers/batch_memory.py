"""What the operator remembers about one KineticBatch between reconciles — caches only.

Never the truth: the accepted spec and the input hashes are re-read from
storage after a restart (as far as the status vouches for them), the
outcomes from the status and the manifest, the Pods from the watch. The
memory is grouped by what it caches, so each step of a reconcile touches
the one record it needs: the spec accepted and how it was checked
(`AcceptedSpec`), the Pods the watch cannot show (`UnitPods`), the outcomes
and the manifest book (`Outcomes`), and when to write or look again
(`Timers`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace

from kinetic.model import layout
from kinetic.model.names import parse_time
from kinetic.model.resources import AttemptRecord, KineticBatchSpec

from kinetic_operator.accepted import Stored
from kinetic_operator.handlers.batch_units import UnitProgress
from kinetic_operator.handlers.events import ObjectMemory, Wake
from kinetic_operator.logic.batch_logic import Recorded
from kinetic_operator.logic.manifest_records import Debouncer
from kinetic_operator.logic.observed import PodView
from kinetic_operator.manifest import ManifestBook


@dataclass
class AcceptedSpec:
    """The spec the batch was accepted with, and what it took to trust it.

    ``sha256`` is what status.acceptedSpecSHA256 says (or will, with the next
    status write); ``stored`` is the accepted spec read back from storage and
    checked, once per process (``stored_checked``). ``rerun`` is a fromBatch
    spec as first resolved, and ``hashes`` the input hash list, read once.
    """

    spec: KineticBatchSpec | None = None
    sha256: str | None = None
    stored: Stored | None = None
    stored_checked: bool = False
    rerun: KineticBatchSpec | None = None
    hashes: list[str | None] | None = None


@dataclass
class UnitPods:
    """Attempt Pods the watch does not show, by unit and attempt.

    ``creating``: created by this process and not seen yet (a lagging index
    is not a lost Pod). ``gone``: tombstones of Pods deleted before their
    outcome was recorded. ``refused``: Pods that could not be created, kept
    as failed attempts so the next decision spends a retry on them.
    ``settled``: the attempts a decision recorded as ended, by unit: their verdicts stand.
    """

    creating: dict[int, int] = field(default_factory=dict)  # unit -> attempt
    creating_names: dict[int, str] = field(default_factory=dict)  # unit -> its Pod's name
    gone: dict[int, dict[int, PodView]] = field(default_factory=dict)
    refused: dict[int, dict[int, PodView]] = field(default_factory=dict)
    creating_members: set[str] = field(default_factory=set)  # gang members, by Pod name
    members_gone: dict[int, dict[str, PodView]] = field(default_factory=dict)  # unit -> name
    settled: dict[int, dict[int, AttemptRecord]] = field(default_factory=dict)  # verdicts
    stopping: set[str] = field(default_factory=set)  # deleted here, not yet seen deleting

    def saw(self, view: PodView, deleted: bool) -> None:
        """A Pod event: a Pod being created is now seen; a deleted one leaves a tombstone."""
        assert view.index is not None  # only a unit's Pods are followed
        if self.creating.get(view.index) == view.attempt:
            del self.creating[view.index]
            self.creating_names.pop(view.index, None)
        self.creating_members.discard(view.name)
        if deleted or view.deleting or view.terminal:
            self.stopping.discard(view.name)
        if deleted and view.rank is not None:
            self.members_gone.setdefault(view.index, {})[view.name] = replace(view, gone=True)
        elif deleted:
            self.gone.setdefault(view.index, {})[view.attempt] = replace(view, gone=True)


@dataclass
class Outcomes:
    """The inputs' outcomes as recorded, and the manifest book that stores them.

    ``recorded``: the last decision's. ``extra``: those the status's cut
    ranges leave out. ``durable``: those in the manifest the status vouches
    for (the only ones whose Pods may be deleted). ``settled_seen``: settled
    units looked at once for a missing record; ``refused_reports``: chunk
    Pods whose report could not be trusted, and why.
    """

    recorded: Recorded = field(default_factory=Recorded)
    extra: Recorded | None = None
    durable: Recorded | None = None
    book: ManifestBook | None = None
    settled_seen: set[int] = field(default_factory=set)
    refused_reports: dict[str, str] = field(default_factory=dict)  # chunk Pod -> why

    def book_for(self, home: layout.Home) -> ManifestBook:
        """The batch's manifest book (opened on first use)."""
        if self.book is None:
            self.book = ManifestBook(home)
        return self.book


@dataclass
class Timers:
    """When to write and when to look again.

    ``debouncer``: when the manifest is next due. ``last_write``: the last
    routine status write (coalesced to one per status_interval). ``wake``:
    the look scheduled. ``expire_at``: no finished Pod is due for deletion
    before this. ``recheck``: a report could not be read for now.
    """

    debouncer: Debouncer = field(default_factory=Debouncer)
    last_write: float | None = None
    wake: Wake = field(default_factory=Wake)
    expire_at: float | None = None
    recheck: float | None = None


@dataclass
class Refills:
    """Slots freed by the batch's Pods' ends and not yet taken by a new Pod: when each
    freed, so that a create can say how long the slot it takes stood empty
    (`metrics.slot_refilled`). Only a Pod's first end counts, once."""

    freed: list[tuple[float, str]] = field(default_factory=list)  # (end, Pod name), oldest first
    counted: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # creates run in threads

    def saw(self, pods: Iterable[PodView]) -> None:
        """Note the ends of Pods seen ended for the first time (and forget Pods gone)."""
        present: set[str] = set()
        with self.lock:
            self._saw(pods, present)

    def _saw(self, pods: Iterable[PodView], present: set[str]) -> None:
        for pod in pods:
            present.add(pod.name)
            if pod.terminal and pod.finished_at and pod.name not in self.counted:
                self.counted.add(pod.name)
                self.freed.append((parse_time(pod.finished_at).timestamp(), pod.name))
        self.freed.sort()
        self.counted &= present | {name for _, name in self.freed}

    def taken(self, count: int, now: float) -> list[float]:
        """``count`` new Pods took the oldest freed slots: how long each stood empty."""
        with self.lock:
            taken, self.freed = self.freed[:count], self.freed[count:]
        return [now - end for end, _ in taken]


@dataclass
class BatchMemory(ObjectMemory):
    """What the operator remembers about one batch (``uid``) between reconciles."""

    uid: str | None = None
    accepted: AcceptedSpec = field(default_factory=AcceptedSpec)
    pods: UnitPods = field(default_factory=UnitPods)
    outcomes: Outcomes = field(default_factory=Outcomes)
    timers: Timers = field(default_factory=Timers)
    units: UnitProgress = field(default_factory=UnitProgress)  # a sized batch's progress
    refills: Refills = field(default_factory=Refills)

    def forget(self, uid: str | None) -> None:
        """A batch of the same name but another uid: nothing remembered applies to it."""
        fresh = BatchMemory(uid=uid, body=self.body)
        for known in fields(self):
            setattr(self, known.name, getattr(fresh, known.name))
