"""KineticBatch handlers: every event about a batch or one of its Pods reconciles the batch.

Level-triggered, like the KineticJob handlers: an event only names the
batch; its reconcile (`BATCHES.reconcile`) takes the freshest copy of the batch it holds (the
watch's, or the answer to its own last write), the batch's attempt Pods
from a Kopf index of small summaries, asks `batch_logic.decide_batch` what
to do, writes the status conditionally on the resourceVersion it read, and
only then acts — writes the manifest, creates Pods, stops Pods, posts
events. All of a batch's triggers go through one `Serializer` key (the
plumbing both kinds share, `kinetic_operator.handlers.events`), so a burst
of Pod events costs a reconcile or two, and no two reconciles of a batch
ever overlap. Routine status writes of a busy batch are coalesced to
at most one per ``status_interval``; launches and the end are written at
once. No polling: the only timed wake-ups are that coalescing, the manifest
debounce, more launches for a batch with no limit, and finished Pods
waiting out their TTL.

What the operator keeps in memory (`BatchMemory`, in
`kinetic_operator.handlers.batch_memory`) is a cache, never the
truth: the accepted spec and the input hashes (both re-read from storage
after a restart), the attempt history of inputs still running, Pods it
created that the watch has not shown yet, and tombstones of Pods deleted
before their outcome was recorded.

What it reads back from storage it believes only as far as the batch's
status vouches for it: the accepted spec (``acceptedSpecSHA256``,
`kinetic_operator.accepted`) and the manifest (``manifestSHA256``,
`kinetic.model.manifest`). Every status write carries the digests of what was
last written (`_Writer`), and a chunk Pod's report is read, bounded and
checked before its inputs' outcome is recorded (`_checked_reports`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.batchjobs import batch_total, is_container, retries_of
from kinetic.model.catalog import is_tpu
from kinetic.model.data import GCSFUSE_DRIVER
from kinetic.model.grid import Grid
from kinetic.model.manifest import Anchor
from kinetic.model.names import LABEL_BATCH, gang_pod_name, input_pod_name
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    BATCH_KIND,
    BATCH_PLURAL,
    GROUP,
    VERSION,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
)

from kinetic_operator import batch_logic, metrics, podspec
from kinetic_operator.attempts import AttemptCause, Limits, plan_unit
from kinetic_operator.batch_logic import (
    BatchDecision,
    CreatePods,
    Event,
    Recorded,
    StopPods,
    UnitObservation,
    WriteManifest,
    WriteStop,
    compact_status,
    unit_inputs,
    with_condition,
)
from kinetic_operator.batch_pods import (
    SizedUnit,
    UnitRefused,
    build_unit_pod,
    log_uri,
    unit_hosts,
    unit_job,
)
from kinetic_operator.datavolumes import batch_uses_fuse
from kinetic_operator.failures import reconcile_rounds
from kinetic_operator.gangs import Gang, ranks_to_create
from kinetic_operator.handlers.batch_accept import (
    accept,
    check_stored,
    from_batch,
    load_hashes,
    load_spec,
    resolve_rerun,
    spec_condition,
)
from kinetic_operator.handlers.batch_memory import BatchMemory
from kinetic_operator.handlers.batch_units import (
    grid_of,
    pod_unit_inputs,
    read_progress,
    sizing_of,
    write_stop,
)
from kinetic_operator.handlers.events import Key, Kind
from kinetic_operator.handlers.owned import create_sealed, ensure_gang_objects
from kinetic_operator.kube import Conflict, Kube, Rejected
from kinetic_operator.manifest import (
    ManifestBook,
    build_header,
    check_report,
    recorded_from,
)
from kinetic_operator.observed import PodView, batch_key, summarize_pod
from kinetic_operator.policy import Policy, first_acceptance_violations
from kinetic_operator.reaper import due_pods, stop_pod
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.units import UnitLimits, units_sized
from kinetic_operator.units import plan_unit as plan_sized_unit

log = logging.getLogger("kinetic.operator")

LABELLED = {LABEL_BATCH: kopf.PRESENT}
MAX_LAUNCHES = 200  # Pods created per reconcile; more follow at once (maxConcurrent: null)
CREATE_THREADS = 8

COND_MANIFEST = "ManifestWritten"


class ManifestNotWritten(Exception):
    """The manifest must exist before the first Pod; the Serializer retries with backoff."""


# ----------------------------------------------------------------------- index


@kopf.index("v1", "pods", labels=LABELLED)
def batch_pods(body: kopf.Body, memo: Any, **_: Any) -> dict[Key, PodView]:
    """Attempt Pods of batches by (namespace, batch), summarised: those the operator made."""
    return BATCHES.index_entry(body, memo)


# ----------------------------------------------------------------------- triggers


@kopf.on.event(GROUP, VERSION, BATCH_PLURAL)  # type: ignore[arg-type]  # index kwargs
async def kinetic_batch_event(
    type: str,
    namespace: str,
    name: str,
    body: kopf.Body,
    batch_pods: kopf.Index,
    memo: Any,
    **_: Any,
) -> None:
    """A batch was created or changed: reconcile it. Deleted: forget it."""
    await BATCHES.object_event(type, (namespace, name), body, batch_pods, memo)


@kopf.on.event("v1", "pods", labels=LABELLED)  # type: ignore[arg-type]  # index kwargs
async def batch_pod_event(
    type: str, body: kopf.Body, batch_pods: kopf.Index, memo: Any, **_: Any
) -> None:
    """A Pod of a batch changed or went away: reconcile its batch."""
    await BATCHES.pod_event(type, body, batch_pods, memo)


def _unit_pod(body: Mapping[str, Any]) -> tuple[Key, PodView] | None:
    """The batch a Pod of one of its units belongs to, and the Pod's summary."""
    key, view = batch_key(body), summarize_pod(body)
    return (key, view) if key and view and view.index is not None else None


