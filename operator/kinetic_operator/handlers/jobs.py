"""KineticJob handlers: every event about a job or one of its attempt Pods reconciles it.

Level-triggered: a handler never looks at what changed. It names the
KineticJob the event is about and calls `JOBS.reconcile`, which takes the
freshest copy of the KineticJob it has (the watch's, or the answer to its
own last write), its attempt Pods from a Kopf index of small summaries,
asks `job_logic.decide` what to do, and does it. No polling: the watches
deliver every change; the only timed wake-up is the deletion of finished
Pods after their TTL, which the reaper does off the reconcile path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from kinetic import storage
from kinetic.model import layout
from kinetic.model.catalog import is_tpu
from kinetic.model.data import GCSFUSE_DRIVER
from kinetic.model.names import LABEL_JOB, LABEL_RANK
from kinetic.model.resources import (
    GROUP,
    JOB_KIND,
    JOB_PLURAL,
    VERSION,
    KineticJobSpec,
    KineticJobStatus,
    Phase,
)

from kinetic_operator import metrics
from kinetic_operator.failures import reconcile_rounds
from kinetic_operator.handlers.events import Key, Kind, ObjectMemory
from kinetic_operator.handlers.owned import create_sealed, ensure_gang_objects
from kinetic_operator.kube import Conflict, Kube
from kinetic_operator.logic import gangs, job_logic, podspec
from kinetic_operator.logic.datavolumes import uses_fuse
from kinetic_operator.logic.errors import Rejected
from kinetic_operator.logic.job_logic import CreatePod, Decision, DeletePod, Event, InvalidSpec
from kinetic_operator.logic.observed import PodView, job_key, summarize_pod
from kinetic_operator.logic.policy import Policy, first_acceptance_violations, policy_violations
from kinetic_operator.reaper import due_pods, stop_pod
from kinetic_operator.settings import OperatorSettings

log = logging.getLogger("kinetic.operator")

LABELLED = {LABEL_JOB: kopf.PRESENT}


@dataclass
class JobMemory(ObjectMemory):
    """What the operator remembers about one KineticJob between reconciles — a cache only.

    ``creating``: attempts whose Pod this process created and the watch has
    not shown yet (so a lagging index is not mistaken for a lost Pod), and
    ``creating_pods`` the same for a gang's members by name.
    ``gone``: tombstones of attempt Pods seen and then deleted, by name.
    """

    creating: set[int] = field(default_factory=set)
    creating_pods: set[str] = field(default_factory=set)
    stopping: set[str] = field(default_factory=set)  # deleted here, not yet seen deleting
    gone: dict[str, PodView] = field(default_factory=dict)

    def saw(self, view: PodView, deleted: bool) -> None:
        """A Pod event: the attempt is no longer being created; a deleted one leaves a
        tombstone."""
        self.creating.discard(view.attempt)
        self.creating_pods.discard(view.name)
        if deleted or view.deleting or view.terminal:
            self.stopping.discard(view.name)
        if deleted:
            self.gone[view.name] = replace(view, gone=True)


# ----------------------------------------------------------------------- index


@kopf.index("v1", "pods", labels=LABELLED)
def job_pods(body: kopf.Body, memo: Any, **_: Any) -> dict[Key, PodView]:
    """Attempt Pods of KineticJobs by (namespace, job), summarised: those the operator made."""
    return JOBS.index_entry(body, memo)


# ----------------------------------------------------------------------- triggers


@kopf.on.event(GROUP, VERSION, JOB_PLURAL)  # type: ignore[arg-type]  # index kwargs
async def kinetic_job_event(
    type: str, namespace: str, name: str, body: kopf.Body, job_pods: kopf.Index, memo: Any, **_: Any
) -> None:
    """A KineticJob was created or changed: reconcile it. Deleted: forget it."""
    await JOBS.object_event(type, (namespace, name), body, job_pods, memo)


@kopf.on.event("v1", "pods", labels=LABELLED)  # type: ignore[arg-type]  # index kwargs
async def job_pod_event(
    type: str, body: kopf.Body, job_pods: kopf.Index, memo: Any, **_: Any
) -> None:
    """An attempt Pod changed or went away: reconcile the KineticJob that owns it."""
    await JOBS.pod_event(type, body, job_pods, memo)


def _attempt_pod(body: Mapping[str, Any]) -> tuple[Key, PodView] | None:
    """The KineticJob an attempt Pod belongs to, and the Pod's summary."""
    key, view = job_key(body), summarize_pod(body)
    return (key, view) if key and view else None


