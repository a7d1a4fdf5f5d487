"""KineticJob handlers: every event about a job, its Jobs or its Pods reconciles it.

Level-triggered: a handler never looks at what changed. It names the
KineticJob the event is about and calls `reconcile_job`, which reads the
whole current state — the KineticJob from the API, its attempts' Jobs and
Pods from Kopf's in-memory indexes — asks `job_logic.decide` what to do, and
does it. No timers, no polling: the watches deliver every change, and on a
restart Kopf lists every object again, which reconciles every job once.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import kopf
from kinetic.resources import GROUP, JOB_PLURAL, LABEL_JOB, VERSION, KineticJobStatus, Phase

from kinetic_operator import job_logic, podspec
from kinetic_operator.job_logic import CreateAttempt, DeleteAttempt, Event, InvalidSpec
from kinetic_operator.kube import Conflict, Kube, Rejected, get_kube, until_settled
from kinetic_operator.observed import JobView, PodView, job_key, summarize_job, summarize_pod
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings, get_settings

log = logging.getLogger("kinetic.operator")

LABELLED = {LABEL_JOB: kopf.PRESENT}

serializer = Serializer()


# ----------------------------------------------------------------------- indexes


@kopf.index("batch", "v1", "jobs", labels=LABELLED)
def attempt_jobs(body: kopf.Body, **_: Any) -> dict[tuple[str, str], JobView]:
    """Attempt Jobs by (namespace, KineticJob name), summarised."""
    key = job_key(body)
    return {key: summarize_job(body)} if key else {}


@kopf.index(GROUP, VERSION, JOB_PLURAL)
def kinetic_jobs(
    body: kopf.Body, namespace: str, name: str, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """The last seen copy of each KineticJob, so a reconcile starts without a GET.

    A copy may be behind the API server; that is safe because every action
    follows a status write conditional on the copy's resourceVersion.
    """
    return {(namespace, name): copy.deepcopy(dict(body))}


@kopf.index("v1", "pods", labels=LABELLED)
def attempt_pods(body: kopf.Body, **_: Any) -> dict[tuple[str, str], PodView]:
    """Attempt Pods by (namespace, KineticJob name), summarised."""
    key = job_key(body)
    return {key: summarize_pod(body)} if key else {}


# ----------------------------------------------------------------------- triggers


@kopf.on.event(GROUP, VERSION, JOB_PLURAL)
async def kinetic_job_event(
    namespace: str,
    name: str,
    attempt_jobs: kopf.Index,
    attempt_pods: kopf.Index,
    kinetic_jobs: kopf.Index,
    **_: Any,
) -> None:
    """A KineticJob was created, changed or deleted: reconcile it."""
    await reconcile_job(namespace, name, attempt_jobs, attempt_pods, kinetic_jobs)


@kopf.on.event("batch", "v1", "jobs", labels=LABELLED)
@kopf.on.event("v1", "pods", labels=LABELLED)
async def attempt_event(
    namespace: str,
    labels: kopf.Labels,
    attempt_jobs: kopf.Index,
    attempt_pods: kopf.Index,
    kinetic_jobs: kopf.Index,
    **_: Any,
) -> None:
    """An attempt's Job or Pod changed or went away: reconcile the KineticJob that owns it."""
    await reconcile_job(namespace, labels[LABEL_JOB], attempt_jobs, attempt_pods, kinetic_jobs)


@kopf.on.cleanup()
def stop_retries(**_: Any) -> None:
    """Pending retries die with the process; the next start re-lists everything."""
    serializer.cancel_all()


# ----------------------------------------------------------------------- reconcile


async def reconcile_job(
    namespace: str,
    name: str,
    attempt_jobs: kopf.Index,
    attempt_pods: kopf.Index,
    kinetic_jobs: kopf.Index,
) -> None:
    """Bring KineticJob namespace/name one step closer to done; serialized per job.

    The indexes are read on the event loop (where Kopf updates them) and
    handed to a worker thread as immutable snapshots, because the API calls
    are blocking.
    """
    key = (namespace, name)

    async def work() -> None:
        jobs = tuple(attempt_jobs.get(key, ()))
        pods = tuple(attempt_pods.get(key, ()))
        seen = next(iter(kinetic_jobs.get(key, ())), None)
        recheck = await asyncio.to_thread(
            reconcile_job_sync, get_kube(), get_settings(), namespace, name, jobs, pods, seen=seen
        )
        if recheck is not None:
            serializer.later(key, work, recheck)

    await serializer.run(key, work)