def observe_units(pods: Iterable[PodView], mem: BatchMemory) -> dict[int, UnitObservation]:
    """The Pods of each unit (index first, then tombstones and refusals), and creations."""
    grouped: dict[int, dict[int, PodView]] = {}
    members: dict[int, dict[str, PodView]] = {}
    for source in (mem.pods.refused, mem.pods.gone):
        for unit, views in source.items():
            grouped.setdefault(unit, {}).update(views)
    for unit, named in mem.pods.members_gone.items():
        members.setdefault(unit, {}).update(named)
    for pod in pods:
        if pod.index is not None and pod.rank is not None:
            members.setdefault(pod.index, {})[pod.name] = pod
        elif pod.index is not None:
            grouped.setdefault(pod.index, {})[pod.attempt] = pod
    making, stopping = frozenset(mem.pods.creating_members), frozenset(mem.pods.stopping)
    settled = mem.pods.settled
    units = {
        unit: UnitObservation(
            grouped.get(unit, {}),
            creating=mem.pods.creating.get(unit),
            creating_name=mem.pods.creating_names.get(unit),
            members=tuple(members.get(unit, {}).values()),
            making=making,
            stopping=stopping,
            ended=dict(settled.get(unit, {})),
        )
        for unit in grouped.keys() | members.keys() | mem.pods.creating.keys() | settled.keys()
    }
    return units


# ----------------------------------------------------------------------- reconcile


def reconcile_batch_sync(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    namespace: str,
    name: str,
    units: dict[int, UnitObservation],
    now: datetime | None = None,
    policy: Policy | None = None,
) -> float | None:
    """Read, decide, write status, act — from a fresh read again if the batch moved meanwhile.

    Returns in how many seconds to look again, or None.
    """

    return reconcile_rounds(
        kube,
        mem,
        BATCH_PLURAL,
        f"{namespace}/{name}",
        lambda: kube.get_kinetic_batch(namespace, name),
        lambda body, fresh: _reconcile_once(
            kube,
            settings,
            mem,
            namespace,
            name,
            body,
            fresh,
            units,
            now or datetime.now(UTC),
            policy,
        ),
    )


def _reconcile_in_thread(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    namespace: str,
    name: str,
    units: dict[int, UnitObservation],
    policy: Policy,
) -> float | None:
    """A reconcile as the shared plumbing runs it: under the policy in force, now."""
    return reconcile_batch_sync(kube, settings, mem, namespace, name, units, policy=policy)


BATCHES: Kind[BatchMemory, dict[int, UnitObservation]] = Kind(
    name="batch",
    metric=metrics.KIND_BATCH,
    memories=lambda state: state.batches,
    new_memory=BatchMemory,
    pod_of=_unit_pod,
    saw_pod=lambda mem, view, deleted: mem.pods.saw(view, deleted),
    observe=observe_units,
    reconcile_sync=_reconcile_in_thread,
    wake=lambda mem: mem.timers.wake,
)


def _reconcile_once(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    namespace: str,
    name: str,
    body: dict[str, Any] | None,
    fresh: bool,
    units: dict[int, UnitObservation],
    now: datetime,
    policy: Policy | None = None,
) -> float | None:
    """One round: load the batch, accept its spec, observe, decide, record, act.

    The decision is recorded — the status written, conditional on the
    version read — before anything is done about it: if the batch moved,
    nothing is done and the round is decided again from a fresh read.
    """
    batch = _load(kube, settings, mem, namespace, name, body, fresh, now, policy)
    if batch is None:
        return None  # deleted (its Pods go with it through ownerReferences), or being deleted
    accepted = _accept_spec(batch)
    if accepted is None:
        return None  # the status says why it cannot run
    observed = _observe(batch, accepted.spec, _own_units(units, batch.uid))
    if observed is None:
        return None  # the manifest it relies on is gone or forged: the status says so
    decided = _decide(batch, accepted, observed)
    wait = _record(batch, decided)
    if wait is not None:
        return wait  # a routine update: written with the next one
    _act(batch, decided)
    return _next_look(batch, decided)


