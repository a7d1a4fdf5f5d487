"""KineticBatch handlers: every event about a batch or one of its Pods reconciles the batch.

Level-triggered, like the KineticJob handlers: an event only names the
batch; `reconcile_batch` takes the freshest copy of the batch it holds (the
watch's, or the answer to its own last write), the batch's attempt Pods
from a Kopf index of small summaries, asks `batch_logic.decide_batch` what
to do, writes the status conditionally on the resourceVersion it read, and
only then acts — writes the manifest, creates Pods, stops Pods, posts
events. All of a batch's triggers go through one `Serializer` key, so a
burst of Pod events costs a reconcile or two, and no two reconciles of a
batch ever overlap. Routine status writes of a busy batch are coalesced to
at most one per ``status_interval``; launches and the end are written at
once. No polling: the only timed wake-ups are that coalescing, the manifest
debounce, more launches for a batch with no limit, and finished Pods
waiting out their TTL.

What the operator keeps in memory (`BatchMemory`) is a cache, never the
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

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import kopf
from kinetic import storage
from kinetic.model import digest, layout, limits
from kinetic.model.batchjobs import batch_total, is_container, retries_of
from kinetic.model.fanout import (
    foreign_batch_uris,
    parse_sha256_list,
    validate_batch_spec,
)
from kinetic.model.limits import hash_list_max_bytes
from kinetic.model.manifest import Anchor
from kinetic.model.names import LABEL_BATCH, input_pod_name
from kinetic.model.resources import (
    BATCH_PLURAL,
    GROUP,
    VERSION,
    FromBatch,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
)
from pydantic import ValidationError

from kinetic_operator import batch_logic, metrics
from kinetic_operator.accepted import Stored, accepted_bytes, judge_stored, read_accepted
from kinetic_operator.attempts import AttemptCause, Limits, plan_unit
from kinetic_operator.batch_logic import (
    CreatePods,
    Event,
    Recorded,
    StopPods,
    UnitObservation,
    WriteManifest,
    compact_status,
    immutable_change,
    merge_mutable,
    unit_inputs,
    with_condition,
)
from kinetic_operator.batch_pods import UnitRefused, build_unit_pod, log_uri
from kinetic_operator.bounded_read import TooLarge, read_at_most
from kinetic_operator.failures import Failing, reconcile_rounds
from kinetic_operator.handlers.policy import current_policy
from kinetic_operator.kube import Conflict, Kube, Rejected
from kinetic_operator.manifest import (
    Debouncer,
    ManifestBook,
    build_header,
    check_report,
    recorded_from,
)
from kinetic_operator.observed import PodView, batch_key, summarize_pod
from kinetic_operator.policy import Policy, first_acceptance_violations
from kinetic_operator.reaper import due_pods
from kinetic_operator.rerun_source import SourceProblem, load_source, rerun_spec
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import Fresh, operator_state

log = logging.getLogger("kinetic.operator")

LABELLED = {LABEL_BATCH: kopf.PRESENT}
MAX_LAUNCHES = 200  # Pods created per reconcile; more follow at once (maxConcurrent: null)
CREATE_THREADS = 8

COND_MANIFEST = "ManifestWritten"
COND_SPEC = "SpecAccepted"


class ManifestNotWritten(Exception):
    """The manifest must exist before the first Pod; the Serializer retries with backoff."""


@dataclass
class BatchMemory:
    """What the operator remembers about one batch between reconciles — caches only."""

    uid: str | None = None
    body: Fresh = field(default_factory=Fresh)
    failing: Failing = field(default_factory=Failing)  # the error last reported, if any
    accepted: KineticBatchSpec | None = None
    accepted_sha256: str | None = None  # what status.acceptedSpecSHA256 says (or will)
    stored: Stored | None = None  # the accepted spec read back, checked (once per process)
    stored_checked: bool = False
    rerun: KineticBatchSpec | None = None  # a fromBatch spec as resolved (rerun_source)
    hashes: list[str | None] | None = None
    creating: dict[int, int] = field(default_factory=dict)  # unit -> attempt, not seen yet
    gone: dict[int, dict[int, PodView]] = field(default_factory=dict)  # tombstones
    refused: dict[int, dict[int, PodView]] = field(default_factory=dict)  # could not create
    extra: Recorded | None = None  # outcomes the status's cut ranges leave out
    durable: Recorded | None = None  # outcomes in the manifest the status vouches for
    recorded: Recorded = field(default_factory=Recorded)
    book: ManifestBook | None = None
    debouncer: Debouncer = field(default_factory=Debouncer)
    last_write: float | None = None
    wake_at: float | None = None
    expire_at: float | None = None  # no finished Pod is due for deletion before this
    due: list[tuple[str, str | None]] = field(default_factory=list)  # Pods to reap now
    reaping: set[str] = field(default_factory=set)
    settled_seen: set[int] = field(default_factory=set)  # settled units looked at once
    refused_reports: dict[str, str] = field(default_factory=dict)  # chunk Pod -> why
    recheck: float | None = None  # a report could not be read for now: look again


def _memory(memo: Any, key: tuple[str, str]) -> BatchMemory:
    batches: dict[tuple[str, str], BatchMemory] = operator_state(memo).batches
    return batches.setdefault(key, BatchMemory())


# ----------------------------------------------------------------------- index


@kopf.index("v1", "pods", labels=LABELLED)
def batch_pods(body: kopf.Body, **_: Any) -> dict[tuple[str, str], PodView]:
    """Attempt Pods of batches by (namespace, batch), summarised."""
    key, view = batch_key(body), summarize_pod(body)
    return {key: view} if key and view and view.index is not None else {}


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
    key = (namespace, name)
    if type == "DELETED":
        operator_state(memo).batches.pop(key, None)
        return
    _memory(memo, key).body.offer(dict(body))
    await reconcile_batch(namespace, name, batch_pods, memo)


@kopf.on.event("v1", "pods", labels=LABELLED)  # type: ignore[arg-type]  # index kwargs
async def batch_pod_event(
    type: str, body: kopf.Body, batch_pods: kopf.Index, memo: Any, **_: Any
) -> None:
    """A Pod of a batch changed or went away: reconcile its batch."""
    key, view = batch_key(body), summarize_pod(body)
    if key is None or view is None or view.index is None:
        return
    if type == "DELETED" and key not in operator_state(memo).batches:
        return  # its batch is gone (garbage collection): nothing to reconcile
    mem = _memory(memo, key)
    if mem.creating.get(view.index) == view.attempt:
        del mem.creating[view.index]
    if type == "DELETED":
        mem.gone.setdefault(view.index, {})[view.attempt] = replace(view, gone=True)
    await reconcile_batch(key[0], key[1], batch_pods, memo)


# ----------------------------------------------------------------------- reconcile


async def reconcile_batch(namespace: str, name: str, batch_pods: kopf.Index, memo: Any) -> None:
    """Bring KineticBatch namespace/name one step closer to done; serialized per batch."""
    key = (namespace, name)
    state = operator_state(memo)
    serializer: Serializer = state.serializer
    loop = asyncio.get_running_loop()

    async def work() -> None:
        mem = _memory(memo, key)
        mem.reaping = set(state.reaper.in_flight(("batch", *key)))
        units = observe_units(batch_pods.get(key, ()), mem)
        with metrics.reconcile_timer(metrics.KIND_BATCH):
            recheck = await asyncio.to_thread(
                reconcile_batch_sync,
                state.kube,
                state.settings,
                mem,
                namespace,
                name,
                units,
                policy=current_policy(memo),
            )
        if mem.body.get() is None:  # the batch is gone: forget it
            state.batches.pop(key, None)
            return
        state.reaper.submit(state.kube, ("batch", *key), namespace, mem.due)
        if recheck is None:
            return
        at = loop.time() + recheck
        if mem.wake_at is None or at < mem.wake_at - 0.01 or mem.wake_at < loop.time():
            mem.wake_at = at
            serializer.later(("batch", *key), wake, recheck)

    async def wake() -> None:
        _memory(memo, key).wake_at = None
        await work()

    await serializer.run(("batch", *key), work)


def observe_units(pods: Iterable[PodView], mem: BatchMemory) -> dict[int, UnitObservation]:
    """The Pods of each unit (index first, then tombstones and refusals), and creations."""
    grouped: dict[int, dict[int, PodView]] = {}
    for source in (mem.refused, mem.gone):
        for unit, views in source.items():
            grouped.setdefault(unit, {}).update(views)
    for pod in pods:
        if pod.index is not None:
            grouped.setdefault(pod.index, {})[pod.attempt] = pod
    units = {unit: UnitObservation(views) for unit, views in grouped.items()}
    for unit, attempt in mem.creating.items():
        units[unit] = UnitObservation(grouped.get(unit, {}), creating=attempt)
    return units


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
    if body is None:
        return None  # deleted; its Pods go with it through ownerReferences
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # being deleted: start nothing new
    if mem.uid != meta.get("uid"):
        _forget(mem, meta.get("uid"))
    units = _own_units(units, meta.get("uid"))
    raw = body.get("status") or {}
    old = _parse_status(raw, namespace, name)
    write = _Writer(kube, mem, namespace, name, raw, meta.get("resourceVersion"))
    generation = meta.get("generation")

    spec, problems = _load_spec(body, settings, namespace)
    refused: str | None = None
    home = layout.batch_home(settings.storage_root or "", namespace, name, meta.get("uid", ""))
    if spec is not None and not problems:
        problems = _check_stored(mem, home, old, bool(raw.get("phase")), spec, settings, policy)
    if spec is not None and not problems and _from_batch(spec) is not None:
        spec, problems = _resolve_rerun(kube, settings, mem, home, spec)
    if spec is not None and not problems and policy is not None:
        # Judged as it will run: a rerun's size and template are known only once resolved.
        problems = first_acceptance_violations(
            "KineticBatch",
            {**body, "spec": spec.wire()},
            policy,
            settings.accelerator_catalog,
            settings.default_image,
        )
    if spec is not None and not problems and not Phase(old.phase).terminal:
        spec, refused = _accept(mem, home, spec)
        problems = _load_hashes(mem, spec)
    if spec is None or problems:
        decision = batch_logic.invalid_batch(old, problems, now, generation=generation)
        write.status(decision.status)
        for event in decision.of(Event):
            kube.post_event(body, event.type, event.reason, event.message)
        return None

    problems = _load_durable(mem, home, old, batch_total(spec))
    if problems:
        decision = batch_logic.invalid_batch(
            old, problems, now, generation=generation, reason="ManifestTampered"
        )
        write.status(decision.status)
        _report_tampering(kube, body, mem)
        for event in decision.of(Event):
            kube.post_event(body, event.type, event.reason, event.message)
        return None
    mem.debouncer.interval = settings.manifest_interval
    mem.recheck = None
    units = _checked_reports(mem, home, spec, units)
    decision = batch_logic.decide_batch(
        spec,
        old,
        units,
        now,
        batch=name,
        generation=generation,
        max_launches=MAX_LAUNCHES,
        max_disruptions=settings.max_disruptions,
        extra=mem.extra,
    )
    status, spec_events = _spec_condition(decision.status, refused, now)
    status = _vouching(compact_status(status), mem)
    clock = time.monotonic()
    book = _book(mem, home)
    book.observed = units
    total = batch_total(spec)
    manifest = _ManifestWrite(mem, write, home, spec, meta, now)
    if decision.write_status or status.wire() != old.wire():
        wait = _coalesce(mem, settings, decision.urgent, clock)
        if wait is not None:
            return wait  # a routine update: written with the next one
        if status.truncated and not _durable(mem, decision.recorded):
            # The status is about to leave outcomes out: they must be in storage first.
            mem.recorded = decision.recorded
            book.note(decision.plans, spec.chunk_size, total, container=_is_container(spec))
            if not manifest.run(clock, vouch=False):  # the status written next vouches for it
                raise ManifestNotWritten(
                    f"{namespace}/{name}: the manifest could not be written, so the status "
                    "is not cut yet; retrying"
                )
        write.status(status, force=bool(decision.creates))  # Conflict: decide again
        mem.extra = decision.recorded
    elif not fresh and (decision.creates or decision.stops):
        raise Conflict("acting on a cached copy: read it afresh first")
    mem.recorded = decision.recorded
    book.note(decision.plans, spec.chunk_size, total, container=_is_container(spec))
    if _note_settled(mem, book, units, spec, settings, name, now, decision.plans):
        mem.debouncer.mark(clock)
    for event in spec_events:
        kube.post_event(body, "Warning", event.reason, event.message)

    for action in decision.actions:
        match action:
            case WriteManifest(urgent=urgent, blocking=blocking):
                mem.debouncer.mark(clock, urgent=urgent)
                due = blocking or mem.debouncer.due(clock)
                if due and not manifest.run(clock, vouch=urgent or blocking) and blocking:
                    raise ManifestNotWritten(
                        f"{namespace}/{name}: the manifest could not be written, so no Pod "
                        "is created yet; retrying"
                    )
            case CreatePods(units=todo):
                causes = {u: p.cause for u, p in decision.plans.items()}
                _create(
                    kube, settings, mem, name, namespace, meta.get("uid", ""), spec, todo, causes
                )
            case StopPods(pods=pods):
                _each(lambda pod: kube.delete_pod(namespace, pod), pods)
            case Event(type=type_, reason=reason, message=message):
                kube.post_event(body, type_, reason, message)
    if mem.debouncer.due(clock):
        manifest.run(clock, vouch=Phase(status.phase).terminal)
    _prune(mem, spec.chunk_size, total)
    _report_tampering(kube, body, mem)

    waits = [mem.debouncer.delay(time.monotonic()), mem.recheck]
    if book.latest is not None and book.latest is not book.anchored:
        waits.append(settings.status_interval)  # the next status write vouches for it
    waits.append(_expire(settings, mem, home, units, spec.chunk_size, total, now))
    if decision.more or mem.refused.keys() & {u for u, _ in decision.creates}:
        waits.append(0.0)
    found = [w for w in waits if w is not None]
    return min(found) if found else None


# ----------------------------------------------------------------------- pieces


def _forget(mem: BatchMemory, uid: str | None) -> None:
    """A batch of the same name but another uid: nothing remembered applies to it."""
    fresh = BatchMemory(uid=uid, body=mem.body)
    for name in BatchMemory.__dataclass_fields__:
        setattr(mem, name, getattr(fresh, name))


def _note_settled(
    mem: BatchMemory,
    book: ManifestBook,
    units: dict[int, UnitObservation],
    spec: KineticBatchSpec,
    settings: OperatorSettings,
    name: str,
    now: datetime,
    planned: Any,
) -> bool:
    """Units that ended while no process followed them get a record from their Pods.

    The status can record an input's end before the manifest does; an operator
    that restarts in between never plans that unit again. Its Pods are still
    there, so once per unit and process, an input with no record in its shard
    gets one (with the result hash its Pod reported). Returns whether any did.
    """
    total, chunk = batch_total(spec), spec.chunk_size
    terminal = mem.recorded.terminal
    plans = {}
    for unit, obs in units.items():
        if unit in mem.settled_seen or unit in planned or not obs.pods:
            continue
        if unit_inputs(unit, chunk, total) - terminal:
            continue
        mem.settled_seen.add(unit)
        plans[unit] = plan_unit(
            obs.pods,
            reserved=max(obs.pods),
            creating=False,
            limits=Limits(retries_of(spec, unit), settings.max_disruptions),
            cancel=False,
            pod_name=functools.partial(input_pod_name, name, unit),
            now=now,
        )
    return book.note_missing(plans, chunk, total, container=_is_container(spec))


def _own_units(units: dict[int, UnitObservation], uid: str | None) -> dict[int, UnitObservation]:
    """Only this batch's Pods: a same-named batch deleted before it may have left some."""
    own: dict[int, UnitObservation] = {}
    for unit, obs in units.items():
        pods = {k: p for k, p in obs.pods.items() if p.belongs_to(uid)}
        if pods or obs.creating is not None:
            own[unit] = UnitObservation(pods, creating=obs.creating)
    return own


