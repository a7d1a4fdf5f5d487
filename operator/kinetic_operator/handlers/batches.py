"""KineticBatch handlers: every event about a batch or one of its children reconciles the batch.

Level-triggered, like the KineticJob handlers: an event only names the
batch; `reconcile_batch` reads the batch from the API, takes the children
from a Kopf index (`batch_children`), asks `batch_logic.decide_batch` what to
do, writes the status conditionally on the resourceVersion it read, and only
then acts — writes the manifest, creates children, cancels children, posts
events. All of a batch's triggers go through one `Serializer` key, so a burst
of child events costs a reconcile or two, and no two reconciles of a batch
ever overlap. No polling: the only timed wake-ups are the manifest debounce
and "launch the next slice" for batches with no concurrency limit.

What the operator keeps in memory (`Memory`) is a cache, never the truth:
the accepted spec and the input hashes (both re-read from storage after a
restart), the last manifest written, and what it last saw of each child —
which is what makes a *deleted* child distinguishable from a child the
index has not caught up with yet (see `_children`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from kinetic import storage
from kinetic.fanout import (
    child_labels,
    child_name,
    child_spec,
    parse_sha256_list,
    validate_batch_spec,
)
from kinetic.ranges import IndexSet
from kinetic.resources import (
    API_VERSION,
    BATCH_KIND,
    BATCH_PLURAL,
    GROUP,
    JOB_KIND,
    JOB_PLURAL,
    LABEL_BATCH,
    VERSION,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
)
from pydantic import ValidationError

from kinetic_operator import batch_logic
from kinetic_operator.batch_logic import (
    Cancel,
    ChildObservation,
    Event,
    Launch,
    WriteManifest,
    immutable_change,
    merge_mutable,
    observe_child,
    with_condition,
)
from kinetic_operator.kube import Kube, Rejected, get_kube, until_settled
from kinetic_operator.manifest import Debouncer, build_manifest, encode_manifest, manifest_uri
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings, get_settings

log = logging.getLogger("kinetic.operator")

LABELLED = {LABEL_BATCH: kopf.PRESENT}
MAX_LAUNCHES = 200  # children created per reconcile; more follow at once (maxConcurrent: null)
MANIFEST_INTERVAL = 10.0  # seconds between routine manifest writes of one batch
LIVE_GETS = 20  # above this many children to double-check, one LIST instead of GETs
CREATE_THREADS = 8

COND_MANIFEST = "ManifestWritten"
COND_SPEC = "SpecAccepted"

serializer = Serializer()


class ManifestNotWritten(Exception):
    """The manifest must exist before the first child; the Serializer retries with backoff."""


@dataclass
class Memory:
    """What the operator remembers about one batch between reconciles — caches only."""

    uid: str | None = None
    last: dict[int, ChildObservation] = field(default_factory=dict)  # last sight of each child
    tombstones: dict[int, ChildObservation] = field(default_factory=dict)  # confirmed gone
    rejected: dict[int, ChildObservation] = field(default_factory=dict)  # could not be created
    accepted: KineticBatchSpec | None = None
    hashes: list[str | None] | None = None
    previous: dict[str, Any] | None = None  # the manifest as last written
    previous_loaded: bool = False
    debouncer: Debouncer = field(default_factory=lambda: Debouncer(interval=MANIFEST_INTERVAL))
    wake_at: float | None = None

    def reset(self, uid: str | None) -> None:
        """A batch of the same name but another uid: forget the old one's caches."""
        fresh = Memory(uid=uid, last=self.last, tombstones=self.tombstones)
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))


memory: dict[tuple[str, str], Memory] = {}


def _memory(key: tuple[str, str]) -> Memory:
    return memory.setdefault(key, Memory())


# ----------------------------------------------------------------------- index


@kopf.index(GROUP, VERSION, JOB_PLURAL, labels=LABELLED)
def batch_children(
    namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], tuple[int, ChildObservation]]:
    """Children by (namespace, batch) as (index, observation).

    Also remembers the last sight of each child, so that when a child
    vanishes from the index its last phase is known.
    """
    seen = observe_child(body)
    if seen is None:
        return {}
    key = (namespace, labels[LABEL_BATCH])
    mem = _memory(key)
    mem.last[seen[0]] = seen[1]
    mem.tombstones.pop(seen[0], None)
    return {key: seen}


# ----------------------------------------------------------------------- triggers