# ----------------------------------------------------------------------- the steps


@dataclass
class _Batch:
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
    write: _Writer
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
class _Accepted:
    """The spec to act on, and the immutable change refused, if someone made one."""

    spec: KineticBatchSpec
    refused: str | None


@dataclass
class _Decided:
    """What the round decided, and what it writes it with."""

    spec: KineticBatchSpec
    decision: BatchDecision
    status: KineticBatchStatus  # as it will be written: compacted, vouching
    spec_events: list[Event]
    units: dict[int, UnitObservation]
    clock: float
    book: ManifestBook
    manifest: _ManifestWrite

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
            container=_is_container(self.spec),
        )


def _load(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    namespace: str,
    name: str,
    body: dict[str, Any] | None,
    fresh: bool,
    now: datetime,
    policy: Policy | None,
) -> _Batch | None:
    """The batch as this round sees it; None when it is gone or being deleted.

    A batch of the same name with another uid starts from an empty memory.
    """
    if body is None:
        return None
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # start nothing new
    if mem.uid != meta.get("uid"):
        mem.forget(meta.get("uid"))
    raw = body.get("status") or {}
    old = _parse_status(raw, namespace, name)
    write = _Writer(kube, mem, namespace, name, raw, meta.get("resourceVersion"))
    home = layout.batch_home(settings.storage_root or "", namespace, name, meta.get("uid", ""))
    return _Batch(
        kube, settings, mem, namespace, name, body, meta, raw, old, write, home, fresh, now, policy
    )


def _accept_spec(batch: _Batch) -> _Accepted | None:
    """The spec to run, accepted (stored, once) unless the batch has ended; None when it
    cannot run, after the status says why."""
    spec, problems = _spec_to_run(batch)
    refused: str | None = None
    if spec is not None and not problems and not Phase(batch.old.phase).terminal:
        spec, refused = accept(batch.mem, batch.home, spec)
        problems = load_hashes(batch.mem, spec)
    if spec is None or problems:
        _refuse(batch, problems)
        return None
    return _Accepted(spec, refused)


def _spec_to_run(batch: _Batch) -> tuple[KineticBatchSpec | None, list[str]]:
    """The spec as it will run, or why it may not: read and bounded, checked against the
    accepted spec stored, a rerun resolved from its source, judged by the policy."""
    spec, problems = load_spec(batch.body, batch.settings, batch.namespace)
    if spec is None or problems:
        return spec, problems
    accepted_before = bool(batch.raw.get("phase"))
    problems = check_stored(
        batch.mem, batch.home, batch.old, accepted_before, spec, batch.settings, batch.policy
    )
    if problems:
        return spec, problems
    if from_batch(spec) is not None:
        spec, problems = resolve_rerun(batch.kube, batch.settings, batch.mem, batch.home, spec)
        if spec is None or problems:
            return spec, problems
    return spec, _policy_problems(batch, spec)


def _policy_problems(batch: _Batch, spec: KineticBatchSpec) -> list[str]:
    """Why the policy refuses the batch, judged as it will run: a rerun's size and template
    are known only once resolved."""
    if batch.policy is None:
        return []
    return first_acceptance_violations(
        "KineticBatch",
        {**batch.body, "spec": spec.wire()},
        batch.policy,
        batch.settings.accelerator_catalog,
        batch.settings.default_image,
    )


def _refuse(batch: _Batch, problems: list[str]) -> None:
    """A batch whose spec cannot run: the status and an Event say why."""
    decision = batch_logic.invalid_batch(
        batch.old, problems, batch.now, generation=batch.generation
    )
    batch.write.status(decision.status)
    batch.post(decision.of(Event))


def _refuse_tampered(batch: _Batch, problems: list[str]) -> None:
    """A batch whose manifest was forged or lost: the status and Events say so."""
    decision = batch_logic.invalid_batch(
        batch.old, problems, batch.now, generation=batch.generation, reason="ManifestTampered"
    )
    batch.write.status(decision.status)
    _report_tampering(batch.kube, batch.body, batch.mem)
    batch.post(decision.of(Event))