def _is_container(spec: KineticBatchSpec) -> Callable[[int], bool]:
    """Whether a unit runs a container (in a spec.jobs batch, each input says for itself)."""
    return functools.partial(is_container, spec)


def _durable(mem: BatchMemory, recorded: Recorded) -> bool:
    """Whether every outcome in ``recorded`` is already in the stored manifest."""
    safe = (mem.durable or Recorded()).terminal
    return not (recorded.terminal - safe)


def _coalesce(
    mem: BatchMemory, settings: OperatorSettings, urgent: bool, clock: float
) -> float | None:
    """Seconds to hold a routine status write back, or None to write it now."""
    if urgent or mem.last_write is None:
        mem.last_write = clock
        return None
    due = mem.last_write + settings.status_interval
    if clock >= due:
        mem.last_write = clock
        return None
    return due - clock


def _book(mem: BatchMemory, home: layout.Home) -> ManifestBook:
    if mem.book is None:
        mem.book = ManifestBook(home)
    return mem.book


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
    if mem.durable is not None:
        return []
    book = _book(mem, home)
    header = book.load(Anchor(old.manifest_uri, old.manifest_sha256), total)
    mem.durable = recorded_from(header) or Recorded()
    if old.truncated:
        if header is None:
            mem.durable = None  # judged again, and refused again, on the next reconcile
            return [
                "its status leaves out outcomes that only its manifest records, and "
                f"{'; '.join(book.tampered) or 'the manifest cannot be read'}: going on would "
                "launch inputs that already ran. Rerun the batch's inputs in a new batch"
            ]
        mem.extra = mem.durable
    return []