@kopf.on.event(GROUP, VERSION, BATCH_PLURAL)
async def kinetic_batch_event(
    type: str, namespace: str, name: str, batch_children: kopf.Index, **_: Any
) -> None:
    """A batch was created or changed: reconcile it. Deleted: forget it."""
    if type == "DELETED":
        memory.pop((namespace, name), None)
        return
    await reconcile_batch(namespace, name, batch_children)


@kopf.on.event(GROUP, VERSION, JOB_PLURAL, labels=LABELLED)
async def batch_child_event(
    type: str,
    namespace: str,
    name: str,
    labels: kopf.Labels,
    body: kopf.Body,
    batch_children: kopf.Index,
    **_: Any,
) -> None:
    """A child changed or went away: reconcile its batch.

    A DELETED event becomes a tombstone only once a live read confirms the
    child is gone: deciding "deleted" from a lagging cache would relaunch it.
    """
    batch = labels[LABEL_BATCH]
    key = (namespace, batch)
    if type == "DELETED":
        seen = observe_child(body)
        mem = memory.get(key)
        if seen is None or mem is None:
            return  # not a child we track, or its batch is gone already
        gone = await asyncio.to_thread(lambda: get_kube().get_kinetic_job(namespace, name) is None)
        if gone:
            mem.tombstones[seen[0]] = dataclasses.replace(seen[1], present=False)
    await reconcile_batch(namespace, batch, batch_children)


@kopf.on.cleanup()
def stop_batch_retries(**_: Any) -> None:
    """Pending retries and wake-ups die with the process; a restart re-lists everything."""
    serializer.cancel_all()


# ----------------------------------------------------------------------- admission