def _observe(
    batch: _Batch, spec: KineticBatchSpec, units: dict[int, UnitObservation]
) -> dict[int, UnitObservation] | None:
    """The units as the decision sees them: the outcomes stored loaded first, each ended
    chunk Pod's report checked. None when the stored outcomes it needs are lost."""
    mem = batch.mem
    problems = _load_durable(mem, batch.home, batch.old, batch_total(spec))
    if problems:
        _refuse_tampered(batch, problems)
        return None
    mem.timers.debouncer.interval = batch.settings.manifest_interval
    mem.timers.recheck = None
    units = batch_logic.see_gangs(
        units,
        unit_hosts(spec, batch.settings.accelerator_catalog),
        batch.now,
        timedelta(seconds=batch.settings.gang_scheduling_seconds),
        mem.pods.settled,
    )
    if units_sized(spec):
        read_progress(batch.kube, batch.namespace, units, mem.units, batch.now)
    mem.refills.saw(p for obs in units.values() for p in obs.pods.values() if not p.gone)
    return _checked_reports(mem, batch.home, spec, units)


def _decide(batch: _Batch, accepted: _Accepted, units: dict[int, UnitObservation]) -> _Decided:
    """Ask `batch_logic.decide_batch`; the status it gives, as it will be written."""
    spec, settings, mem = accepted.spec, batch.settings, batch.mem
    decision = batch_logic.decide_batch(
        spec,
        batch.old,
        units,
        batch.now,
        batch=batch.name,
        generation=batch.generation,
        max_launches=MAX_LAUNCHES,
        max_disruptions=settings.max_disruptions,
        extra=mem.outcomes.extra,
        dns=settings.rendezvous == "dns",
        unschedulable_seconds=settings.unschedulable_seconds,
        sizing=sizing_of(spec, batch.old, settings),
        marks=mem.units.marks(),
        unread=mem.units.unread(units) if units_sized(spec) else frozenset(),
    )
    status, spec_events = spec_condition(decision.status, accepted.refused, batch.now)
    status = _vouching(compact_status(status), mem)
    clock = time.monotonic()
    book = mem.outcomes.book_for(batch.home)
    book.observed = units
    for unit, ended in batch_logic.settled_units(decision.plans).items():
        mem.pods.settled.setdefault(unit, {}).update(ended)
    manifest = _ManifestWrite(mem, batch.write, batch.home, spec, batch.meta, batch.now)
    return _Decided(spec, decision, status, spec_events, units, clock, book, manifest)


def _record(batch: _Batch, decided: _Decided) -> float | None:
    """Write the status first, conditional on the version read (Conflict: decide again);
    then remember the outcomes. Returns how long a routine status write is held back.

    A decision that acts without changing the status has no such check, so
    it must come from a fresh read, not from a cached copy.
    """
    decision = decided.decision
    if decision.write_status or decided.status.wire() != batch.old.wire():
        wait = _coalesce(batch.mem, batch.settings, decision.urgent, decided.clock)
        if wait is not None:
            return wait
        _write_status(batch, decided)
    elif not batch.fresh and (decision.creates or decision.stops):
        raise Conflict("acting on a cached copy: read it afresh first")
    _remember_outcomes(batch, decided)
    return None


def _write_status(batch: _Batch, decided: _Decided) -> None:
    """The status, once the outcomes it is about to leave out (cut ranges) are stored."""
    mem, decision = batch.mem, decided.decision
    if decided.status.truncated and not _durable(mem, decision.recorded):
        mem.outcomes.recorded = decision.recorded
        decided.note_plans()
        if not decided.manifest.run(decided.clock, vouch=False):  # the status vouches next
            raise ManifestNotWritten(
                f"{batch.namespace}/{batch.name}: the manifest could not be written, so the "
                "status is not cut yet; retrying"
            )
    batch.write.status(decided.status, force=bool(decision.creates))  # Conflict: decide again
    mem.outcomes.extra = decision.recorded


def _remember_outcomes(batch: _Batch, decided: _Decided) -> None:
    """The decision's outcomes, and the attempts it planned, for the manifest."""
    mem = batch.mem
    mem.outcomes.recorded = decided.decision.recorded
    decided.note_plans()
    if _note_settled(batch, decided):
        mem.timers.debouncer.mark(decided.clock)


def _act(batch: _Batch, decided: _Decided) -> None:
    """Do what was decided, then write the manifest if it is due and tidy the memory."""
    mem = batch.mem
    for event in decided.spec_events:
        batch.kube.post_event(batch.body, "Warning", event.reason, event.message)
    for action in decided.decision.actions:
        _do(batch, decided, action)
    if mem.timers.debouncer.due(decided.clock):
        decided.manifest.run(decided.clock, vouch=Phase(decided.status.phase).terminal)
    _prune(mem, grid_of(decided.spec, decided.status), decided.total)
    _report_tampering(batch.kube, batch.body, mem)