def _report_tampering(kube: Kube, body: dict[str, Any], mem: BatchMemory) -> None:
    """What the manifest book found forged in storage, as Warning Events (each once)."""
    if mem.book is None:
        return
    for message in mem.book.tampered:
        log.warning("%s: %s", (body.get("metadata") or {}).get("name"), message)
        kube.post_event(body, "Warning", "ManifestTampered", message)
    mem.book.tampered.clear()


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
    chunk, total = spec.chunk_size, batch_total(spec)
    if chunk <= 1 or spec.template is None or spec.template.function is None:
        return units
    book = _book(mem, home)
    terminal = mem.recorded.terminal
    out = dict(units)
    for unit, obs in units.items():
        inputs = unit_inputs(unit, chunk, total)
        if not (inputs - terminal):
            continue  # recorded: its reports were read when it ended, or by the book
        views = dict(obs.pods)
        for attempt, pod in obs.pods.items():
            expected = digest.chunk_report(pod.termination_message) if pod.terminal else None
            if expected is None or pod.name in book.read_reports:
                continue
            chunk_of = dict.fromkeys(inputs, unit)
            why = mem.refused_reports.get(pod.name)
            if why is None:
                try:
                    found = check_report(home, pod.name, expected)
                    book.take_report(unit, pod.name, found, chunk_of)
                    continue
                except ValueError as exc:
                    why = mem.refused_reports[pod.name] = str(exc)
                except storage.StorageError as exc:
                    log.warning("Cannot read the report of %s yet: %s", pod.name, exc)
                    views[attempt] = replace(
                        pod, phase="Running", exit_code=None, termination_message=None
                    )
                    mem.recheck = 2.0
                    continue
            views[attempt] = replace(
                pod,
                phase="Failed",
                reason=None,
                disruption=None,
                exit_code=None,
                terminated_reason="ReportRefused",
                termination_message=f"its results cannot be checked: {why}",
            )
        out[unit] = UnitObservation(views, creating=obs.creating)
    return out