def with_tombstones(pods: Iterable[PodView], gone: Mapping[str, PodView]) -> list[PodView]:
    """Every attempt Pod's last sight: the index's, else its tombstone."""
    seen = {p.name: p for p in pods}
    return list({**gone, **seen}.values())


@dataclass(frozen=True)
class JobPods:
    """What a reconcile sees of a job's Pods, all read at one moment: the Pods, and the gang
    members this process is creating or deleting that the watch has not shown so yet (a
    later read could miss one the watch just showed, while these Pods still lack it)."""

    pods: list[PodView]
    making: frozenset[str] = frozenset()
    stopping: frozenset[str] = frozenset()


def observe_job(pods: Iterable[PodView], mem: JobMemory) -> JobPods:
    """The job's Pods as a reconcile sees them, with its memory of the same moment."""
    return JobPods(
        with_tombstones(pods, mem.gone), frozenset(mem.creating_pods), frozenset(mem.stopping)
    )


# ----------------------------------------------------------------------- reconcile


def reconcile_job_sync(
    kube: Kube,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    pods: JobPods | Iterable[PodView],
    mem: JobMemory,
    now: datetime | None = None,
    policy: Policy | None = None,
) -> float | None:
    """Read, decide, write status, act — redone from a fresh read if someone wrote meanwhile.

    Returns in how many seconds to look again (finished Pods waiting out
    their TTL), or None.
    """
    seen = pods if isinstance(pods, JobPods) else observe_job(pods, mem)

    return reconcile_rounds(
        kube,
        mem,
        JOB_PLURAL,
        f"{namespace}/{name}",
        lambda: kube.get_kinetic_job(namespace, name),
        lambda body, fresh: _reconcile_once(
            kube,
            settings,
            namespace,
            name,
            body,
            fresh,
            seen,
            mem,
            now or datetime.now(UTC),
            policy,
        ),
    )


def _reconcile_in_thread(
    kube: Kube,
    settings: OperatorSettings,
    mem: JobMemory,
    namespace: str,
    name: str,
    seen: JobPods,
    policy: Policy,
) -> float | None:
    """A reconcile as the shared plumbing runs it: under the policy in force, now."""
    return reconcile_job_sync(kube, settings, namespace, name, seen, mem, policy=policy)


JOBS: Kind[JobMemory, JobPods] = Kind(
    name="job",
    metric=metrics.KIND_JOB,
    memories=lambda state: state.jobs,
    new_memory=JobMemory,
    pod_of=_attempt_pod,
    saw_pod=lambda mem, view, deleted: mem.saw(view, deleted),
    observe=observe_job,
    reconcile_sync=_reconcile_in_thread,
)


def _reconcile_once(
    kube: Kube,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    body: dict[str, Any] | None,
    fresh: bool,
    seen: JobPods,
    mem: JobMemory,
    now: datetime,
    policy: Policy | None = None,
) -> float | None:
    """One round: load the job, accept its spec, observe its Pods, decide, record, act.

    The decision is recorded — the status written, conditional on the
    version read — before anything is done about it: if the job moved,
    nothing is done and the round is decided again from a fresh read.
    """
    job = _load(kube, settings, mem, namespace, name, body, fresh, now, policy)
    if job is None:
        return None  # deleted (its Pods go with it through ownerReferences), or being deleted
    spec = _accept_spec(job)
    own = [
        p
        for p in seen.pods
        if p.belongs_to(job.meta.get("uid")) and job_logic.recorded_instance(p, job.old)
    ]
    hosts = gangs.hosts_of_spec(spec, job.settings.accelerator_catalog, own)
    decision = _decide(job, spec, replace(seen, pods=own), hosts)
    written = _record(job, decision)
    if not _act(job, spec, decision, written, {p.name: p for p in own}, hosts):
        return None  # Kubernetes refused a Pod: the job has failed
    return _reap(job, decision, own)


