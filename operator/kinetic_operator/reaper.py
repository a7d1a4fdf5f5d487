"""Finished attempt Pods past their TTL: archive each log, then delete the Pod.

Deciding which Pods are due is pure (`due_pods`); doing it is slow (a log
read through the API server and a storage write per Pod), so it runs off
the reconcile path: a `Reaper` works through the due Pods of an owner in a
few threads while the owner's reconciles go on. The callers hand it only
Pods whose outcome is already recorded, so deleting them can never make an
input run again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from kinetic import storage
from kinetic.model.names import parse_time

from kinetic_operator.kube import Kube
from kinetic_operator.logic.observed import PodView

log = logging.getLogger("kinetic.operator")

Due = tuple[str, str | None, str | None]
"""A Pod to reap: its name, where to archive its log (None: nowhere), its UID (None: any)."""

THREADS = 16  # a log read, a storage write and a DELETE per Pod: latency, not CPU
EPOCH = "1970-01-01T00:00:00Z"


def due_pods(
    pods: Iterable[PodView],
    now: datetime,
    ttl: float,
    skip: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[PodView], float | None]:
    """The finished Pods whose TTL has passed, and seconds until the next one's does."""
    due: list[PodView] = []
    waits: list[float] = []
    for pod in pods:
        if pod.gone or pod.deleting or not pod.terminal or pod.name in skip:
            continue
        ended = parse_time(pod.finished_at or pod.start_time or pod.created or EPOCH)
        left = ttl - (now - ended).total_seconds()
        if left > 0:
            waits.append(left)
        else:
            due.append(pod)
    return due, (min(waits) if waits else None)


def archive_log(kube: Kube, namespace: str, pod: str, uri: str) -> bool:
    """Copy a finished Pod's log to storage, so handles can read it after the Pod is gone.

    A log longer than the archive keeps (KINETIC_LOG_ARCHIVE_BYTES) keeps its
    end, after a line saying it was cut (`Kube.pod_log`). A function Pod's
    runner archives its own log (it saw all of it, where the kubelet serves
    only the current file of a rotated log): an archive already there is
    kept, and its Pod's log is not even read.
    """
    try:
        if storage.exists(uri):
            return True
        data = kube.pod_log(namespace, pod)
        if data is not None:
            storage.write_if_generation(uri, data, 0)
    except storage.PreconditionFailed:
        return True  # the runner's archive landed meanwhile: it holds more than ours
    except Exception as exc:  # noqa: BLE001 — storage or the node down: keep the Pod, retry
        log.warning("Could not archive the log of %s/%s to %s: %s", namespace, pod, uri, exc)
        return False
    return True


def stop_pod(kube: Kube, namespace: str, name: str, view: PodView | None, uri: str | None) -> None:
    """Stop a live attempt Pod (a cancel, a gang torn down, a stray).

    One that is running gets its log archived first (when there is a URI),
    so an attempt stopped mid-way, or a gang member stopped once rank 0
    finished, keeps its log: deleted, a Pod's log is gone. One that cannot
    have started goes at once (`cannot_have_started`).
    """
    if view is not None and view.phase == "Running" and uri is not None:
        archive_log(kube, namespace, name, uri)
    now = view is not None and cannot_have_started(view)
    kube.delete_pod(namespace, name, now=now, uid=view.uid if view else None)


# Why a container is waiting when the kubelet could not make it at all: no process of it
# has run, and none will before the reason changes.
NEVER_MADE = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def cannot_have_started(view: PodView) -> bool:
    """Whether a Pod may be deleted with no grace period: one never scheduled, or whose
    container the kubelet could not make (its image cannot be pulled, its config is
    wrong). A graceful delete of those waited on the kubelet's image pulls, which kept a
    Pod in ImagePullBackOff Terminating for a minute or more.

    Phase ``Pending`` alone is not enough: it lasts while the container starts, and the
    watch may not have shown ``Running`` yet. Deleted at once, such a Pod leaves the API
    while its process still runs, until the kubelet notices: a cancelled input went on
    writing for seconds after its Pod was gone.
    """
    if view.phase != "Pending":
        return False
    return view.unschedulable is not None or view.waiting_reason in NEVER_MADE


def reap_one(kube: Kube, namespace: str, pod: str, uri: str | None, uid: str | None = None) -> None:
    """Archive the Pod's log (when given a URI), then delete the Pod (only the instance
    ``uid``, when given); a Pod whose log could not be archived is kept for a later pass."""
    if uri is not None and not archive_log(kube, namespace, pod, uri):
        return
    kube.delete_pod(namespace, pod, now=True, uid=uid)


@dataclass
class Reaper:
    """Archives and deletes due Pods in the background, each Pod as soon as it is due.

    Every Pod is its own piece of work, not part of a pass over an owner's
    due Pods: a Pod whose log is slow to read holds back no other, and Pods
    that fall due while others are being reaped start at once. (One pass
    per owner at a time kept up with ~12 Pods/s at 10,000 inputs, less than
    the batch finished.) ``busy`` is read by reconciles on other threads,
    hence the lock.
    """

    busy: dict[Hashable, set[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(THREADS, thread_name_prefix="reaper")
    )

    def in_flight(self, owner: Hashable) -> set[str]:
        """Pods of ``owner`` being reaped now (callers skip them)."""
        with self.lock:
            return set(self.busy.get(owner, ()))

    def submit(self, kube: Kube, owner: Hashable, namespace: str, work: list[Due]) -> None:
        """Start reaping each Pod of ``work`` that is not being reaped already."""
        for pod, uri, uid in work:
            with self.lock:
                flying = self.busy.setdefault(owner, set())
                if pod in flying:
                    continue
                flying.add(pod)
            future = self.pool.submit(reap_one, kube, namespace, pod, uri, uid)
            future.add_done_callback(functools.partial(self._done, owner, namespace, pod))

    def idle(self) -> bool:
        with self.lock:
            return not self.busy

    def _done(self, owner: Hashable, namespace: str, pod: str, future: Future[None]) -> None:
        error = future.exception()
        if error is not None:  # the next reconcile hands the Pod over again
            log.warning("Deleting finished Pod %s/%s failed; will retry: %s", namespace, pod, error)
        with self.lock:
            flying = self.busy.get(owner)
            if flying is not None:
                flying.discard(pod)
                if not flying:
                    del self.busy[owner]
