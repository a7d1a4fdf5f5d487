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
last written (`StatusWriter`), and a chunk Pod's report is read, bounded and
checked before its inputs' outcome is recorded (`checked_reports`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from kinetic.model import layout
from kinetic.model.batchjobs import batch_total, retries_of
from kinetic.model.grid import Grid
from kinetic.model.names import LABEL_BATCH, input_pod_name
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    BATCH_PLURAL,
    GROUP,
    VERSION,
    KineticBatchSpec,
    Phase,
)

from kinetic_operator import metrics
from kinetic_operator.failures import reconcile_rounds
from kinetic_operator.handlers.batch_accept import (
    accept,
    check_stored,
    from_batch,
    load_hashes,
    load_spec,
    resolve_rerun,
    spec_condition,
)
from kinetic_operator.handlers.batch_create import (
    create_pods,
    each,
)
from kinetic_operator.handlers.batch_memory import BatchMemory
from kinetic_operator.handlers.batch_reports import (
    checked_reports,
    report_tampering,
)
from kinetic_operator.handlers.batch_round import (
    Accepted,
    Batch,
    Decided,
    ManifestWrite,
    StatusWriter,
    coalesce,
    load_durable,
    parse_status,
    recorded_durably,
    unit_is_container,
    vouching,
)
from kinetic_operator.handlers.batch_units import (
    grid_of,
    pod_unit_inputs,
    read_progress,
    sizing_of,
    write_stop,
)
from kinetic_operator.handlers.events import Key, Kind
from kinetic_operator.kube import Conflict, Kube
from kinetic_operator.logic import batch_logic
from kinetic_operator.logic.attempts import Limits, plan_unit
from kinetic_operator.logic.batch_logic import (
    CreatePods,
    Event,
    Recorded,
    StopPods,
    UnitObservation,
    WriteManifest,
    WriteStop,
    compact_status,
)
from kinetic_operator.logic.batch_pods import (
    log_uri,
    unit_hosts,
)
from kinetic_operator.logic.observed import PodView, batch_key, summarize_pod
from kinetic_operator.logic.policy import Policy, first_acceptance_violations
from kinetic_operator.logic.units import UnitLimits, units_sized
from kinetic_operator.logic.units import plan_unit as plan_sized_unit
from kinetic_operator.reaper import due_pods, stop_pod
from kinetic_operator.settings import OperatorSettings

LABELLED = {LABEL_BATCH: kopf.PRESENT}
MAX_LAUNCHES = 200  # Pods created per reconcile; more follow at once (maxConcurrent: null)


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
    observed = _observe(batch, accepted, _own_units(units, batch.uid))
    if observed is None:
        return None  # the manifest it relies on is gone or forged: the status says so
    decided = _decide(batch, accepted, observed)
    wait = _record(batch, decided)
    if wait is not None:
        return wait  # a routine update: written with the next one
    _act(batch, decided)
    return _next_look(batch, decided)


# ----------------------------------------------------------------------- the steps


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
) -> Batch | None:
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
    old = parse_status(raw, namespace, name)
    write = StatusWriter(kube, mem, namespace, name, raw, meta.get("resourceVersion"))
    home = layout.batch_home(settings.storage_root or "", namespace, name, meta.get("uid", ""))
    return Batch(
        kube, settings, mem, namespace, name, body, meta, raw, old, write, home, fresh, now, policy
    )


def _accept_spec(batch: Batch) -> Accepted | None:
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
    return Accepted(spec, refused, unit_hosts(spec, batch.settings.accelerator_catalog))


def _spec_to_run(batch: Batch) -> tuple[KineticBatchSpec | None, list[str]]:
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


def _policy_problems(batch: Batch, spec: KineticBatchSpec) -> list[str]:
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


def _refuse(batch: Batch, problems: list[str]) -> None:
    """A batch whose spec cannot run: the status and an Event say why."""
    decision = batch_logic.invalid_batch(
        batch.old, problems, batch.now, generation=batch.generation
    )
    batch.write.status(decision.status)
    batch.post(decision.of(Event))


def _refuse_tampered(batch: Batch, problems: list[str]) -> None:
    """A batch whose manifest was forged or lost: the status and Events say so."""
    decision = batch_logic.invalid_batch(
        batch.old, problems, batch.now, generation=batch.generation, reason="ManifestTampered"
    )
    batch.write.status(decision.status)
    report_tampering(batch.kube, batch.body, batch.mem)
    batch.post(decision.of(Event))


def _observe(
    batch: Batch, accepted: Accepted, units: dict[int, UnitObservation]
) -> dict[int, UnitObservation] | None:
    """The units as the decision sees them: the outcomes stored loaded first, each ended
    chunk Pod's report checked. None when the stored outcomes it needs are lost."""
    mem, spec = batch.mem, accepted.spec
    problems = load_durable(mem, batch.home, batch.old, batch_total(spec))
    if problems:
        _refuse_tampered(batch, problems)
        return None
    mem.timers.debouncer.interval = batch.settings.manifest_interval
    mem.timers.recheck = None
    units = batch_logic.see_gangs(
        units,
        accepted.hosts,
        batch.now,
        timedelta(seconds=batch.settings.gang_scheduling_seconds),
        mem.pods.settled,
    )
    if units_sized(spec):
        read_progress(batch.kube, batch.namespace, units, mem.units, batch.now)
    mem.refills.saw(p for obs in units.values() for p in obs.pods.values() if not p.gone)
    return checked_reports(mem, batch.home, spec, units)