def check_spec_update(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """Raise `kopf.AdmissionError` (422) if an update changes an immutable field of a batch.

    Only maxConcurrent and cancel may change on an existing batch. Updates
    this cannot judge are allowed: an old spec that does not parse (the
    operator never accepted it either), or a new one that does not (the
    operator fails the batch with a readable message). The operator-side
    refusal (`_accept`) stays in place for updates that bypass the webhook.
    """
    try:
        before = KineticBatchSpec.model_validate((old or {}).get("spec") or {})
        after = KineticBatchSpec.model_validate((new or {}).get("spec") or {})
    except ValidationError:
        return
    message = immutable_change(before, after)
    if message is not None:
        raise kopf.AdmissionError(message, code=422)


def validate_batch_update(old: kopf.Body | None, body: kopf.Body, **_: Any) -> None:
    """The validating webhook for UPDATE of a KineticBatch (main resource, not status)."""
    check_spec_update(dict(old) if old is not None else None, dict(body))


if get_settings().webhook_enabled:
    # Fail open (failurePolicy Ignore): with the operator down, updates pass and
    # the reconcile's refusal still applies. Not persistent: Kopf removes the
    # webhook from the configuration when the operator stops cleanly.
    kopf.on.validate(
        GROUP,
        VERSION,
        BATCH_PLURAL,
        id="batch-immutable-spec",
        operations=["UPDATE"],
        side_effects=False,
        ignore_failures=True,
        persistent=False,
    )(validate_batch_update)


# ----------------------------------------------------------------------- reconcile


@dataclass(frozen=True)
class ChildrenView:
    """Immutable copies, taken on the event loop, of what the reconcile thread needs."""

    indexed: dict[int, ChildObservation]
    tombstones: dict[int, ChildObservation]
    last: dict[int, ChildObservation]
    rejected: dict[int, ChildObservation]


async def reconcile_batch(namespace: str, name: str, batch_children: kopf.Index) -> None:
    """Bring KineticBatch namespace/name one step closer to done; serialized per batch."""
    key = (namespace, name)
    loop = asyncio.get_running_loop()

    async def work() -> None:
        mem = _memory(key)
        view = ChildrenView(
            indexed=dict(batch_children.get(key, ())),
            tombstones=dict(mem.tombstones),
            last=dict(mem.last),
            rejected=dict(mem.rejected),
        )
        recheck = await asyncio.to_thread(
            reconcile_batch_sync, get_kube(), get_settings(), mem, namespace, name, view
        )
        if recheck is None:
            return
        at = loop.time() + recheck
        if mem.wake_at is None or at < mem.wake_at - 0.05:
            mem.wake_at = at
            serializer.later(key, wake, recheck)

    async def wake() -> None:
        _memory(key).wake_at = None
        await work()

    await serializer.run(key, work)


def reconcile_batch_sync(
    kube: Kube,
    settings: OperatorSettings,
    mem: Memory,
    namespace: str,
    name: str,
    view: ChildrenView,
    now: datetime | None = None,
) -> float | None:
    """Read, decide, write status, act — from the top again if the batch moved meanwhile.

    Returns in how many seconds to look again (manifest debounce, more
    launches), or None.
    """
    return until_settled(
        lambda _: _reconcile_once(
            kube, settings, mem, namespace, name, view, now or datetime.now(UTC)
        ),
        f"{namespace}/{name}",
    )


def _reconcile_once(
    kube: Kube,
    settings: OperatorSettings,
    mem: Memory,
    namespace: str,
    name: str,
    view: ChildrenView,
    now: datetime,
) -> float | None:
    body = kube.get_kinetic_batch(namespace, name)
    if body is None:
        memory.pop((namespace, name), None)
        return None  # deleted; its children go with it through ownerReferences
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # being deleted: start nothing new
    if mem.uid != meta.get("uid"):
        mem.reset(meta.get("uid"))
    raw = body.get("status") or {}
    old = _parse_status(raw, namespace, name)
    write = _Writer(kube, namespace, name, raw, meta.get("resourceVersion"))
    generation = meta.get("generation")

    spec, problems = _load_spec(body, settings)
    running = not Phase(old.phase).terminal
    refused: str | None = None
    if spec is not None and not problems and running:
        spec, refused = _accept(mem, settings.storage_root or "", name, meta.get("uid"), spec)
        problems = _load_hashes(mem, spec)
    if spec is None or problems:
        decision = batch_logic.invalid_batch(old, problems, now, generation=generation)
        write.status(decision.status)
        for event in decision.of(Event):
            kube.post_event(body, event.type, event.reason, event.message)
        return None

    children = _children(kube, mem, namespace, name, old, view)
    decision = batch_logic.decide_batch(
        spec, old, children, now, generation=generation, max_launches=MAX_LAUNCHES
    )
    status, spec_events = _spec_condition(decision.status, refused, now)
    if decision.write_status or status.wire() != old.wire():
        # Conflict: nothing below runs; decide again from a fresh read.
        write.status(status, force=bool(decision.launch))
    for event in spec_events:
        kube.post_event(body, "Warning", event.reason, event.message)

    root = settings.storage_root or ""
    clock = time.monotonic()
    manifest = _ManifestWrite(mem, write, root, name, spec, children, meta, now)
    for action in decision.actions:
        match action:
            case WriteManifest(urgent=urgent, blocking=blocking):
                mem.debouncer.mark(clock, urgent=urgent)
                if (blocking or mem.debouncer.due(clock)) and not manifest.run(clock) and blocking:
                    raise ManifestNotWritten(
                        f"{namespace}/{name}: the manifest could not be written, so no child "
                        "is created yet; retrying"
                    )
            case Launch(indexes=indexes):
                _launch(kube, mem, body, spec, root, indexes, view)
            case Cancel(indexes=indexes):
                with ThreadPoolExecutor(max_workers=CREATE_THREADS) as pool:
                    names = [child_name(name, i) for i in indexes]
                    list(pool.map(lambda child: kube.cancel_kinetic_job(namespace, child), names))
            case Event(type=type_, reason=reason, message=message):
                kube.post_event(body, type_, reason, message)
    if _manifest_stale(mem, decision.status, root, name):
        mem.debouncer.mark(clock, urgent=True)
    if mem.debouncer.due(clock):
        manifest.run(clock)

    waits = [w for w in (mem.debouncer.delay(time.monotonic()),) if w is not None]
    if decision.more or (mem.rejected.keys() - view.rejected.keys()):
        waits.append(0.0)
    return min(waits) if waits else None


# ----------------------------------------------------------------------- pieces


class _Writer:
    """Conditional status writes that follow our own resourceVersion."""

    def __init__(
        self, kube: Kube, namespace: str, name: str, raw: dict[str, Any], version: str | None
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.raw, self.version = raw, version

    @property
    def current(self) -> KineticBatchStatus:
        return KineticBatchStatus.model_validate(self.raw)

    def status(self, status: KineticBatchStatus, *, force: bool = False) -> None:
        """Patch the status if it changed; `force` patches even an equal one, as a
        compare-and-swap on the resourceVersion before creating children."""
        # Empty range strings are left out: this API server reads "" in a merge
        # patch as null, which the schema refuses; absent means "" when read back.
        new = {k: v for k, v in status.wire().items() if v != ""}
        if new == self.raw and not force:
            return
        written = self.kube.patch_status(
            self.namespace, self.name, new, self.raw, self.version, plural=BATCH_PLURAL
        )
        if written is not None:
            self.version = (written.get("metadata") or {}).get("resourceVersion")
            self.raw = new


def _parse_status(raw: dict[str, Any], namespace: str, name: str) -> KineticBatchStatus:
    try:
        return KineticBatchStatus.model_validate(raw)
    except ValueError as exc:
        log.warning("Ignoring unreadable status of batch %s/%s: %s", namespace, name, exc)
        return KineticBatchStatus()


def _load_spec(
    body: dict[str, Any], settings: OperatorSettings
) -> tuple[KineticBatchSpec | None, list[str]]:
    """The spec, or the sentences that say why it cannot run."""
    if not settings.storage_root:
        return None, [
            "the operator has no storage root (KINETIC_STORAGE_ROOT) for the batch manifest"
        ]
    try:
        spec = KineticBatchSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return None, [
            f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        ]
    return spec, validate_batch_spec(spec)


def accepted_spec_uri(root: str, group_id: str) -> str:
    """Where the spec a batch was accepted with is kept: next to its manifest."""
    return f"{root.rstrip('/')}/batches/{group_id}/accepted-spec.json"


def _accept(
    mem: Memory, root: str, name: str, uid: str | None, spec: KineticBatchSpec
) -> tuple[KineticBatchSpec, str | None]:
    """The spec to act on, and a refusal message if someone changed an immutable field.

    The first spec seen is stored (create-only) next to the manifest, so the
    accepted template and inputs survive an operator restart; later edits
    only take effect for maxConcurrent and cancel.
    """
    if mem.accepted is None:
        uri = accepted_spec_uri(root, name)
        doc = {"uid": uid, "spec": spec.wire()}
        try:
            storage.write_if_generation(uri, encode_manifest(doc), 0)
            mem.accepted = spec
        except storage.PreconditionFailed:
            stored = _read_json(uri)
            if stored and stored.get("uid") == uid:
                mem.accepted = KineticBatchSpec.model_validate(stored["spec"])
            else:  # left over from an older batch of the same name
                storage.write_bytes(uri, encode_manifest(doc))
                mem.accepted = spec
    change = immutable_change(mem.accepted, spec)
    if change is None:
        return spec, None
    return merge_mutable(mem.accepted, spec), change


def _load_hashes(mem: Memory, spec: KineticBatchSpec) -> list[str]:
    """Read the input hash list once per batch; a bad list fails the batch."""
    uri = spec.inputs.sha256_uri
    if uri is None or mem.hashes is not None:
        return []
    try:
        data = storage.read_bytes(uri)
        mem.hashes = parse_sha256_list(
            data, expected_sha256=spec.inputs.sha256, count=spec.inputs.count or 0
        )
    except storage.NotFound:
        return [f"spec.inputs.sha256URI {uri} does not exist"]
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


def _children(
    kube: Kube,
    mem: Memory,
    namespace: str,
    name: str,
    old: KineticBatchStatus,
    view: ChildrenView,
) -> dict[int, ChildObservation]:
    """What the decision sees: the index, tombstones, refused creates, and live checks.

    An active child that this process has seen but that is missing from the
    index was either deleted (its DELETED event may still be on its way) or
    the index is simply behind. Only a live read can tell; without it the
    decision would create the child again and run its input twice.
    """
    children = dict(view.indexed)
    for index, obs in [*view.tombstones.items(), *view.rejected.items()]:
        children.setdefault(index, obs)
    suspects = [
        i for i in IndexSet.parse(old.active_indexes) if i not in children and i in view.last
    ]
    if not suspects:
        return children
    if len(suspects) <= LIVE_GETS:
        found = [kube.get_kinetic_job(namespace, child_name(name, i)) for i in suspects]
        bodies = [b for b in found if b is not None]
    else:
        bodies = kube.list_batch_children(namespace, name)
    live = dict(filter(None, (observe_child(b) for b in bodies)))
    for i in suspects:
        if i in live:
            children[i] = live[i]
        else:
            mem.tombstones[i] = children[i] = dataclasses.replace(view.last[i], present=False)
    return children


def _launch(
    kube: Kube,
    mem: Memory,
    body: dict[str, Any],
    spec: KineticBatchSpec,
    root: str,
    indexes: IndexSet,
    view: ChildrenView,
) -> None:
    """Create the children for `indexes`, a few at a time; AlreadyExists is success.

    A child the API server refuses (or an input without a hash) is recorded
    as a failed child in memory, so the next decision marks its input
    failed instead of retrying a create that cannot work.
    """
    meta = body["metadata"]
    batch, namespace = meta["name"], meta["namespace"]
    owner = {
        "apiVersion": API_VERSION,
        "kind": BATCH_KIND,
        "name": batch,
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }

    def one(index: int) -> None:
        if index in view.last and index not in view.indexed and index not in view.tombstones:
            return  # seen before and vanished: never recreate (see _children)
        sha = None
        if mem.hashes is not None:
            sha = mem.hashes[index]
            if sha is None:
                mem.rejected[index] = _refused(index, "the input hash list has no entry for it")
                return
        child = {
            "apiVersion": API_VERSION,
            "kind": JOB_KIND,
            "metadata": {
                "name": child_name(batch, index),
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "kinetic",
                    **child_labels(batch, index),
                },
                "ownerReferences": [owner],
            },
            "spec": child_spec(batch, spec, index, root, input_sha256=sha).wire(),
        }
        try:
            kube.create_kinetic_job(child)
        except Rejected as exc:
            mem.rejected[index] = _refused(index, f"Kubernetes rejected it: {exc}")

    with ThreadPoolExecutor(max_workers=min(CREATE_THREADS, max(1, len(indexes)))) as pool:
        list(pool.map(one, indexes))


def _refused(index: int, why: str) -> ChildObservation:
    return ChildObservation(
        phase=Phase.FAILED, present=False, message=f"input {index} could not be launched: {why}"
    )


def _read_json(uri: str) -> dict[str, Any] | None:
    try:
        return json.loads(storage.read_bytes(uri))
    except storage.NotFound:
        return None
    except ValueError:
        log.warning("Ignoring unreadable JSON at %s", uri)
        return None


def _manifest_stale(mem: Memory, status: KineticBatchStatus, root: str, name: str) -> bool:
    """After a restart: does the stored manifest lag the status (a write lost mid-crash)?"""
    if mem.previous_loaded or status.manifest_uri is None:
        return False
    mem.previous_loaded = True
    mem.previous = _read_json(status.manifest_uri or manifest_uri(root, name))
    prev = mem.previous or {}
    return prev.get("phase") != Phase(status.phase).value or prev.get("launched") != status.launched


class _ManifestWrite:
    """Write the manifest as the batch stands, and record the outcome in the status."""

    def __init__(
        self,
        mem: Memory,
        write: _Writer,
        root: str,
        name: str,
        spec: KineticBatchSpec,
        children: dict[int, ChildObservation],
        meta: dict[str, Any],
        now: datetime,
    ) -> None:
        self.mem, self.writer, self.uri = mem, write, manifest_uri(root, name)
        self.name, self.spec, self.children, self.meta, self.now = name, spec, children, meta, now

    def run(self, clock: float) -> bool:
        status = self.writer.current
        if not self.mem.previous_loaded:
            _manifest_stale(self.mem, status, "", self.name)
        manifest = build_manifest(
            self.name,
            self.spec,
            status,
            self.children,
            created=self.meta.get("creationTimestamp"),
            now=self.now,
            previous=self.mem.previous,
        )
        try:
            storage.write_bytes(self.uri, encode_manifest(manifest))
        except Exception as exc:  # noqa: BLE001 — storage down or refusing: retried, shown
            self.mem.debouncer.failed(clock)
            log.warning("Could not write manifest %s: %s", self.uri, exc)
            why = f"Could not write the manifest to {self.uri}: {exc}; retrying."
            self.writer.status(
                with_condition(status, COND_MANIFEST, "False", "WriteFailed", why, self.now)
            )
            return False
        self.mem.debouncer.written(clock)
        self.mem.previous = manifest
        self.mem.previous_loaded = True
        done = status.model_copy(update={"manifest_uri": self.uri})
        self.writer.status(
            with_condition(
                done, COND_MANIFEST, "True", "Written", f"The manifest is at {self.uri}.", self.now
            )
        )
        return True
