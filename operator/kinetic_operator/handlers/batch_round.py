"""One reconcile of a KineticBatch: the batch as read, the decision taken, and how both are written.

`batches` runs a round in steps (load, accept, observe, decide, record, act); each step reads
and fills the objects here. The status is written conditionally on the resourceVersion the
round holds (`StatusWriter`), always vouching for what is stored (`vouching`), and the manifest
is written as the batch stands (`ManifestWrite`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinetic.model import layout
from kinetic.model.batchjobs import batch_total, is_container
from kinetic.model.manifest import Anchor
from kinetic.model.resources import (
    BATCH_KIND,
    BATCH_PLURAL,
    KineticBatchSpec,
    KineticBatchStatus,
)

from kinetic_operator import metrics
from kinetic_operator.handlers.batch_memory import BatchMemory
from kinetic_operator.kube import Kube
from kinetic_operator.logic import podspec
from kinetic_operator.logic.batch_logic import (
    BatchDecision,
    Event,
    Recorded,
    UnitObservation,
    with_condition,
)
from kinetic_operator.logic.manifest_records import build_header, recorded_from
from kinetic_operator.logic.policy import Policy
from kinetic_operator.logic.units import units_sized
from kinetic_operator.manifest import ManifestBook
from kinetic_operator.settings import OperatorSettings

log = logging.getLogger("kinetic.operator")


COND_MANIFEST = "ManifestWritten"


@dataclass
class Batch:
    """One round's copy of the batch, and what the round talks to."""

    kube: Kube
    settings: OperatorSettings
    mem: BatchMemory
    namespace: str
    name: str
    body: dict[str, Any]
    meta: dict[str, Any]
    raw: dict[str, Any]  # the status as read
    old: KineticBatchStatus  # the same, parsed
    write: StatusWriter
    home: layout.Home
    fresh: bool  # the copy was just read from the API server
    now: datetime
    policy: Policy | None

    @property
    def uid(self) -> str | None:
        return self.meta.get("uid")

    @property
    def owner(self) -> podspec.Owner:
        return podspec.Owner(self.name, self.namespace, self.uid or "", BATCH_KIND)

    @property
    def generation(self) -> int | None:
        return self.meta.get("generation")

    def post(self, events: Iterable[Event]) -> None:
        """Post ``events`` about the batch."""
        for event in events:
            self.kube.post_event(self.body, event.type, event.reason, event.message)


@dataclass(frozen=True)
class Accepted:
    """The spec to act on, the immutable change refused, if someone made one, and the hosts
    each unit's attempts run on (`batch_pods.unit_hosts`), resolved once at acceptance."""

    spec: KineticBatchSpec
    refused: str | None
    hosts: Callable[[int], int]


@dataclass
class Decided:
    """What the round decided, and what it writes it with."""

    spec: KineticBatchSpec
    hosts: Callable[[int], int]  # each unit's, as accepted (`Accepted.hosts`)
    decision: BatchDecision
    status: KineticBatchStatus  # as it will be written: compacted, vouching
    spec_events: list[Event]
    units: dict[int, UnitObservation]
    clock: float
    book: ManifestBook
    manifest: ManifestWrite

    @property
    def total(self) -> int:
        return batch_total(self.spec)

    def note_plans(self) -> None:
        """Tell the manifest book the attempts this decision planned (a sized batch's, input
        by input)."""
        if units_sized(self.spec):
            self.book.note(self.decision.input_plans, 1, self.total, container=False)
            return
        self.book.note(
            self.decision.plans,
            self.spec.fixed_chunk,
            self.total,
            container=unit_is_container(self.spec),
        )


def unit_is_container(spec: KineticBatchSpec) -> Callable[[int], bool]:
    """Whether a unit runs a container (in a spec.jobs batch, each input says for itself)."""
    return functools.partial(is_container, spec)


def recorded_durably(mem: BatchMemory, recorded: Recorded) -> bool:
    """Whether every outcome in ``recorded`` is already in the stored manifest."""
    safe = (mem.outcomes.durable or Recorded()).terminal
    return not (recorded.terminal - safe)


def coalesce(
    mem: BatchMemory, settings: OperatorSettings, urgent: bool, clock: float
) -> float | None:
    """Seconds to hold a routine status write back, or None to write it now."""
    timers = mem.timers
    if urgent or timers.last_write is None:
        timers.last_write = clock
        return None
    due = timers.last_write + settings.status_interval
    if clock >= due:
        timers.last_write = clock
        return None
    return due - clock


def load_durable(
    mem: BatchMemory, home: layout.Home, old: KineticBatchStatus, total: int
) -> list[str]:
    """Once per batch and process: what the manifest the status vouches for records.

    It tells which finished Pods may be deleted (their outcome is safe in
    storage), and completes the status's ranges when they were cut. When
    they were cut and that manifest is forged or gone, the outcomes only it
    held are lost: the batch cannot go on without launching some inputs a
    second time, so it stops (returned: why).
    """
    outcomes = mem.outcomes
    if outcomes.durable is not None:
        return []
    book = outcomes.book_for(home)
    header = book.load(Anchor(old.manifest_uri, old.manifest_sha256), total)
    outcomes.durable = recorded_from(header) or Recorded()
    if old.truncated:
        if header is None:
            outcomes.durable = None  # judged again, and refused again, on the next reconcile
            return [
                "its status leaves out outcomes that only its manifest records, and "
                f"{'; '.join(book.tampered) or 'the manifest cannot be read'}: going on would "
                "launch inputs that already ran. Rerun the batch's inputs in a new batch"
            ]
        outcomes.extra = outcomes.durable
    return []


