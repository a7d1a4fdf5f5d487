"""Gang member Pods as the watch shows them, for the tests of the operator's gang layer.

A member is a `PodView` with a rank, named as the operator names it (`names`): ``kj-a1-r0``
for rank 0 of attempt 1 of the KineticJob ``kj``, ``g-i2-1-r0`` for rank 0 of
attempt 1 of input 2 of the batch ``g``. Times are seconds after `T0`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kinetic.model.names import fmt_time, gang_pod_name, input_pod_name, job_pod_name
from kinetic_operator.logic.observed import PodView

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return fmt_time(at(seconds))


def member(
    rank: int,
    phase: str = "Running",
    attempt: int = 1,
    *,
    owner: str = "kj",
    index: int | None = None,
    since: float = 0,
    **kw: Any,
) -> PodView:
    """Rank ``rank`` of ``attempt``, created ``since`` seconds after T0 and, unless
    Pending, placed on a node then."""
    unit = job_pod_name(owner, attempt) if index is None else input_pod_name(owner, index, attempt)
    kw.setdefault("created", stamp(since))
    kw.setdefault("start_time", stamp(since) if phase != "Pending" else None)
    return PodView(
        name=gang_pod_name(unit, rank),
        attempt_pod=unit,
        attempt=attempt,
        index=index,
        phase=phase,
        rank=rank,
        **kw,
    )


def failed(pod: PodView, exit_code: int = 1, message: str = "boom", when: float = 5) -> PodView:
    """``pod`` after its container exited with ``exit_code`` at ``when``."""
    return replace(
        pod,
        phase="Failed",
        exit_code=exit_code,
        terminated_reason="Error",
        termination_message=message,
        finished_at=stamp(when),
    )


def succeeded(pod: PodView, message: str | None = "42", when: float = 5) -> PodView:
    """``pod`` after its container exited 0 at ``when``, saying ``message``."""
    return replace(
        pod,
        phase="Succeeded",
        exit_code=0,
        terminated_reason="Completed",
        termination_message=message,
        finished_at=stamp(when),
    )


def deleting(pod: PodView, when: float = 5) -> PodView:
    """``pod`` once its deletion was asked for at ``when`` (still shown, terminating)."""
    return replace(pod, deleting=True, deleted_at=stamp(when))


def tombstone(pod: PodView) -> PodView:
    """The last sight of ``pod`` before it was deleted."""
    return replace(pod, gone=True)