def _create(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    name: str,
    namespace: str,
    uid: str,
    spec: KineticBatchSpec,
    todo: Iterable[tuple[int, int]],
    causes: Mapping[int, AttemptCause | None] | None = None,
) -> None:
    """Create the Pods for ``(unit, attempt)`` pairs, a few at a time; AlreadyExists is fine.

    A Pod that cannot be built or that the API server refuses becomes a
    failed attempt in memory, so the next decision spends a retry on it
    (and fails the inputs once they are spent) instead of looping on it.
    """

    known = dict(mem.book.hashes) if mem.book is not None else {}

    def one(pair: tuple[int, int]) -> None:
        unit, attempt = pair
        try:
            pod = build_unit_pod(
                name, namespace, uid, spec, settings, unit, attempt, mem.hashes, known
            )
            mem.creating[unit] = attempt
            try:
                if kube.create_pod(pod):
                    inputs = len(unit_inputs(unit, spec.chunk_size, batch_total(spec)))
                    cause = "first" if attempt == 1 else (causes or {}).get(unit)
                    metrics.attempt_created(metrics.KIND_BATCH, cause, inputs)
            except Exception:
                mem.creating.pop(unit, None)  # not created: the next reconcile tries again
                raise
        except (UnitRefused, Rejected) as exc:
            mem.creating.pop(unit, None)
            why = f"input {unit} could not be launched: {exc}"
            mem.refused.setdefault(unit, {})[attempt] = PodView(
                name=f"{name}-{unit}-{attempt}",
                attempt=attempt,
                index=unit,
                phase="Failed",
                terminated_reason="Rejected",
                termination_message=why,
            )

    pairs = list(todo)
    if pairs:
        kube.ensure_service_account(namespace, settings.runner_service_account)
    _each(one, pairs)


