"""KineticJob handlers: every event about a job or one of its attempt Pods reconciles it.

Level-triggered: a handler never looks at what changed. It names the
KineticJob the event is about and calls `reconcile_job`, which takes the
freshest copy of the KineticJob it has (the watch's, or the answer to its
own last write), its attempt Pods from a Kopf index of small summaries,
asks `job_logic.decide` what to do, and does it. No polling: the watches
deliver every change; the only timed wake-up is the deletion of finished
Pods after their TTL, which the reaper does off the reconcile path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import kopf
from kinetic import storage
from kinetic.model import layout
from kinetic.model.names import LABEL_JOB
from kinetic.model.resources import (
    GROUP,
    JOB_KIND,
    JOB_PLURAL,
    VERSION,
    KineticJobSpec,
    KineticJobStatus,
    Phase,
)

from kinetic_operator import job_logic, metrics, podspec
from kinetic_operator.failures import Failing, reconcile_rounds
from kinetic_operator.handlers.policy import current_policy
from kinetic_operator.job_logic import CreatePod, DeletePod, Event, InvalidSpec
from kinetic_operator.kube import Conflict, Kube, Rejected
from kinetic_operator.observed import PodView, job_key, summarize_pod
from kinetic_operator.policy import Policy, first_acceptance_violations, policy_violations
from kinetic_operator.reaper import due_pods
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import Fresh, operator_state

log = logging.getLogger("kinetic.operator")

LABELLED = {LABEL_JOB: kopf.PRESENT}


@dataclass
class JobMemory:
    """What the operator remembers about one KineticJob between reconciles — a cache only.

    ``creating``: attempts whose Pod this process created and the watch has
    not shown yet (so a lagging index is not mistaken for a lost Pod).
    ``gone``: tombstones of attempt Pods seen and then deleted.
    """

    body: Fresh = field(default_factory=Fresh)
    failing: Failing = field(default_factory=Failing)  # the error last reported, if any
    creating: set[int] = field(default_factory=set)
    gone: dict[int, PodView] = field(default_factory=dict)
    due: list[tuple[str, str | None]] = field(default_factory=list)  # Pods to reap now
    reaping: set[str] = field(default_factory=set)


def _memory(memo: Any, key: tuple[str, str]) -> JobMemory:
    jobs: dict[tuple[str, str], JobMemory] = operator_state(memo).jobs
    return jobs.setdefault(key, JobMemory())


# ----------------------------------------------------------------------- index


@kopf.index("v1", "pods", labels=LABELLED)
def job_pods(body: kopf.Body, **_: Any) -> dict[tuple[str, str], PodView]:
    """Attempt Pods of KineticJobs by (namespace, job), summarised."""
    key, view = job_key(body), summarize_pod(body)
    return {key: view} if key and view else {}


# ----------------------------------------------------------------------- triggers


@kopf.on.event(GROUP, VERSION, JOB_PLURAL)  # type: ignore[arg-type]  # index kwargs
async def kinetic_job_event(
    type: str, namespace: str, name: str, body: kopf.Body, job_pods: kopf.Index, memo: Any, **_: Any
) -> None:
    """A KineticJob was created or changed: reconcile it. Deleted: forget it."""
    key = (namespace, name)
    if type == "DELETED":
        operator_state(memo).jobs.pop(key, None)
        return
    _memory(memo, key).body.offer(dict(body))
    await reconcile_job(namespace, name, job_pods, memo)


@kopf.on.event("v1", "pods", labels=LABELLED)  # type: ignore[arg-type]  # index kwargs
async def job_pod_event(
    type: str, body: kopf.Body, job_pods: kopf.Index, memo: Any, **_: Any
) -> None:
    """An attempt Pod changed or went away: reconcile the KineticJob that owns it."""
    key, view = job_key(body), summarize_pod(body)
    if key is None or view is None:
        return
    if type == "DELETED" and key not in operator_state(memo).jobs:
        return  # its KineticJob is gone (garbage collection): nothing to reconcile
    mem = _memory(memo, key)
    mem.creating.discard(view.attempt)
    if type == "DELETED":
        mem.gone[view.attempt] = replace(view, gone=True)
    await reconcile_job(key[0], key[1], job_pods, memo)


# ----------------------------------------------------------------------- reconcile


async def reconcile_job(namespace: str, name: str, job_pods: kopf.Index, memo: Any) -> None:
    """Bring KineticJob namespace/name one step closer to done; serialized per job.

    The index is read on the event loop (where Kopf updates it) and handed
    to a worker thread as an immutable snapshot, because the API calls block.
    """
    key = (namespace, name)
    state = operator_state(memo)
    serializer: Serializer = state.serializer

    async def work() -> None:
        mem = _memory(memo, key)
        mem.reaping = set(state.reaper.in_flight(("job", *key)))
        pods = by_attempt(job_pods.get(key, ()), mem.gone)
        with metrics.reconcile_timer(metrics.KIND_JOB):
            recheck = await asyncio.to_thread(
                reconcile_job_sync,
                state.kube,
                state.settings,
                namespace,
                name,
                pods,
                mem,
                policy=current_policy(memo),
            )
        if mem.body.get() is None:  # the KineticJob is gone: forget it
            state.jobs.pop(key, None)
            return
        state.reaper.submit(state.kube, ("job", *key), namespace, mem.due)
        if recheck is not None:
            serializer.later(("job", *key), work, recheck)

    await serializer.run(("job", *key), work)


def by_attempt(pods: Iterable[PodView], gone: Mapping[int, PodView]) -> dict[int, PodView]:
    """Attempt number -> the Pod's last sight: the index's, else its tombstone."""
    seen = {p.attempt: p for p in pods}
    return {**gone, **seen}


def reconcile_job_sync(
    kube: Kube,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    pods: Mapping[int, PodView],
    mem: JobMemory,
    now: datetime | None = None,
    policy: Policy | None = None,
) -> float | None:
    """Read, decide, write status, act — redone from a fresh read if someone wrote meanwhile.

    Returns in how many seconds to look again (finished Pods waiting out
    their TTL), or None.
    """

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
            pods,
            mem,
            now or datetime.now(UTC),
            policy,
        ),
    )


def _reconcile_once(
    kube: Kube,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    body: dict[str, Any] | None,
    fresh: bool,
    pods: Mapping[int, PodView],
    mem: JobMemory,
    now: datetime,
    policy: Policy | None = None,
) -> float | None:
    if body is None:
        return None  # deleted; its Pods go with it through ownerReferences
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # being deleted (e.g. foreground cascade): start nothing new

    spec = job_logic.validate_spec(
        name,
        body.get("spec"),
        settings.accelerator_catalog,
        storage_root=settings.storage_root,
        max_disruptions=settings.max_disruptions,
        namespace=namespace,
    )
    old = body.get("status") or {}
    status = _parse_status(old, namespace, name)
    spec = _judged(spec, body, status, settings, policy)
    owner = podspec.Owner(name, namespace, meta.get("uid", ""), JOB_KIND)
    home = podspec.job_home(owner, settings)
    pods = {k: p for k, p in pods.items() if p.belongs_to(meta.get("uid"))}
    decision = job_logic.decide(
        name=name,
        spec=spec,
        status=status,
        pods=pods,
        now=now,
        creating=status.attempt in mem.creating,
        generation=meta.get("generation"),
        bounds=job_logic.Bounds(settings.max_disruptions, settings.attempt_history),
        result_uri=None if isinstance(spec, InvalidSpec) else podspec.result_uri(home, spec),
    )

    # Status first, conditional on the version we read: if it moved, nothing
    # below happens and we decide again from a fresh read. A decision that
    # acts without changing status has no such check, so it must come from a
    # fresh read, not from a cached copy (which may predate a cancel).
    new = decision.status.wire()
    if home is not None and _ends_with_result(old, decision.status):
        _write_current(home, decision.status)  # before the status: a retry writes it again
    if new != old:
        written = kube.patch_status(namespace, name, new, old, meta.get("resourceVersion"))
        mem.body.set(written)
        _count_end(status.phase, decision.status.phase)
    elif not fresh and any(not isinstance(a, Event) for a in decision.actions):
        raise Conflict("acting on a cached copy: read it afresh first")

    for action in decision.actions:
        match action:
            case CreatePod(attempt=n, cause=cause) if not isinstance(spec, InvalidSpec):
                kube.ensure_service_account(namespace, settings.runner_service_account)
                mem.creating.add(n)
                try:
                    if kube.create_pod(podspec.build_job_pod(owner, spec, settings, n)):
                        metrics.attempt_created(metrics.KIND_JOB, cause)
                except Rejected as exc:
                    mem.creating.discard(n)
                    _reject(kube, mem, body, decision.status, new, n, str(exc), now)
                    return None
                except Exception:
                    mem.creating.discard(n)  # not created: the next reconcile tries again
                    raise
            case DeletePod(pod=pod):
                kube.delete_pod(namespace, pod)
            case Event(type=type_, reason=reason, message=message):
                kube.post_event(body, type_, reason, message)
    mem.due = []
    if not Phase(decision.status.phase).terminal:
        return None  # a running job's failed attempts are its history: kept until it ends
    due, wait = due_pods(pods.values(), now, settings.pod_ttl_seconds, mem.reaping)
    mem.due = [(p.name, home.log_uri(p.name) if home else None) for p in due]
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
    record = layout.CurrentRecord(uid=home.uid, result_sha256=status.result_sha256)
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
    # Our own patch above bumped the resourceVersion; this write follows it unconditionally.
    mem.body.set(kube.patch_status(meta["namespace"], meta["name"], failed, written, None))
    metrics.inputs_ended(metrics.KIND_JOB, failed=1)
    kube.post_event(body, "Warning", "Rejected", message)


def _parse_status(raw: dict[str, Any], namespace: str, name: str) -> KineticJobStatus:
    """Our own last status; if someone else mangled it, start from what the Pods show."""
    try:
        return KineticJobStatus.model_validate(raw)
    except ValueError as exc:
        log.warning("Ignoring unreadable status of %s/%s: %s", namespace, name, exc)
        return KineticJobStatus()