# ----------------------------------------------------------------------- the steps


@dataclass
class _Job:
    """One round's copy of the KineticJob, and what the round talks to."""

    kube: Kube
    settings: OperatorSettings
    mem: JobMemory
    namespace: str
    name: str
    body: dict[str, Any]
    meta: dict[str, Any]
    raw: dict[str, Any]  # the status as read
    old: KineticJobStatus  # the same, parsed
    owner: podspec.Owner
    home: layout.Home | None  # its storage (None: the operator has no storage root)
    fresh: bool  # the copy was just read from the API server
    now: datetime
    policy: Policy | None


def _load(
    kube: Kube,
    settings: OperatorSettings,
    mem: JobMemory,
    namespace: str,
    name: str,
    body: dict[str, Any] | None,
    fresh: bool,
    now: datetime,
    policy: Policy | None,
) -> _Job | None:
    """The KineticJob as this round sees it; None when it is gone or being deleted
    (e.g. a foreground cascade): start nothing new."""
    if body is None:
        return None
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    raw = body.get("status") or {}
    old = _parse_status(raw, namespace, name)
    owner = podspec.Owner(name, namespace, meta.get("uid", ""), JOB_KIND)
    home = podspec.job_home(owner, settings)
    return _Job(
        kube, settings, mem, namespace, name, body, meta, raw, old, owner, home, fresh, now, policy
    )


def _accept_spec(job: _Job) -> KineticJobSpec | InvalidSpec:
    """The spec as it may run: valid, and as the policy in force lets it run."""
    settings = job.settings
    spec = job_logic.validate_spec(
        job.name,
        job.body.get("spec"),
        settings.accelerator_catalog,
        storage_root=settings.storage_root,
        max_disruptions=settings.max_disruptions,
        namespace=job.namespace,
    )
    return _judged(spec, job.body, job.old, settings, job.policy)


def _decide(job: _Job, spec: KineticJobSpec | InvalidSpec, seen: JobPods, hosts: int) -> Decision:
    """Ask `job_logic.decide`, with a gang's members (``hosts`` of them, resolved once this
    round accepted the spec) seen as one view per attempt."""
    settings = job.settings
    views, gang = gangs.see(
        seen.pods,
        hosts,
        job.now,
        timedelta(seconds=settings.gang_scheduling_seconds),
        seen.making,
        {r.attempt: r for r in job.old.attempts},
        stopping=seen.stopping,
    )
    return job_logic.decide(
        name=job.name,
        spec=spec,
        status=job.old,
        pods=views,
        gang=gang,
        dns=settings.rendezvous == "dns",
        now=job.now,
        creating=job.old.attempt in job.mem.creating,
        generation=job.meta.get("generation"),
        bounds=job_logic.Bounds(
            settings.max_disruptions, settings.attempt_history, settings.unschedulable_seconds
        ),
        result_uri=None if isinstance(spec, InvalidSpec) else podspec.result_uri(job.home, spec),
    )


def _record(job: _Job, decision: Decision) -> dict[str, Any]:
    """Write the status first, conditional on the version read; returns it as written.

    If the version moved, nothing below happens and the round is decided
    again from a fresh read. A decision that acts without changing the
    status has no such check, so it must come from a fresh read, not from a
    cached copy (which may predate a cancel).
    """
    new = decision.status.wire()
    if job.home is not None and _ends_with_result(job.raw, decision.status):
        _write_current(job.home, decision.status)  # before the status: a retry writes it again
    if new != job.raw:
        version = job.meta.get("resourceVersion")
        written = job.kube.patch_status(job.namespace, job.name, new, job.raw, version)
        job.mem.body.set(written)
        _count_end(job.old.phase, decision.status.phase)
    elif not job.fresh and any(not isinstance(a, Event) for a in decision.actions):
        raise Conflict("acting on a cached copy: read it afresh first")
    return new