def _each(fn: Any, items: Any) -> None:
    items = list(items)
    if len(items) <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=min(CREATE_THREADS, len(items))) as pool:
        list(pool.map(fn, items))


def _prune(mem: BatchMemory, chunk: int, total: int) -> None:
    """Forget tombstones and refusals of units whose inputs have all been recorded.

    Runs in a worker thread while Pod events (on the event loop) add
    tombstones, so it walks a copy of the keys: iterating the dict itself
    raised "dictionary changed size during iteration" mid-reconcile.
    """
    terminal = mem.recorded.terminal
    for source in (mem.gone, mem.refused):
        for unit in [u for u in list(source) if not unit_inputs(u, chunk, total) - terminal]:
            source.pop(unit, None)


def _expire(
    settings: OperatorSettings,
    mem: BatchMemory,
    home: layout.Home,
    units: dict[int, UnitObservation],
    chunk: int,
    total: int,
    now: datetime,
) -> float | None:
    """Hand the reaper the finished Pods past their TTL whose outcomes the manifest holds.

    Scans the batch's Pods only when one may be due, so a batch with
    thousands of finished Pods waiting out their TTL costs nothing per
    reconcile. Returns the seconds until the next Pod is due.
    """
    mem.due = []
    clock = now.timestamp()
    if mem.expire_at is not None and clock < mem.expire_at:
        return mem.expire_at - clock
    safe = (mem.durable or Recorded()).terminal
    done = [
        pod
        for unit, obs in units.items()
        if unit not in mem.refused and not (unit_inputs(unit, chunk, total) - safe)
        for pod in obs.pods.values()
    ]
    due, wait = due_pods(done, now, settings.pod_ttl_seconds, mem.reaping)
    mem.due = [(p.name, log_uri(home, p.name) if settings.storage_root else None) for p in due]
    mem.expire_at = None if wait is None else clock + wait
    return wait


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
            book = self.mem.book
            if book is not None and book.vouched(new.get("manifestURI"), new.get("manifestSHA256")):
                assert book.anchored is not None
                self.mem.durable = book.anchored.recorded


