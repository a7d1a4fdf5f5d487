"""Finished attempt Pods past their TTL: archive each log, then delete the Pod.

Deciding which Pods are due is pure (`due_pods`); doing it is slow (a log
read through the API server and a storage write per Pod), so it runs off
the reconcile path: a `Reaper` works through the due Pods of an owner in a
few threads while the owner's reconciles go on. The callers hand it only
Pods whose outcome is already recorded, so deleting them can never make an
input run again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from kinetic import storage
from kinetic.names import parse_time

from kinetic_operator.kube import Kube
from kinetic_operator.observed import PodView

log = logging.getLogger("kinetic.operator")

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
    """Copy a finished Pod's log to storage, so handles can read it after the Pod is gone."""
    try:
        data = kube.pod_log(namespace, pod)
        if data is not None:
            storage.write_bytes(uri, data)
    except Exception as exc:  # noqa: BLE001 — storage or the node down: keep the Pod, retry
        log.warning("Could not archive the log of %s/%s to %s: %s", namespace, pod, uri, exc)
        return False
    return True


def reap(kube: Kube, namespace: str, work: list[tuple[str, str | None]]) -> None:
    """Archive (when given a URI) and delete each ``(pod, archive URI)``; a Pod whose log
    could not be archived is kept for the next pass."""

    def one(item: tuple[str, str | None]) -> None:
        pod, uri = item
        if uri is not None and not archive_log(kube, namespace, pod, uri):
            return
        kube.delete_pod(namespace, pod, now=True)

    with ThreadPoolExecutor(max_workers=min(THREADS, max(1, len(work)))) as pool:
        list(pool.map(one, work))


@dataclass
class Reaper:
    """Runs `reap` in the background, one pass per owner at a time."""

    busy: dict[Hashable, set[str]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def in_flight(self, owner: Hashable) -> set[str]:
        """Pods of ``owner`` being reaped now (callers skip them)."""
        return self.busy.get(owner, set())

    def submit(
        self, kube: Kube, owner: Hashable, namespace: str, work: list[tuple[str, str | None]]
    ) -> None:
        """Start reaping ``work`` unless a pass for ``owner`` is running (it is retried later)."""
        if not work or owner in self.busy:
            return
        self.busy[owner] = {pod for pod, _ in work}

        async def run() -> None:
            try:
                await asyncio.to_thread(reap, kube, namespace, work)
            except Exception:  # noqa: BLE001 — the next pass tries again
                log.exception("Deleting finished Pods of %s failed; will retry", owner)
            finally:
                self.busy.pop(owner, None)

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