def reconcile_job_sync(
    kube: Kube,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    jobs: Iterable[JobView],
    pods: Iterable[PodView],
    now: datetime | None = None,
    *,
    seen: dict[str, Any] | None = None,
) -> float | None:
    """Read, decide, write status, act — redone from the top if someone wrote meanwhile.

    The first round may start from `seen`, the copy the watch delivered; after
    a conflict every round reads the object afresh. Returns in how many
    seconds to look again, when the decision asked for it.
    """

    def one_round(round_: int) -> float | None:
        copy_ok = round_ == 0 and seen is not None
        body = seen if copy_ok else kube.get_kinetic_job(namespace, name)
        when = now or datetime.now(UTC)
        return _reconcile_once(kube, settings, namespace, name, body, not copy_ok, jobs, pods, when)

    return until_settled(one_round, f"{namespace}/{name}")


def _reconcile_once(
    kube: Kube,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    body: dict[str, Any] | None,
    fresh: bool,
    jobs: Iterable[JobView],
    pods: Iterable[PodView],
    now: datetime,
) -> float | None:
    if body is None:
        return None  # deleted; its Jobs go with it through ownerReferences
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # being deleted (e.g. foreground cascade): start nothing new

    spec = job_logic.validate_spec(
        name,
        body.get("spec"),
        settings.accelerator_catalog,
        storage_root=settings.storage_root,
        max_disruptions=settings.max_disruptions,
    )
    old = body.get("status") or {}
    status = _parse_status(old, namespace, name)
    if _index_may_lag(status, jobs, pods):
        live_jobs, live_pods = kube.read_attempts(namespace, name)
        jobs = [summarize_job(j) for j in live_jobs]
        pods = [summarize_pod(p) for p in live_pods]
    decision = job_logic.decide(
        name=name,
        spec=spec,
        status=status,
        jobs=jobs,
        pods=pods,
        now=now,
        generation=meta.get("generation"),
        bounds=job_logic.Bounds(settings.max_disruptions, settings.attempt_history),
        result_uri=None
        if isinstance(spec, InvalidSpec)
        else podspec.result_uri(name, spec, settings),
    )

    # Status first, conditional on the version we read: if it moved, nothing
    # below happens and we decide again from the fresh object. A decision that
    # acts without changing status has no such check, so it must come from a
    # fresh read, not from the watch's copy (which may predate a cancel).
    new = decision.status.wire()
    if new != old:
        kube.patch_status(namespace, name, new, old, meta.get("resourceVersion"))
    elif not fresh and any(not isinstance(a, Event) for a in decision.actions):
        raise Conflict("acting on the watch's copy: read it afresh first")

    owner = podspec.Owner(name, namespace, meta.get("uid", ""), meta.get("labels") or {})
    for action in decision.actions:
        match action:
            case CreateAttempt(attempt=n) if not isinstance(spec, InvalidSpec):
                try:
                    kube.create_job(podspec.build_job(owner, spec, settings, n))
                except Rejected as exc:
                    _reject(kube, body, decision.status, new, n, str(exc), now)
                    return None
            case DeleteAttempt(job=job):
                kube.delete_job(namespace, job)
            case Event(type=type_, reason=reason, message=message):
                kube.post_event(body, type_, reason, message)
    return decision.recheck_after


def _reject(
    kube: Kube,
    body: dict[str, Any],
    status: KineticJobStatus,
    written: dict[str, Any],
    attempt: int,
    why: str,
    now: datetime,
) -> None:
    """Kubernetes refused the attempt's Job (e.g. an invalid memory quantity): fail the job."""
    meta = body["metadata"]
    job = podspec.attempt_job_name(meta["name"], attempt)
    message = f"Kubernetes rejected Job {job}: {why}"
    failed = job_logic.rejected(status, message, now).wire()
    # Our own patch above bumped the resourceVersion; this write follows it unconditionally.
    kube.patch_status(meta["namespace"], meta["name"], failed, written, None)
    kube.post_event(body, "Warning", "Rejected", message)


def _index_may_lag(
    status: KineticJobStatus, jobs: Iterable[JobView], pods: Iterable[PodView]
) -> bool:
    """True when the indexes miss something the status says exists.

    The Job and Pod indexes come from separate watches, and our own status
    write can overtake both; an absence seen only in the indexes is not yet a
    deletion. A live read settles it — rarely, so this is no polling loop.
    """
    if not status.attempts or Phase(status.phase).terminal:
        return False
    current = status.attempts[-1]
    if all(j.name != current.job for j in jobs):
        return True
    return current.pod is not None and all(p.name != current.pod for p in pods)


def _parse_status(raw: dict[str, Any], namespace: str, name: str) -> KineticJobStatus:
    """Our own last status; if someone else mangled it, start from what the Jobs show."""
    try:
        return KineticJobStatus.model_validate(raw)
    except ValueError as exc:
        log.warning("Ignoring unreadable status of %s/%s: %s", namespace, name, exc)
        return KineticJobStatus()
