"""Small, immutable summaries of attempt Pods.

Kopf's indexes keep these instead of whole objects: the decisions need a
dozen fields, and a few hundred bytes per Pod keeps the operator's memory
flat however many inputs a batch has. Pure functions of a body (any mapping
shaped like the API's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kinetic.model.names import (
    LABEL_ATTEMPT,
    LABEL_BATCH,
    LABEL_CHUNK,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_RANK,
    fmt_time,
    input_pod_name,
    job_pod_name,
    parse_time,
)
from kinetic.model.resources import MemberRecord

from kinetic_operator.logic.seal import controller_uid

MAX_MESSAGE = 4096


@dataclass(frozen=True)
class PodView:
    """One attempt Pod: its phase and how its main container ended.

    ``gone`` marks a tombstone: the Pod was seen and then deleted; the other
    fields are its last known state.
    """

    name: str
    attempt: int
    index: int | None = None
    chunk: int = 1
    phase: str = "Pending"
    created: str | None = None
    deleting: bool = False
    deleted_at: str | None = None  # when its deletion was asked for (not when it ends)
    gone: bool = False
    reason: str | None = None
    message: str | None = None
    start_time: str | None = None
    exit_code: int | None = None
    terminated_reason: str | None = None
    termination_message: str | None = None
    finished_at: str | None = None
    waiting_reason: str | None = None
    waiting_message: str | None = None
    unschedulable: str | None = None
    disruption: str | None = None
    owner_uid: str | None = None  # the UID of the KineticJob/KineticBatch that created it
    uid: str | None = None  # the Pod's own UID: which instance of the name this is
    # The attempt's own Pod name (`names.job_pod_name`, `names.input_pod_name`), from the
    # labels: a gang member's attempt, whatever name the member itself has.
    attempt_pod: str | None = None
    rank: int | None = None  # a gang member's rank; None on one host
    pod_ip: str | None = None  # rank 0's is the gang's coordinator where there is no DNS
    members: tuple[MemberRecord, ...] | None = None  # a whole gang's view: its members

    def belongs_to(self, uid: str | None) -> bool:
        """Whether this Pod is the object's with this UID, not a same-named predecessor's.

        Pods are found by name labels; a job deleted and re-created under its
        name must not take the old one's Pods (and their outcome) for its own.
        """
        return self.owner_uid is None or uid is None or self.owner_uid == uid

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def live(self) -> bool:
        """Running or about to: deleting it would stop work."""
        return not self.terminal and not self.deleting and not self.gone


def job_key(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, KineticJob name) of an attempt Pod of a KineticJob."""
    meta = body.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(LABEL_JOB)
    return (meta.get("namespace") or "", owner) if owner else None


def batch_key(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, KineticBatch name) of an attempt Pod of a batch input."""
    meta = body.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(LABEL_BATCH)
    return (meta.get("namespace") or "", owner) if owner else None


def _number(labels: Mapping[str, Any], key: str) -> int | None:
    raw = labels.get(key)
    if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 9:
        return None
    return int(raw)


def _condition(conditions: Any, type_: str) -> Mapping[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def summarize_pod(body: Mapping[str, Any]) -> PodView | None:
    """The PodView of an attempt Pod; None when its labels are not ours (tampered)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    attempt = _number(labels, LABEL_ATTEMPT)
    if attempt is None or attempt < 1:
        return None
    status = body.get("status") or {}
    terminated, waiting = _main_container(status)
    return PodView(
        name=meta.get("name", ""),
        attempt=attempt,
        index=_number(labels, LABEL_INDEX),
        chunk=_number(labels, LABEL_CHUNK) or 1,
        phase=status.get("phase") or "Pending",
        created=meta.get("creationTimestamp"),
        deleting=bool(meta.get("deletionTimestamp")),
        deleted_at=_deletion_asked(meta),
        reason=status.get("reason"),
        message=_clip(status.get("message")),
        start_time=status.get("startTime"),
        exit_code=terminated.get("exitCode"),
        terminated_reason=terminated.get("reason"),
        termination_message=_clip(terminated.get("message")),
        finished_at=terminated.get("finishedAt"),
        waiting_reason=waiting.get("reason"),
        waiting_message=_clip(waiting.get("message")),
        unschedulable=_unschedulable(status),
        disruption=_disruption(status),
        owner_uid=controller_uid(meta),
        uid=meta.get("uid") or None,
        attempt_pod=_attempt_pod(labels, attempt),
        rank=_number(labels, LABEL_RANK),
        pod_ip=status.get("podIP") or None,
    )


def _attempt_pod(labels: Mapping[str, Any], attempt: int) -> str | None:
    """The attempt's own Pod name, from the owner's label (and the input's, in a batch)."""
    job, batch, index = labels.get(LABEL_JOB), labels.get(LABEL_BATCH), _number(labels, LABEL_INDEX)
    if isinstance(job, str) and job:
        return job_pod_name(job, attempt)
    if isinstance(batch, str) and batch and index is not None:
        return input_pod_name(batch, index, attempt)
    return None


def _main_container(status: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The main container's terminated and waiting states (either may be empty).

    A failed init container ends the attempt too, so it stands in for the
    terminated state; a terminated container is not waiting for anything.
    """
    statuses = status.get("containerStatuses") or []
    state = (statuses[0].get("state") or {}) if statuses else {}
    terminated = state.get("terminated") or {} or _failed_init(status)
    waiting = {} if terminated else state.get("waiting") or {}
    return terminated, waiting


def _unschedulable(status: Mapping[str, Any]) -> str | None:
    """Why the scheduler has not placed the Pod, while its PodScheduled condition is False."""
    scheduled = next(
        (c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None
    )
    if scheduled and scheduled.get("status") == "False":
        return _clip(scheduled.get("message") or scheduled.get("reason") or "")
    return None


def _disruption(status: Mapping[str, Any]) -> str | None:
    """The reason of a True DisruptionTarget condition: the Pod is being evicted or preempted."""
    disruption = _condition(status.get("conditions"), "DisruptionTarget")
    return (disruption.get("reason") or "DisruptionTarget") if disruption else None


def _deletion_asked(meta: Mapping[str, Any]) -> str | None:
    """When the Pod's deletion was asked for. The API server sets ``deletionTimestamp``
    to that moment plus the grace period (the time by which it will be gone), so a
    container killed by the deletion ends before ``deletionTimestamp``: its
    ``finishedAt`` must be compared with the request, not with the deadline."""
    stamp = meta.get("deletionTimestamp")
    if not stamp:
        return None
    grace = meta.get("deletionGracePeriodSeconds") or 0
    try:
        return fmt_time(parse_time(stamp) - timedelta(seconds=int(grace)))
    except (TypeError, ValueError):
        return stamp


def _failed_init(status: Mapping[str, Any]) -> dict[str, Any]:
    """The terminated state of a failed init container (a data volume that could not be
    fetched): the attempt ended there, and its exit code and message say why."""
    for s in status.get("initContainerStatuses") or ():
        terminated = (s.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode") not in (0, None):
            return terminated
    return {}


def _clip(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