def _vouching(status: KineticBatchStatus, mem: BatchMemory) -> KineticBatchStatus:
    """``status`` naming what the operator last wrote to storage: the manifest header
    (and its digest) and the accepted spec's digest."""
    update: dict[str, Any] = {}
    latest = mem.book.latest if mem.book is not None else None
    if latest is not None:
        update |= {"manifest_uri": latest.uri, "manifest_sha256": latest.sha256}
    if mem.accepted_sha256 is not None:
        update["accepted_spec_sha256"] = mem.accepted_sha256
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


def _load_spec(
    body: dict[str, Any], settings: OperatorSettings, namespace: str
) -> tuple[KineticBatchSpec | None, list[str]]:
    """The spec, or the sentences that say why it cannot run."""
    if not settings.storage_root:
        return None, [
            "the operator has no storage root (KINETIC_STORAGE_ROOT) for the batch manifest"
        ]
    # First, on the raw spec: a hostile value (deep, huge) is judged before it is parsed.
    too_big = limits.check_batch_spec(
        body.get("spec"), storage_root=settings.storage_root, max_inputs=settings.max_inputs
    )
    if too_big:
        return None, too_big
    try:
        spec = KineticBatchSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return None, [_problem(err) for err in exc.errors()]
    foreign = foreign_batch_uris(settings.storage_root, namespace, spec)
    return spec, foreign or validate_batch_spec(spec)