def _decide(batch: Batch, accepted: Accepted, units: dict[int, UnitObservation]) -> Decided:
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
    status = vouching(compact_status(status), mem)
    clock = time.monotonic()
    book = mem.outcomes.book_for(batch.home)
    book.observed = units
    for unit, ended in batch_logic.settled_units(decision.plans).items():
        mem.pods.settled.setdefault(unit, {}).update(ended)
    manifest = ManifestWrite(mem, batch.write, batch.home, spec, batch.meta, batch.now)
    return Decided(
        spec, accepted.hosts, decision, status, spec_events, units, clock, book, manifest
    )


def _record(batch: Batch, decided: Decided) -> float | None:
    """Write the status first, conditional on the version read (Conflict: decide again);
    then remember the outcomes. Returns how long a routine status write is held back.

    A decision that acts without changing the status has no such check, so
    it must come from a fresh read, not from a cached copy.
    """
    decision = decided.decision
    if decision.write_status or decided.status.wire() != batch.old.wire():
        wait = coalesce(batch.mem, batch.settings, decision.urgent, decided.clock)
        if wait is not None:
            return wait
        _write_status(batch, decided)
    elif not batch.fresh and (decision.creates or decision.stops):
        raise Conflict("acting on a cached copy: read it afresh first")
    _remember_outcomes(batch, decided)
    return None


def _write_status(batch: Batch, decided: Decided) -> None:
    """The status, once the outcomes it is about to leave out (cut ranges) are stored."""
    mem, decision = batch.mem, decided.decision
    if decided.status.truncated and not recorded_durably(mem, decision.recorded):
        mem.outcomes.recorded = decision.recorded
        decided.note_plans()
        if not decided.manifest.run(decided.clock, vouch=False):  # the status vouches next
            raise ManifestNotWritten(
                f"{batch.namespace}/{batch.name}: the manifest could not be written, so the "
                "status is not cut yet; retrying"
            )
    batch.write.status(decided.status, force=bool(decision.creates))  # Conflict: decide again
    mem.outcomes.extra = decision.recorded


def _remember_outcomes(batch: Batch, decided: Decided) -> None:
    """The decision's outcomes, and the attempts it planned, for the manifest."""
    mem = batch.mem
    mem.outcomes.recorded = decided.decision.recorded
    decided.note_plans()
    if _note_settled(batch, decided):
        mem.timers.debouncer.mark(decided.clock)


def _act(batch: Batch, decided: Decided) -> None:
    """Do what was decided, then write the manifest if it is due and tidy the memory."""
    mem = batch.mem
    for event in decided.spec_events:
        batch.kube.post_event(batch.body, "Warning", event.reason, event.message)
    for action in decided.decision.actions:
        _do(batch, decided, action)
    if mem.timers.debouncer.due(decided.clock):
        decided.manifest.run(decided.clock, vouch=Phase(decided.status.phase).terminal)
    _prune(mem, grid_of(decided.spec, decided.status), decided.total)
    report_tampering(batch.kube, batch.body, mem)


def _do(batch: Batch, decided: Decided, action: Any) -> None:
    """One action of the decision."""
    match action:
        case WriteManifest(urgent=urgent, blocking=blocking):
            _write_manifest(batch, decided, urgent=urgent, blocking=blocking)
        case CreatePods(units=todo):
            causes = {u: p.cause for u, p in decided.decision.plans.items()}
            grid = grid_of(decided.spec, decided.status)
            settled = decided.decision.recorded.terminal
            where = (grid, settled)
            create_pods(batch, decided.spec, decided.hosts, todo, causes, decided.units, where)
        case StopPods(pods=pods):
            views = _views_by_name(decided.units)
            each(functools.partial(_delete, batch, views), pods)
        case WriteStop(order=order):
            write_stop(batch.home, batch.mem.units, order)
        case Event(type=type_, reason=reason, message=message):
            batch.kube.post_event(batch.body, type_, reason, message)


def _delete(batch: Batch, views: Mapping[str, PodView], pod: str) -> None:
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


def _write_manifest(batch: Batch, decided: Decided, *, urgent: bool, blocking: bool) -> None:
    """The manifest is dirty: write it now if due (debounced), or before the first Pod."""
    debouncer, clock = batch.mem.timers.debouncer, decided.clock
    debouncer.mark(clock, urgent=urgent)
    due = blocking or debouncer.due(clock)
    if due and not decided.manifest.run(clock, vouch=urgent or blocking) and blocking:
        raise ManifestNotWritten(
            f"{batch.namespace}/{batch.name}: the manifest could not be written, so no Pod "
            "is created yet; retrying"
        )


def _next_look(batch: Batch, decided: Decided) -> float | None:
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


def _note_settled(batch: Batch, decided: Decided) -> bool:
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
    return decided.book.note_missing(plans, chunk, total, container=unit_is_container(spec))


def _settled_sized(
    batch: Batch, spec: KineticBatchSpec, unit: int, inputs: IndexSet, obs: UnitObservation
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
    batch: Batch, units: dict[int, UnitObservation], grid: Grid, total: int
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