def _act(
    job: _Job,
    spec: KineticJobSpec | InvalidSpec,
    decision: Decision,
    written: dict[str, Any],
    views: Mapping[str, PodView],
    hosts: int,
) -> bool:
    """Do what was decided; False when Kubernetes refused a Pod (the job failed then)."""
    for action in decision.actions:
        match action:
            case CreatePod() if not isinstance(spec, InvalidSpec):
                if not _create(job, spec, decision, written, action, hosts):
                    return False
            case DeletePod(pod=pod):
                archive = job.home.log_uri(pod) if job.home is not None else None
                stop_pod(job.kube, job.namespace, pod, views.get(pod), archive)
                job.mem.stopping.add(pod)
            case Event(type=type_, reason=reason, message=message):
                job.kube.post_event(job.body, type_, reason, message)
    return True


def _create(
    job: _Job,
    spec: KineticJobSpec,
    decision: Decision,
    written: dict[str, Any],
    create: CreatePod,
    hosts: int,
) -> bool:
    """Create the attempt's Pod (or its gang's ranks); False when Kubernetes refused it and
    the job failed."""
    kube, mem, attempt = job.kube, job.mem, create.attempt
    kube.ensure_service_account(job.namespace, job.settings.runner_service_account)
    pods: list[dict[str, Any]] = []
    mem.creating.add(attempt)
    try:
        service = ensure_gang_objects(kube, job.owner, job.settings) if create.ranks else None
        # a fuse volume it cannot mount: Rejected
        pods = _attempt_pods(job, spec, create, hosts, service)
        mem.creating_pods.update(p["metadata"]["name"] for p in pods)
        for pod in pods:
            first = pod["metadata"]["labels"].get(LABEL_RANK, "0") == "0"  # one per attempt
            made = create_sealed(kube, pod, lambda m, name: podspec.renamed(m, name, job.home))
            if made.name != pod["metadata"]["name"]:  # its own was held: followed by this one
                mem.creating_pods.discard(pod["metadata"]["name"])
                mem.creating_pods.add(made.name)
            if made.created and first:
                metrics.attempt_created(metrics.KIND_JOB, create.cause)
    except Rejected as exc:
        _forget(mem, attempt, pods)
        _reject(kube, mem, job.body, decision.status, written, attempt, str(exc), job.now)
        return False
    except Exception:
        _forget(mem, attempt, pods)  # not created: the next reconcile tries again
        raise
    return True


def _attempt_pods(
    job: _Job, spec: KineticJobSpec, create: CreatePod, hosts: int, service: str | None = None
) -> list[dict[str, Any]]:
    """The Pod of an attempt, or the members of its gang that ``create`` names (under the
    gang's Service ``service``, where there is DNS)."""
    kube, settings = job.kube, job.settings
    fuse = kube.csi_driver_installed(GCSFUSE_DRIVER) if uses_fuse(spec.volumes) else None
    pod = podspec.build_job_pod(job.owner, spec, settings, create.attempt, fuse)
    if not create.ranks:
        return [pod]
    tpu = is_tpu(settings.accelerator_catalog, spec.accelerator)
    return [
        podspec.gang_member(
            pod,
            job.owner,
            rank,
            hosts,
            dns=settings.rendezvous == "dns",
            coordinator=create.coordinator,
            tpu=tpu,
            home=job.home,
            service=service,
            domain=settings.cluster_domain,
        )
        for rank in create.ranks
    ]


def _forget(mem: JobMemory, attempt: int, pods: list[dict[str, Any]]) -> None:
    mem.creating.discard(attempt)
    mem.creating_pods.difference_update(p["metadata"]["name"] for p in pods)