class StatusWriter:
    """Conditional status writes that follow our own resourceVersion.

    Each answer becomes the memory's freshest copy of the batch, so the next
    reconcile starts from it without a read.
    """

    def __init__(
        self,
        kube: Kube,
        mem: BatchMemory,
        namespace: str,
        name: str,
        raw: dict[str, Any],
        version: str | None,
    ) -> None:
        self.kube, self.mem, self.namespace, self.name = kube, mem, namespace, name
        self.raw, self.version = raw, version

    @property
    def current(self) -> KineticBatchStatus:
        return KineticBatchStatus.model_validate(self.raw)

    def status(self, status: KineticBatchStatus, *, force: bool = False) -> None:
        """Patch the status if it changed; `force` patches even an equal one, as a
        compare-and-swap on the resourceVersion before creating Pods.

        Every write carries the digests of what the operator last wrote to
        storage (`vouching`): the status vouches for it from then on.
        """
        status = vouching(status, self.mem)
        # Empty range strings are left out: this API server reads "" in a merge
        # patch as null, which the schema refuses; absent means "" when read back.
        new = {k: v for k, v in status.wire().items() if v != ""}
        if new == self.raw and not force:
            return
        written = self.kube.patch_status(
            self.namespace, self.name, new, self.raw, self.version, plural=BATCH_PLURAL
        )
        self.mem.body.set(written)
        if written is not None:
            self.version = (written.get("metadata") or {}).get("resourceVersion")
            count_ends(self.raw, new)
            self.raw = new
            self._trust_vouched(new)

    def _trust_vouched(self, written: dict[str, Any]) -> None:
        """The manifest a landed status write vouches for holds the durable outcomes now."""
        outcomes = self.mem.outcomes
        book = outcomes.book
        if book is not None and book.vouched(
            written.get("manifestURI"), written.get("manifestSHA256")
        ):
            assert book.anchored is not None
            outcomes.durable = book.anchored.recorded


def vouching(status: KineticBatchStatus, mem: BatchMemory) -> KineticBatchStatus:
    """``status`` naming what the operator last wrote to storage: the manifest header
    (and its digest) and the accepted spec's digest."""
    update: dict[str, Any] = {}
    book = mem.outcomes.book
    latest = book.latest if book is not None else None
    if latest is not None:
        update |= {"manifest_uri": latest.uri, "manifest_sha256": latest.sha256}
    if mem.accepted.sha256 is not None:
        update["accepted_spec_sha256"] = mem.accepted.sha256
    return status.model_copy(update=update) if update else status


def count_ends(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Inputs a status write just recorded as ended, counted once (the write landed)."""
    was, now = (s.get("counts") or {} for s in (before, after))
    metrics.inputs_ended(
        metrics.KIND_BATCH,
        succeeded=now.get("succeeded", 0) - was.get("succeeded", 0),
        failed=now.get("failed", 0) - was.get("failed", 0),
    )


def parse_status(raw: dict[str, Any], namespace: str, name: str) -> KineticBatchStatus:
    try:
        return KineticBatchStatus.model_validate(raw)
    except ValueError as exc:
        log.warning("Ignoring unreadable status of batch %s/%s: %s", namespace, name, exc)
        return KineticBatchStatus()


class ManifestWrite:
    """Write the manifest as the batch stands, and record the outcome in the status."""

    def __init__(
        self,
        mem: BatchMemory,
        write: StatusWriter,
        home: layout.Home,
        spec: KineticBatchSpec,
        meta: dict[str, Any],
        now: datetime,
    ) -> None:
        self.mem, self.writer, self.home = mem, write, home
        self.uri = home.prefix
        self.spec, self.meta, self.now = spec, meta, now

    def run(self, clock: float, *, vouch: bool) -> bool:
        """Write the manifest; with ``vouch``, write the status that vouches for it at once.

        Otherwise that is left to the next status write, coalesced with what
        else changes (a busy batch writes its status every status_interval
        anyway; the handler asks for a look by then), unless this write
        changes the ManifestWritten condition itself. Until then the status
        vouches for the previous version, which stays where it is.
        """
        status = self.writer.current
        recorded = self.mem.outcomes.recorded
        header = build_header(
            self.home,
            self.spec,
            status,
            recorded,
            created=self.meta.get("creationTimestamp"),
            now=self.now,
            shards=[],
        )
        try:
            self.mem.outcomes.book_for(self.home).write(header, recorded)
        except Exception as exc:  # noqa: BLE001 — storage down or refusing: retried, shown
            self.mem.timers.debouncer.failed(clock)
            log.warning("Could not write manifest %s: %s", self.uri, exc)
            why = f"Could not write the manifest to {self.uri}: {exc}; retrying."
            self.writer.status(
                with_condition(status, COND_MANIFEST, "False", "WriteFailed", why, self.now)
            )
            return False
        self.mem.timers.debouncer.written(clock)
        where = f"The manifest is under {self.home.prefix}."
        done = with_condition(status, COND_MANIFEST, "True", "Written", where, self.now)
        if vouch or done.wire() != status.wire():
            self.writer.status(done)
        return True