def _do(batch: _Batch, decided: _Decided, action: Any) -> None:
    """One action of the decision."""
    match action:
        case WriteManifest(urgent=urgent, blocking=blocking):
            _write_manifest(batch, decided, urgent=urgent, blocking=blocking)
        case CreatePods(units=todo):
            causes = {u: p.cause for u, p in decided.decision.plans.items()}
            grid = grid_of(decided.spec, decided.status)
            settled = decided.decision.recorded.terminal
            _create(batch, decided.spec, todo, causes, decided.units, (grid, settled))
        case StopPods(pods=pods):
            views = _views_by_name(decided.units)
            _each(functools.partial(_delete, batch, views), pods)
        case WriteStop(order=order):
            write_stop(batch.home, batch.mem.units, order)
        case Event(type=type_, reason=reason, message=message):
            batch.kube.post_event(batch.body, type_, reason, message)


def _delete(batch: _Batch, views: Mapping[str, PodView], pod: str) -> None:
    """Stop a Pod (its log archived first when it ran), and remember it until the watch shows
    it going: a gang's member is not deleted again by the next decision meanwhile."""
    archive = log_uri(batch.home, pod) if batch.settings.storage_root else None
    stop_pod(batch.kube, batch.namespace, pod, views.get(pod), archive)
    batch.mem.pods.stopping.add(pod)


def _views_by_name(units: Mapping[int, UnitObservation]) -> dict[str, PodView]:
    """Every Pod the decision saw, by name: a gang's members as they are, not its views."""
    return {
        p.name: p
        for obs in units.values()
        for p in (*obs.members, *obs.pods.values())
        if not p.gone
    }


def _write_manifest(batch: _Batch, decided: _Decided, *, urgent: bool, blocking: bool) -> None:
    """The manifest is dirty: write it now if due (debounced), or before the first Pod."""
    debouncer, clock = batch.mem.timers.debouncer, decided.clock
    debouncer.mark(clock, urgent=urgent)
    due = blocking or debouncer.due(clock)
    if due and not decided.manifest.run(clock, vouch=urgent or blocking) and blocking:
        raise ManifestNotWritten(
            f"{batch.namespace}/{batch.name}: the manifest could not be written, so no Pod "
            "is created yet; retrying"
        )


def _next_look(batch: _Batch, decided: _Decided) -> float | None:
    """In how many seconds to look again: the manifest's debounce, a report to read again,
    a manifest to vouch for, the next finished Pod due, more Pods to launch."""
    mem, book, decision = batch.mem, decided.book, decided.decision
    waits = [mem.timers.debouncer.delay(time.monotonic()), mem.timers.recheck]
    if book.latest is not None and book.latest is not book.anchored:
        waits.append(batch.settings.status_interval)  # the next status write vouches for it
    waits.append(
        _expire(batch, decided.units, grid_of(decided.spec, decided.status), decided.total)
    )
    if decision.more or mem.pods.refused.keys() & {u for u, _ in decision.creates}:
        waits.append(0.0)
    if units_sized(decided.spec) and any(obs.live for obs in decided.units.values()):
        waits.append(batch.settings.progress_interval)  # read the running units' progress
    found = [w for w in waits if w is not None]
    return min(found) if found else None


# ----------------------------------------------------------------------- pieces


def _note_settled(batch: _Batch, decided: _Decided) -> bool:
    """Units that ended while no process followed them get a record from their Pods.

    The status can record an input's end before the manifest does; an operator
    that restarts in between never plans that unit again. Its Pods are still
    there, so once per unit and process, an input with no record in its shard
    gets one (with the result hash its Pod reported). Returns whether any did.
    """
    spec, outcomes = decided.spec, batch.mem.outcomes
    total, grid = decided.total, grid_of(spec, decided.status)
    terminal = outcomes.recorded.terminal
    plans: dict[int, Any] = {}
    for unit, obs in decided.units.items():
        if unit in outcomes.settled_seen or unit in decided.decision.plans or not obs.pods:
            continue
        inputs = grid.inputs_of(unit, total)
        if inputs - terminal:
            continue
        outcomes.settled_seen.add(unit)
        if units_sized(spec):
            plans |= _settled_sized(batch, spec, unit, inputs, obs)
            continue
        plans[unit] = plan_unit(
            obs.pods,
            reserved=max(obs.pods),
            creating=False,
            limits=Limits(retries_of(spec, unit), batch.settings.max_disruptions),
            cancel=False,
            pod_name=functools.partial(input_pod_name, batch.name, unit),
            now=batch.now,
        )
    chunk = 1 if units_sized(spec) else spec.fixed_chunk
    return decided.book.note_missing(plans, chunk, total, container=_is_container(spec))


