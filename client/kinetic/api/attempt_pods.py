"""Which Pods count for a job or input: those the operator recorded, newest attempt last,
and which of them ran a rank."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kinetic.model import names

if TYPE_CHECKING:
    from kubernetes.client import V1Pod


def recorded_pods(pods: list[V1Pod], attempts: list[dict[str, Any]]) -> list[V1Pod]:
    """The Pods among ``pods`` that the operator recorded for ``attempts``: by name, and by
    UID where it recorded one.

    Anyone who may create Pods in the namespace can give a Pod a job's labels;
    the operator ignores such a Pod (`kinetic_operator.logic.seal`), and so do the
    handles: its log is not the job's, and a debugger must not attach to it.
    """
    recorded: dict[str, str | None] = {}
    for attempt in attempts:
        for rec in [attempt, *(attempt.get("members") or [])]:
            if rec.get("pod"):
                recorded[str(rec["pod"])] = rec.get("podUID")
    kept = []
    for pod in pods:
        name = pod.metadata.name
        if name in recorded and recorded[name] in (None, pod.metadata.uid):
            kept.append(pod)
    return kept


def sort_by_attempt(pods: list[V1Pod]) -> list[V1Pod]:
    """Pods ordered by their attempt label (then age): the newest attempt last."""
    return sorted(
        pods,
        key=lambda p: (
            int((p.metadata.labels or {}).get(names.LABEL_ATTEMPT, 0)),
            p.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC),
        ),
    )


def label_int(pod: V1Pod, label: str) -> int:
    """An integer label of ``pod`` (attempt, rank), 0 when absent or not a number."""
    value = (pod.metadata.labels or {}).get(label, "0")
    return int(value) if value.isdigit() else 0


def pod_of_rank(pods: list[V1Pod], rank: int) -> V1Pod | None:
    """Rank ``rank``'s Pod of the newest attempt among ``pods`` (`sort_by_attempt` order).

    A single-host Pod has no rank label and is rank 0. None while that rank's
    Pod does not exist (yet: without cluster DNS rank 0 is created first).
    """
    if not pods:
        return None
    newest = label_int(pods[-1], names.LABEL_ATTEMPT)
    ranked = [
        p
        for p in pods
        if label_int(p, names.LABEL_ATTEMPT) == newest and label_int(p, names.LABEL_RANK) == rank
    ]
    return ranked[-1] if ranked else None
