"""Small, immutable summaries of the Jobs and Pods of KineticJob attempts.

Kopf's indexes keep these instead of whole objects: the decision logic needs
a dozen fields, and a few hundred bytes per pod keeps memory flat however
many jobs run. Pure functions of a body (any mapping shaped like the API's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kinetic.resources import LABEL_ATTEMPT, LABEL_JOB

MAX_MESSAGE = 4096


@dataclass(frozen=True)
class JobView:
    """One attempt's batch/v1 Job, as far as the decision needs it."""

    name: str
    attempt: int
    start_time: str | None = None
    deleting: bool = False
    complete: bool = False
    failed_reason: str | None = None
    failed_message: str | None = None
    finished_time: str | None = None

    @property
    def finished(self) -> bool:
        return self.complete or self.failed_reason is not None


@dataclass(frozen=True)
class PodView:
    """One pod of an attempt: its phase and how its main container ended."""

    name: str
    attempt: int
    phase: str = "Pending"
    created: str | None = None
    deleting: bool = False
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

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def live(self) -> bool:
        """Running or about to: deleting it would stop work."""
        return not self.terminal and not self.deleting


def job_key(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, KineticJob name) that a labelled Job or Pod belongs to."""
    meta = body.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(LABEL_JOB)
    return (meta.get("namespace") or "", owner) if owner else None


def _attempt(meta: Mapping[str, Any]) -> int:
    try:
        return int((meta.get("labels") or {}).get(LABEL_ATTEMPT, 0))
    except (TypeError, ValueError):
        return 0


def _condition(conditions: Any, type_: str) -> Mapping[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def summarize_job(body: Mapping[str, Any]) -> JobView:
    """The JobView of a batch/v1 Job body."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    conditions = status.get("conditions")
    complete = bool(
        _condition(conditions, "Complete") or _condition(conditions, "SuccessCriteriaMet")
    )
    # FailureTarget comes before Failed: the Job controller sets it, then kills the pods.
    failed = _condition(conditions, "Failed") or _condition(conditions, "FailureTarget")
    return JobView(
        name=meta.get("name", ""),
        attempt=_attempt(meta),
        start_time=status.get("startTime"),
        deleting=bool(meta.get("deletionTimestamp")),
        complete=complete,
        failed_reason=(failed.get("reason") or "Failed") if failed else None,
        failed_message=_clip(failed.get("message")) if failed else None,
        finished_time=status.get("completionTime")
        or ((failed or {}).get("lastTransitionTime") if failed else None),
    )


def summarize_pod(body: Mapping[str, Any]) -> PodView:
    """The PodView of a Pod body; the main container is the first one."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    statuses = status.get("containerStatuses") or []
    state = (statuses[0].get("state") or {}) if statuses else {}
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    scheduled = next(
        (c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None
    )
    unschedulable = None
    if scheduled and scheduled.get("status") == "False":
        unschedulable = _clip(scheduled.get("message") or scheduled.get("reason") or "")
    disruption = _condition(status.get("conditions"), "DisruptionTarget")
    return PodView(
        name=meta.get("name", ""),
        attempt=_attempt(meta),
        phase=status.get("phase") or "Pending",
        created=meta.get("creationTimestamp"),
        deleting=bool(meta.get("deletionTimestamp")),
        reason=status.get("reason"),
        message=_clip(status.get("message")),
        start_time=status.get("startTime"),
        exit_code=terminated.get("exitCode"),
        terminated_reason=terminated.get("reason"),
        termination_message=_clip(terminated.get("message")),
        finished_at=terminated.get("finishedAt"),
        waiting_reason=waiting.get("reason"),
        waiting_message=_clip(waiting.get("message")),
        unschedulable=unschedulable,
        disruption=(disruption.get("reason") or "DisruptionTarget") if disruption else None,
    )


def _clip(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