def _settled_sized(
    batch: _Batch, spec: KineticBatchSpec, unit: int, inputs: IndexSet, obs: UnitObservation
) -> dict[int, Any]:
    """The input plans of a sized unit whose inputs all ended, from its Pods' marks."""
    step = plan_sized_unit(
        list(inputs),
        obs.pods,
        batch.mem.units.marks(),
        reserved=max(obs.pods),
        creating=False,
        limits=UnitLimits(retries_of(spec, unit), batch.settings.max_disruptions),
        settled=IndexSet(),
        stopping=True,
        now=batch.now,
    )
    return {i: batch_logic.input_plan(state, step.attempt) for i, state in step.inputs.items()}


def _own_units(units: dict[int, UnitObservation], uid: str | None) -> dict[int, UnitObservation]:
    """Only this batch's Pods: a same-named batch deleted before it may have left some."""
    own: dict[int, UnitObservation] = {}
    for unit, obs in units.items():
        pods = {k: p for k, p in obs.pods.items() if p.belongs_to(uid)}
        members = tuple(m for m in obs.members if m.belongs_to(uid))
        if pods or members or obs.creating is not None or obs.ended:
            own[unit] = replace(obs, pods=pods, members=members)
    return own


def _is_container(spec: KineticBatchSpec) -> Callable[[int], bool]:
    """Whether a unit runs a container (in a spec.jobs batch, each input says for itself)."""
    return functools.partial(is_container, spec)


def _durable(mem: BatchMemory, recorded: Recorded) -> bool:
    """Whether every outcome in ``recorded`` is already in the stored manifest."""
    safe = (mem.outcomes.durable or Recorded()).terminal
    return not (recorded.terminal - safe)


