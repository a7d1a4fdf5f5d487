"""What a batch's manifest records, decided from the spec, the status and the Pods seen:
its header, each input's settled record, which Pods may hold an input's result, and when
the manifest is due to be written (`Debouncer`).

Pure: storage, the reports read from it and the chain of trust are
`kinetic_operator.manifest`'s, which writes what is decided here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kinetic.model import layout
from kinetic.model.batchjobs import batch_total, container_indexes
from kinetic.model.digest import Reported
from kinetic.model.manifest import (
    InputRecord,
    ManifestHeader,
    RerunOf,
    SubmissionFailureRecord,
)
from kinetic.model.names import fmt_time
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import KineticBatchSpec, KineticBatchStatus

from kinetic_operator.logic.attempts import UnitPlan
from kinetic_operator.logic.batch_work import Recorded, UnitObservation
from kinetic_operator.logic.observed import PodView

__all__ = [
    "Debouncer",
    "build_header",
    "recorded_from",
    "recorded_outcome",
    "result_of",
    "settled",
    "stored_result",
    "usable_pods",
]


def build_header(
    home: layout.Home,
    spec: KineticBatchSpec,
    status: KineticBatchStatus,
    recorded: Recorded,
    *,
    created: str | None,
    now: datetime,
    shards: list[int],
) -> ManifestHeader:
    """The header for a batch as it stands, with the complete index ranges."""
    template = spec.template
    containers = container_indexes(spec)
    total = batch_total(spec)
    if spec.jobs is not None:
        kind = (
            "container" if len(containers) == total else "function" if not containers else "mixed"
        )
    else:
        kind = "container" if containers else "function"
    source = spec.inputs.from_batch if spec.inputs is not None else None
    return ManifestHeader(
        group_id=home.name,
        namespace=home.namespace,
        uid=home.uid,
        name=spec.name,
        tags=dict(spec.tags),
        kind=kind,  # type: ignore[arg-type]  # one of the Literal's values, chosen above
        container_indexes=str(containers) if kind == "mixed" else "",
        function_name=template.function.name
        if template is not None and template.function is not None
        else None,
        total=total,
        chunk_size=spec.fixed_chunk,
        unit_grid=status.unit_grid if spec.sized_units else None,
        input_mode=spec.input_mode,
        max_concurrent=spec.max_concurrent,
        retries=spec.retries,
        fail_fast=spec.fail_fast,
        cancel_running_on_fail=spec.cancel_running_on_fail,
        created_at=created,
        updated_at=fmt_time(now),
        phase=str(status.phase),
        launched=status.launched,
        succeeded_indexes=str(recorded.succeeded),
        failed_indexes=str(recorded.failed),
        cancelled_indexes=str(recorded.cancelled),
        shard_size=layout.SHARD_SIZE,
        shards=sorted(shards),
        submission_failures=[
            SubmissionFailureRecord(index=f.index, message=f.message, error_type=f.error_type)
            for f in sorted(spec.submission_failures, key=lambda f: f.index)
        ],
        rerun_of=None
        if source is None
        else RerunOf(name=source.name, uid=source.uid, selected=source.indexes),
        original_indexes=spec.inputs.indexes if spec.inputs is not None else None,
    )


def stored_result(reported: Reported | None) -> dict[str, Any]:
    """An input record's result fields for what its runner reported (None: nothing)."""
    if reported is None:
        return {"result_sha256": None, "result_bytes": None}
    return {"result_sha256": reported.sha256, "result_bytes": reported.size}


def settled(rec: InputRecord, outcome: str) -> InputRecord:
    """``rec`` with the batch's outcome; a last attempt still open ends with it."""
    attempts = list(rec.attempts)
    if attempts and attempts[-1].outcome in ("pending", "running") and outcome != "SUCCEEDED":
        attempts[-1] = attempts[-1].model_copy(
            update={"outcome": "cancelled" if outcome == "CANCELLED" else "failure"}
        )
    return rec.model_copy(update={"outcome": outcome, "attempts": attempts})


def usable_pods(obs: UnitObservation | None, outcome: str) -> list[PodView]:
    """The unit's ended Pods that may hold the input's result, oldest first and successes
    last. A succeeded input's result is its succeeded attempt's, never a failure's."""
    usable = ("Succeeded",) if outcome == "SUCCEEDED" else ("Succeeded", "Failed")
    pods = obs.pods.values() if obs else ()
    return sorted(
        (p for p in pods if p.terminal and p.phase in usable),
        key=lambda p: (p.phase == "Succeeded", p.attempt),
    )


def recorded_outcome(index: int, recorded: Recorded) -> str | None:
    if index in recorded.succeeded:
        return "SUCCEEDED"
    if index in recorded.failed:
        return "FAILED"
    if index in recorded.cancelled:
        return "CANCELLED"
    return None


def result_of(plan: UnitPlan) -> str | None:
    if plan.outcome != "succeeded" or plan.last is None:
        return None
    return plan.last.termination_message


def recorded_from(header: ManifestHeader | None) -> Recorded | None:
    """The outcomes a stored header records (None without a header)."""
    if header is None:
        return None
    return Recorded(
        IndexSet.parse(header.succeeded_indexes),
        IndexSet.parse(header.failed_indexes),
        IndexSet.parse(header.cancelled_indexes),
    )


@dataclass
class Debouncer:
    """When to write a batch's manifest: promptly when it matters, rarely otherwise.

    One per batch, kept in the operator's memory; times are seconds from any
    monotonic clock, injected so tests need no sleeping. Call `mark` when a
    decision says the manifest is dirty (with its ``urgent`` flag), `due` to
    ask whether to write now, `delay` for how long until it will be (to
    schedule a wake-up), then `written` or `failed` after the attempt.

    * The first write, and any urgent one (the first Pod is about to be
      created, or the batch ended), is due at once.
    * Otherwise writes are at least ``interval`` seconds apart.
    * A failed write stays dirty and is retried after ``retry`` seconds,
      doubling per consecutive failure up to ``interval`` — never dropped.

    After an operator restart a fresh Debouncer writes at the first mark,
    which is what we want: the previous process may have died mid-debounce.
    """

    interval: float = 10.0
    retry: float = 1.0
    dirty: bool = False
    urgent: bool = False
    last_write: float | None = None
    failures: int = 0
    retry_at: float | None = field(default=None)

    def mark(self, now: float, *, urgent: bool = False) -> None:
        """Something in the manifest changed."""
        self.dirty = True
        self.urgent = self.urgent or urgent

    def due_at(self) -> float | None:
        """The earliest time a write is due, or None when nothing is pending."""
        if not self.dirty:
            return None
        if self.urgent or self.last_write is None:
            at = float("-inf")
        else:
            at = self.last_write + self.interval
        if self.retry_at is not None:
            at = max(at, self.retry_at)
        return at

    def due(self, now: float) -> bool:
        """Write now?"""
        at = self.due_at()
        return at is not None and now >= at

    def delay(self, now: float) -> float | None:
        """Seconds until the next write is due (0 when due now), None when clean."""
        at = self.due_at()
        return None if at is None else max(0.0, at - now)

    def written(self, now: float) -> None:
        """The write succeeded; everything marked before it is saved."""
        self.dirty = self.urgent = False
        self.last_write = now
        self.failures = 0
        self.retry_at = None

    def failed(self, now: float) -> None:
        """The write failed; retry later with backoff, keeping it dirty."""
        self.failures += 1
        self.retry_at = now + min(self.retry * 2 ** (self.failures - 1), self.interval)