def _problem(err: Any) -> str:
    """One pydantic error as a sentence naming its field (a whole-spec error names itself)."""
    if not err["loc"]:  # KineticBatchSpec's own check: its message names the fields
        return str(err["msg"]).removeprefix("Value error, ")
    return f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def _check_stored(
    mem: BatchMemory,
    home: layout.Home,
    old: KineticBatchStatus,
    accepted_before: bool,
    live: KineticBatchSpec,
    settings: OperatorSettings,
    policy: Policy | None,
) -> list[str]:
    """Once per process: the accepted spec stored for this batch, checked against its status
    and judged again (`kinetic_operator.accepted`); why it may not be used, if so.
    ``accepted_before``: the status has a phase (the operator wrote it)."""
    if mem.stored_checked:
        return []
    if Phase(old.phase).terminal and _from_batch(live) is None:
        return []  # an ended batch acts on nothing stored
    stored, why = read_accepted(home, old.accepted_spec_sha256, accepted_before, live)
    if why is not None:
        return [why]
    if stored is not None:
        problems = judge_stored(stored.spec, live, home, settings, policy)
        if problems:
            return problems
    mem.stored, mem.stored_checked = stored, True
    return []


def _accept(
    mem: BatchMemory, home: layout.Home, spec: KineticBatchSpec
) -> tuple[KineticBatchSpec, str | None]:
    """The spec to act on, and a refusal message if someone changed an immutable field.

    The first spec accepted is stored next to the manifest, so the accepted
    template and inputs survive an operator restart; later edits only take
    effect for maxConcurrent and cancel. Its digest goes into the status with
    the next status write, before any Pod exists (`_vouching`); one already
    vouched for is taken as read back (`_check_stored`). Anything stored that
    nothing vouches for is written over. The name's ``current.json`` is
    pointed at this batch's UID at the same time, so `attach_batch` finds the
    manifest once the batch is deleted.
    """
    uid = home.uid
    if mem.accepted is None:
        if mem.stored is not None:
            mem.accepted, mem.accepted_sha256 = mem.stored.spec, mem.stored.sha256
        else:
            data = accepted_bytes(uid, spec)
            storage.write_bytes(home.current_uri, layout.CurrentRecord(uid=uid).to_bytes())
            storage.write_bytes(home.accepted_spec_uri, data)
            mem.accepted, mem.accepted_sha256 = spec, digest.sha256(data)
    change = immutable_change(mem.accepted, spec)
    if change is None:
        return spec, None
    return merge_mutable(mem.accepted, spec), change


