"""What a wait that timed out says: the object by its kind, and what it is waiting on.

A `TimeoutError` from `result()`, `wait()` or `results()` leaves the work
running, so the useful question is why it has not finished. A KineticJob's
status says it in words (the operator copies the scheduler's or kubelet's
reason into ``status.message`` while an attempt waits: "Attempt 1 cannot be
scheduled yet: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu"). A
KineticBatch's status only counts its inputs, so its waiting Pods are read
once, when the wait has already timed out, and the first one's reason is
named.

Pure, apart from `pod_wait`, which only reads a Pod object already fetched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kinetic.model import names
from kinetic.model import resources as r
from kinetic.model.job_status import JobStatus

if TYPE_CHECKING:
    from kubernetes.client import V1Pod, V1PodStatus

__all__ = ["PodWait", "kind_of", "notify", "pod_wait", "timed_out"]

log = logging.getLogger("kinetic")

_KINDS = {r.JOB_PLURAL: r.JOB_KIND, r.BATCH_PLURAL: r.BATCH_KIND}
_MAX_REASON = 300  # characters of a scheduler's or kubelet's message kept in the sentence


def kind_of(plural: str) -> str:
    """The resource's kind as users read it (``KineticBatch``), from its plural."""
    return _KINDS.get(plural, plural)


@dataclass(frozen=True)
class PodWait:
    """Why one Pending Pod has not started: the scheduler's word, else the kubelet's."""

    pod: str
    index: int | None
    unschedulable: str | None = None  # PodScheduled=False: the scheduler's message
    waiting: str | None = None  # the main container's waiting reason (and message)

    @property
    def reason(self) -> str | None:
        if self.unschedulable:
            return f"cannot be scheduled: {self.unschedulable}"
        if self.waiting:
            return f"is waiting to start: {self.waiting}"
        return None


def pod_wait(pod: V1Pod) -> PodWait | None:
    """The Pod's reason for not running yet, or None when it is not waiting on anything."""
    status = pod.status
    if status is None or status.phase != "Pending" or pod.metadata.deletion_timestamp:
        return None
    index = (pod.metadata.labels or {}).get(names.LABEL_INDEX, "")
    return PodWait(
        pod=pod.metadata.name,
        index=int(index) if index.isdigit() else None,
        unschedulable=_unschedulable(status),
        waiting=_container_waiting(status),
    )


def _unschedulable(status: V1PodStatus) -> str | None:
    """The scheduler's message when it could not place the Pod (PodScheduled=False)."""
    scheduled = next((c for c in status.conditions or [] if c.type == "PodScheduled"), None)
    if scheduled is None or scheduled.status != "False":
        return None
    return scheduled.message or scheduled.reason


def _container_waiting(status: V1PodStatus) -> str | None:
    """The first container's waiting reason (and message) past plain ContainerCreating."""
    for container in status.container_statuses or []:
        state = container.state.waiting if container.state else None
        if state is not None and state.reason and state.reason != "ContainerCreating":
            return f"{state.reason}: {state.message}" if state.message else state.reason
    return None


def timed_out(
    plural: str,
    namespace: str,
    name: str,
    timeout: float,
    obj: Mapping[str, Any] | None,
    pods: Sequence[PodWait] = (),
) -> str:
    """The sentence of a wait that timed out: kind, name, how long, its phase and why it
    waits (the status message; for a batch, its first waiting Pod's reason)."""
    head = f"{kind_of(plural)} {namespace}/{name} did not finish in {timeout:g} s"
    status = (obj or {}).get("status") or {}
    phase = status.get("phase") or "PENDING"
    message = _clip(status.get("message"))
    said = f"{head}: it is {phase}" + (f" ({message.rstrip('.')})" if message else "")
    waiting = [p for p in pods if p.reason]
    if not waiting:
        return said
    first = min(waiting, key=lambda p: (p.index is None, p.index or 0, p.pod))
    who = f"input {first.index}" if first.index is not None else "a Pod"
    more = len(waiting) - 1
    tail = f" ({more} more Pod{'s' if more > 1 else ''} waiting)" if more else ""
    reason = (_clip(first.reason) or "").rstrip(".")
    return f"{said}; {who} (Pod {first.pod}) {reason}{tail}"


def _clip(text: str | None) -> str | None:
    if not text:
        return None
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def notify(callback: Callable[[JobStatus], None] | None, status: JobStatus) -> None:
    """Tell the user's `on_status_change` callback; what it raises is logged, not raised."""
    if callback is None:
        return
    try:
        callback(status)
    except Exception:  # a user's callback must never break result collection
        log.exception("on_status_change callback raised; ignoring")