def _reap(job: _Job, decision: Decision, pods: list[PodView]) -> float | None:
    """Hand the reaper an ended job's finished Pods past their TTL; when to look again.

    A running job's failed attempts are its history: kept until it ends.
    """
    mem, home = job.mem, job.home
    mem.due = []
    if not Phase(decision.status.phase).terminal:
        return None
    due, wait = due_pods(pods, job.now, job.settings.pod_ttl_seconds, mem.reaping)
    mem.due = [(p.name, home.log_uri(p.name) if home else None, p.uid) for p in due]
    waits = [w for w in (wait, 30.0 if due else None) if w is not None]
    return min(waits) if waits else None


def _judged(
    spec: KineticJobSpec | InvalidSpec,
    body: dict[str, Any],
    status: KineticJobStatus,
    settings: OperatorSettings,
    policy: Policy | None,
) -> KineticJobSpec | InvalidSpec:
    """The spec as the policy in force lets it run: at first acceptance (whatever got in
    while the webhook was down: InvalidSpec), and again whenever it changed since
    (PolicyDenied), so no generation runs unjudged."""
    if policy is None or isinstance(spec, InvalidSpec):
        return spec
    refused = first_acceptance_violations(
        "KineticJob", body, policy, settings.accelerator_catalog, settings.default_image
    )
    if refused:
        return InvalidSpec("; ".join(refused))
    if not job_logic.changed_after_acceptance(status, spec):
        return spec
    meta = body.get("metadata") or {}
    denied = policy_violations(
        "KineticJob",
        meta.get("namespace") or "",
        body.get("spec"),
        policy,
        settings.accelerator_catalog,
        settings.default_image,
    )
    return job_logic.policy_denied(denied, meta.get("generation")) if denied else spec


def _count_end(before: Phase | str, after: Phase | str) -> None:
    """A status just written that ends the job counts its one input as ended."""
    if Phase(before).terminal:
        return
    if Phase(after) == Phase.SUCCEEDED:
        metrics.inputs_ended(metrics.KIND_JOB, succeeded=1)
    elif Phase(after) == Phase.FAILED:
        metrics.inputs_ended(metrics.KIND_JOB, failed=1)


def _ends_with_result(old: dict[str, Any], new: KineticJobStatus) -> bool:
    """This decision ends the job with a stored result (it was not ended before)."""
    was_terminal = old.get("phase") in {p.value for p in Phase if p.terminal}
    return not was_terminal and Phase(new.phase).terminal and new.result_sha256 is not None


def _write_current(home: layout.Home, status: KineticJobStatus) -> None:
    """Name -> UID and result hash, so a handle can find and check the result once the job is
    deleted. Best effort: storage being down must not keep the job from ending."""
    record = layout.CurrentRecord(
        uid=home.uid, result_sha256=status.result_sha256, result_bytes=status.result_bytes
    )
    try:
        storage.write_bytes(home.current_uri, record.to_bytes())
    except storage.StorageError as exc:
        log.warning("Could not record %s: %s", home.current_uri, exc)


def _reject(
    kube: Kube,
    mem: JobMemory,
    body: dict[str, Any],
    status: KineticJobStatus,
    written: dict[str, Any],
    attempt: int,
    why: str,
    now: datetime,
) -> None:
    """Kubernetes refused the attempt's Pod (e.g. an invalid memory quantity): fail the job."""
    meta = body["metadata"]
    message = f"Kubernetes rejected the Pod of attempt {attempt}: {why}"
    failed = job_logic.rejected(status, message, now).wire()
    # Conditional on the version our own write above left (or the one read): a status
    # someone changed meanwhile is decided again (Conflict), never overwritten.
    version = ((mem.body.get() or body).get("metadata") or {}).get("resourceVersion")
    mem.body.set(kube.patch_status(meta["namespace"], meta["name"], failed, written, version))
    metrics.inputs_ended(metrics.KIND_JOB, failed=1)
    kube.post_event(body, "Warning", "Rejected", message)


def _parse_status(raw: dict[str, Any], namespace: str, name: str) -> KineticJobStatus:
    """Our own last status; if someone else mangled it, start from what the Pods show."""
    try:
        return KineticJobStatus.model_validate(raw)
    except ValueError as exc:
        log.warning("Ignoring unreadable status of %s/%s: %s", namespace, name, exc)
        return KineticJobStatus()