def _resolve_rerun(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    home: layout.Home,
    spec: KineticBatchSpec,
) -> tuple[KineticBatchSpec | None, list[str]]:
    """A ``fromBatch`` spec as it runs, resolved from its source once.

    Later reconciles (and a restarted operator, through the accepted spec
    stored for this UID, which its status vouches for) reuse the first
    resolution, so the rerun keeps the inputs it started with whatever
    happens to the source afterwards. The source is read through the API
    server (`rerun_source`). What it resolves to is judged as any batch's
    spec is: bounds, storage URIs, cross-field rules.
    """
    stored = mem.stored.spec if mem.stored is not None else None
    base = mem.rerun or (
        stored if stored and stored.inputs and stored.inputs.indexes is not None else None
    )
    try:
        if base is not None:
            resolved = spec.model_copy(
                update={
                    "template": base.template,
                    "inputs": base.inputs,
                    "input_mode": base.input_mode,
                }
            )
        else:
            wanted = _from_batch(spec)
            assert wanted is not None
            source = kube.get_kinetic_batch(home.namespace, wanted.name)
            resolved = rerun_spec(spec, load_source(home.root, home.namespace, wanted, source))
    except SourceProblem as exc:
        return None, [str(exc)]
    mem.rerun = resolved
    assert resolved.inputs is not None  # a rerun's are the source's, resolved
    plain = resolved.model_copy(
        update={"inputs": resolved.inputs.model_copy(update={"from_batch": None})}
    )
    bounds = limits.check_batch_spec(
        resolved.wire(), storage_root=home.root, max_inputs=settings.max_inputs
    )
    foreign = foreign_batch_uris(home.root, home.namespace, resolved)
    return resolved, bounds or foreign or validate_batch_spec(plain)


def _from_batch(spec: KineticBatchSpec) -> FromBatch | None:
    """The batch this one reruns, if any (a spec.jobs batch has no inputs)."""
    return spec.inputs.from_batch if spec.inputs is not None else None


def _load_hashes(mem: BatchMemory, spec: KineticBatchSpec) -> list[str]:
    """Read the input hash list once per batch; a bad list fails the batch."""
    uri = spec.inputs.sha256_uri if spec.inputs is not None else None
    if uri is None or spec.inputs is None or mem.hashes is not None:
        return []
    try:
        data = read_at_most(uri, hash_list_max_bytes(spec.inputs.count or 0))
        mem.hashes = parse_sha256_list(
            data, expected_sha256=spec.inputs.sha256, count=spec.inputs.count or 0
        )
    except storage.NotFound:
        return [f"spec.inputs.sha256URI {uri} does not exist"]
    except TooLarge as exc:
        return [f"spec.inputs.sha256URI: {exc}"]
    except ValueError as exc:
        return [f"spec.inputs.sha256URI {uri}: {exc}"]
    return []


def _spec_condition(
    status: KineticBatchStatus, refused: str | None, now: datetime
) -> tuple[KineticBatchStatus, list[Event]]:
    """SpecAccepted=False (and one Warning) while an immutable change is pending."""
    prev = next((c for c in status.conditions if c.type == COND_SPEC), None)
    if refused is None:
        if prev is None or prev.status == "True":
            return status, []
        return with_condition(
            status, COND_SPEC, "True", "Unchanged", "The spec matches the accepted one.", now
        ), []
    message = f"Refused a change to the batch: {refused}. It keeps running as created."
    new = with_condition(status, COND_SPEC, "False", "ImmutableFieldChanged", message, now)
    fresh = prev is None or prev.status != "False" or prev.message != message
    return new, [Event("Warning", "SpecChangeRefused", message)] if fresh else []


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
        recorded = self.mem.recorded
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
            _book(self.mem, self.home).write(header, recorded)
        except Exception as exc:  # noqa: BLE001 — storage down or refusing: retried, shown
            self.mem.debouncer.failed(clock)
            log.warning("Could not write manifest %s: %s", self.uri, exc)
            why = f"Could not write the manifest to {self.uri}: {exc}; retrying."
            self.writer.status(
                with_condition(status, COND_MANIFEST, "False", "WriteFailed", why, self.now)
            )
            return False
        self.mem.debouncer.written(clock)
        where = f"The manifest is under {self.home.prefix}."
        done = with_condition(status, COND_MANIFEST, "True", "Written", where, self.now)
        if vouch or done.wire() != status.wire():
            self.writer.status(done)
        return True