def _coalesce(
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


def _load_durable(
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


def _report_tampering(kube: Kube, body: dict[str, Any], mem: BatchMemory) -> None:
    """What the manifest book found forged in storage, as Warning Events (each once)."""
    book = mem.outcomes.book
    if book is None:
        return
    for message in book.tampered:
        log.warning("%s: %s", (body.get("metadata") or {}).get("name"), message)
        kube.post_event(body, "Warning", "ManifestTampered", message)
    book.tampered.clear()


def _checked_reports(
    mem: BatchMemory,
    home: layout.Home,
    spec: KineticBatchSpec,
    units: dict[int, UnitObservation],
) -> dict[int, UnitObservation]:
    """The units, with each ended chunk Pod's report read and checked first.

    A chunk Pod reports its inputs' result hashes in a report in storage,
    vouched for by the hash in its termination message. The report is read
    (bounded) before the batch records the chunk's outcome: one that is
    missing, too large or not what the Pod reported makes that attempt a
    failure (retried while retries last; the message says why), since its
    results cannot be checked. Storage not answering leaves the Pod looking
    as if still running, to be looked at again shortly.
    """
    chunk, total = spec.fixed_chunk, batch_total(spec)
    if chunk <= 1 or spec.template is None or spec.template.function is None:
        return units
    reports = _Reports(mem, home, mem.outcomes.book_for(home))
    terminal = mem.outcomes.recorded.terminal
    out = dict(units)
    for unit, obs in units.items():
        inputs = unit_inputs(unit, chunk, total)
        if inputs - terminal:  # recorded: its reports were read when it ended, or by the book
            out[unit] = reports.checked_unit(unit, inputs, obs)
    return out


@dataclass
class _Reports:
    """Reads and checks the reports of a batch's ended chunk Pods (`_checked_reports`)."""

    mem: BatchMemory
    home: layout.Home
    book: ManifestBook

    def checked_unit(
        self, unit: int, inputs: Iterable[int], obs: UnitObservation
    ) -> UnitObservation:
        """The unit's Pods, each ended one as its report lets it count."""
        views = dict(obs.pods)
        for attempt, pod in obs.pods.items():
            expected = digest.chunk_report(pod.termination_message) if pod.terminal else None
            if expected is None or pod.name in self.book.read_reports:
                continue
            seen = self.checked_pod(unit, inputs, pod, expected)
            if seen is not None:
                views[attempt] = seen
        return replace(obs, pods=views)

    def checked_pod(
        self, unit: int, inputs: Iterable[int], pod: PodView, expected: str
    ) -> PodView | None:
        """None when the Pod's report checks out (its outcomes go to the book); otherwise
        the Pod as it counts: failed (the report refused), or running (storage silent)."""
        refused = self.mem.outcomes.refused_reports
        why = refused.get(pod.name)
        if why is None:
            try:
                found = check_report(self.home, pod.name, expected)
                self.book.take_report(unit, pod.name, found, dict.fromkeys(inputs, unit))
                return None
            except ValueError as exc:
                why = refused[pod.name] = str(exc)
            except storage.StorageError as exc:
                log.warning("Cannot read the report of %s yet: %s", pod.name, exc)
                self.mem.timers.recheck = 2.0
                return replace(pod, phase="Running", exit_code=None, termination_message=None)
        return replace(
            pod,
            phase="Failed",
            reason=None,
            disruption=None,
            exit_code=None,
            terminated_reason="ReportRefused",
            termination_message=f"its results cannot be checked: {why}",
        )


def _create(
    batch: _Batch,
    spec: KineticBatchSpec,
    todo: Iterable[tuple[int, int]],
    causes: Mapping[int, AttemptCause | None] | None = None,
    units: Mapping[int, UnitObservation] | None = None,
    where: tuple[Grid, IndexSet] | None = None,
) -> None:
    """Create the Pods for ``(unit, attempt)`` pairs, a few at a time; AlreadyExists is fine.

    ``where``: the batch's grid and the inputs already settled (a sized unit's Pod runs
    only those of its inputs that are not).

    A multi-host unit's pair creates the members `gangs.ranks_to_create` names.

    A Pod that cannot be built or that the API server refuses becomes a
    failed attempt in memory, so the next decision spends a retry on it
    (and fails the inputs once they are spent) instead of looping on it.
    """
    kube, settings, mem = batch.kube, batch.settings, batch.mem
    book, pods = mem.outcomes.book, mem.pods
    known = {i: r.sha256 for i, r in book.hashes.items()} if book is not None else {}
    uid = batch.meta.get("uid", "")

    hosts_of = unit_hosts(spec, settings.accelerator_catalog)
    grid, settled = where or (grid_of(spec, batch.old), IndexSet())
    total = batch_total(spec)

    def sized(unit: int) -> SizedUnit | None:
        if not units_sized(spec):
            return None
        inputs = grid.inputs_of(unit, total)
        return SizedUnit(len(inputs), tuple(inputs - settled))

    def rename(manifest: dict[str, Any], name: str) -> dict[str, Any]:
        return podspec.renamed(manifest, name, batch.home)

    def one(pair: tuple[int, int]) -> None:
        unit, attempt = pair
        try:
            pod = build_unit_pod(
                batch.name,
                batch.namespace,
                uid,
                spec,
                settings,
                unit,
                attempt,
                mem.accepted.hashes,
                known,
                fuse_driver=fuse,
                sized=sized(unit),
            )
            gang = (units or {}).get(unit, UnitObservation()).gang
            todo = _unit_pods(batch, spec, pod, gang, unit, attempt, hosts_of(unit))
            names = {m["metadata"]["name"] for m in todo}
            pods.creating[unit] = attempt
            if hosts_of(unit) > 1:
                pods.creating_members.update(names)
            try:
                made = [create_sealed(kube, m, rename) for m in todo]
                if made:
                    pods.creating_names[unit] = made[0].name
                for m, body in zip(made, todo, strict=True):
                    if hosts_of(unit) > 1 and m.name != body["metadata"]["name"]:
                        pods.creating_members.discard(body["metadata"]["name"])
                        pods.creating_members.add(m.name)  # its own name was held by another
                first = {pod["metadata"]["name"], gang_pod_name(pod["metadata"]["name"], 0)}
                pairs_made = zip(made, todo, strict=True)
                if any(m.created for m, b in pairs_made if b["metadata"]["name"] in first):
                    inputs = len(grid.inputs_of(unit, batch_total(spec)))
                    cause = "first" if attempt == 1 else (causes or {}).get(unit)
                    metrics.attempt_created(metrics.KIND_BATCH, cause, inputs)
                    waited = batch.mem.refills.taken(1, batch.now.timestamp())
                    metrics.slot_refilled(metrics.KIND_BATCH, waited)
            except Exception:
                pods.creating.pop(unit, None)  # not created: the next reconcile tries again
                pods.creating_names.pop(unit, None)
                pods.creating_members.difference_update(names)
                raise
        except (UnitRefused, Rejected) as exc:
            pods.creating.pop(unit, None)
            pods.creating_names.pop(unit, None)
            why = f"input {unit} could not be launched: {exc}"
            pods.refused.setdefault(unit, {})[attempt] = PodView(
                name=input_pod_name(batch.name, unit, attempt),
                attempt=attempt,
                index=unit,
                phase="Failed",
                terminated_reason="Rejected",
                termination_message=why,
            )

    pairs = list(todo)
    if pairs:
        kube.ensure_service_account(batch.namespace, settings.runner_service_account)
    # Read once for the round, and only when a Pod would mount a fuse volume.
    fuse = kube.csi_driver_installed(GCSFUSE_DRIVER) if pairs and batch_uses_fuse(spec) else None
    _each(one, pairs)


def _unit_pods(
    batch: _Batch,
    spec: KineticBatchSpec,
    pod: dict[str, Any],
    gang: Gang | None,
    unit: int,
    attempt: int,
    hosts: int,
) -> list[dict[str, Any]]:
    """The Pod of a unit's attempt, or the members of its gang to create now."""
    if hosts <= 1:
        return [pod]
    settings = batch.settings
    dns = settings.rendezvous == "dns"
    todo = ranks_to_create(gang, attempt, pod["metadata"]["name"], hosts, dns=dns)
    if todo is None:
        return []
    service = ensure_gang_objects(batch.kube, batch.owner, settings)
    job = unit_job(spec, unit)
    tpu = job is not None and is_tpu(settings.accelerator_catalog, job.accelerator)
    return [
        podspec.gang_member(
            pod,
            batch.owner,
            rank,
            hosts,
            dns=dns,
            coordinator=todo.coordinator,
            tpu=tpu,
            home=batch.home,
            service=service,
            domain=settings.cluster_domain,
        )
        for rank in todo.ranks
    ]


def _each(fn: Any, items: Any) -> None:
    items = list(items)
    if len(items) <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=min(CREATE_THREADS, len(items))) as pool:
        list(pool.map(fn, items))


def _prune(mem: BatchMemory, grid: Grid, total: int) -> None:
    """Forget tombstones, refusals and progress of units whose inputs have all been recorded.

    Runs in a worker thread while Pod events (on the event loop) add
    tombstones, so it walks a copy of the keys: iterating the dict itself
    raised "dictionary changed size during iteration" mid-reconcile.
    """
    terminal = mem.outcomes.recorded.terminal
    for source in (mem.pods.gone, mem.pods.refused, mem.pods.members_gone, mem.pods.settled):
        for unit in [u for u in list(source) if not grid.inputs_of(u, total) - terminal]:
            source.pop(unit, None)
    done = {
        name for name in list(mem.units.pods) if not pod_unit_inputs(name, grid, total) - terminal
    }
    mem.units.forget(done)


def _expire(
    batch: _Batch, units: dict[int, UnitObservation], grid: Grid, total: int
) -> float | None:
    """Hand the reaper the finished Pods past their TTL whose outcomes the manifest holds.

    Scans the batch's Pods only when one may be due, so a batch with
    thousands of finished Pods waiting out their TTL costs nothing per
    reconcile. Returns the seconds until the next Pod is due.
    """
    mem, settings, timers = batch.mem, batch.settings, batch.mem.timers
    mem.due = []
    clock = batch.now.timestamp()
    if timers.expire_at is not None and clock < timers.expire_at:
        return timers.expire_at - clock
    done = _recorded_pods(mem, units, grid, total)
    due, wait = due_pods(done, batch.now, settings.pod_ttl_seconds, mem.reaping)
    archive = settings.storage_root
    mem.due = [(p.name, log_uri(batch.home, p.name) if archive else None, p.uid) for p in due]
    timers.expire_at = None if wait is None else clock + wait
    return wait


def _recorded_pods(
    mem: BatchMemory, units: dict[int, UnitObservation], grid: Grid, total: int
) -> list[PodView]:
    """The Pods of units whose every outcome is safe in the stored manifest."""
    safe = (mem.outcomes.durable or Recorded()).terminal
    return [
        pod
        for unit, obs in units.items()
        if unit not in mem.pods.refused and not (grid.inputs_of(unit, total) - safe)
        for pod in (obs.members if obs.gang is not None else obs.pods.values())
    ]


class _Writer:
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
        storage (`_vouching`): the status vouches for it from then on.
        """
        status = _vouching(status, self.mem)
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
            _count_ends(self.raw, new)
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


def _vouching(status: KineticBatchStatus, mem: BatchMemory) -> KineticBatchStatus:
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


def _count_ends(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Inputs a status write just recorded as ended, counted once (the write landed)."""
    was, now = (s.get("counts") or {} for s in (before, after))
    metrics.inputs_ended(
        metrics.KIND_BATCH,
        succeeded=now.get("succeeded", 0) - was.get("succeeded", 0),
        failed=now.get("failed", 0) - was.get("failed", 0),
    )


def _parse_status(raw: dict[str, Any], namespace: str, name: str) -> KineticBatchStatus:
    try:
        return KineticBatchStatus.model_validate(raw)
    except ValueError as exc:
        log.warning("Ignoring unreadable status of batch %s/%s: %s", namespace, name, exc)
        return KineticBatchStatus()


class _ManifestWrite:
    """Write the manifest as the batch stands, and record the outcome in the status."""

    def __init__(
        self,
        mem: BatchMemory,
        write: _Writer,
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
