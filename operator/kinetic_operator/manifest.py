"""Keeping a batch's manifest current: the header and only the shards that changed.

The schema is `kinetic.manifest`'s (both sides import it); the layout is
`kinetic.layout`'s. This module decides what to write: a `ManifestBook`
per batch holds the attempt history of inputs whose shard is still
changing, marks shards dirty as plans come in, and writes the dirty shards
then the header. A shard whose inputs have all ended is written one last
time and dropped from memory, so the operator holds the history of about
``maxConcurrent`` inputs, not of the whole batch. After a restart a shard
is read back before it is first rewritten, so nothing written earlier is
lost.

When to write is the `Debouncer`'s business: promptly when it matters
(before the first Pod, at the end), otherwise at most every interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kinetic import layout, storage
from kinetic.fanout import input_count
from kinetic.manifest import (
    InputRecord,
    ManifestHeader,
    ManifestShard,
    SubmissionFailureRecord,
    decode_header,
    decode_shard,
)
from kinetic.names import fmt_time
from kinetic.ranges import IndexSet
from kinetic.resources import KineticBatchSpec, KineticBatchStatus

from kinetic_operator.attempts import UnitPlan
from kinetic_operator.batch_logic import Recorded, unit_inputs

__all__ = ["Debouncer", "ManifestBook", "build_header", "read_header", "recorded_from"]

_OUTCOME = {
    "pending": "PENDING",
    "running": "RUNNING",
    "succeeded": "SUCCEEDED",
    "failed": "FAILED",
    "cancelled": "CANCELLED",
}


def build_header(
    batch: str,
    namespace: str,
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
    return ManifestHeader(
        group_id=batch,
        namespace=namespace,
        name=spec.name,
        tags=dict(spec.tags),
        kind="function" if template.function is not None else "container",
        function_name=template.function.name if template.function is not None else None,
        total=input_count(spec.inputs),
        chunk_size=spec.chunk_size,
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
            SubmissionFailureRecord(index=f.index, message=f.message)
            for f in sorted(spec.submission_failures, key=lambda f: f.index)
        ],
    )


def read_header(root: str, batch: str) -> ManifestHeader | None:
    """The header as stored, or None (none yet, or of another version)."""
    try:
        return decode_header(storage.read_bytes(layout.manifest_uri(root, batch)))
    except storage.NotFound:
        return None


@dataclass
class ManifestBook:
    """The attempt history a batch's manifest shards hold, and which shards changed."""

    root: str
    batch: str
    shards: dict[int, dict[int, InputRecord]] = field(default_factory=dict)
    dirty: set[int] = field(default_factory=set)
    written: set[int] = field(default_factory=set)
    loaded: set[int] = field(default_factory=set)
    header_read: bool = False

    def note(
        self, plans: Mapping[int, UnitPlan], chunk: int, total: int, *, container: bool
    ) -> None:
        """Take the latest plan of each unit into its inputs' records."""
        for unit, plan in plans.items():
            for index in unit_inputs(unit, chunk, total):
                shard = layout.shard_of(index)
                records = self.shards.setdefault(shard, {})
                old = records.get(index)
                new = InputRecord(
                    outcome=_OUTCOME[plan.outcome],  # type: ignore[arg-type]
                    attempts=list(plan.records),
                    result=_result(plan) if container else None,
                    message=plan.message if plan.outcome == "failed" else None,
                )
                if old is None or old != new:
                    records[index] = new
                    self.dirty.add(shard)

    def settle(self, recorded: Recorded) -> None:
        """Outcomes recorded by the batch win over what the plans last said."""
        for shard, records in self.shards.items():
            for index, rec in records.items():
                outcome = _recorded_outcome(index, recorded)
                if outcome is not None and rec.outcome != outcome:
                    records[index] = _settled(rec, outcome)
                    self.dirty.add(shard)

    def write(self, header: ManifestHeader, recorded: Recorded) -> None:
        """Write every dirty shard, then the header; raises if storage refuses.

        A shard all of whose inputs have ended is dropped from memory once
        written: it will not change again.
        """
        self.settle(recorded)
        if not self.header_read:  # shards an earlier process wrote stay listed
            stored = read_header(self.root, self.batch)
            self.written.update(stored.shards if stored is not None else ())
            self.header_read = True
        terminal = recorded.terminal
        for shard in sorted(self.dirty):
            records = self._merged(shard)
            doc = ManifestShard(
                group_id=self.batch,
                shard=shard,
                inputs={str(i): r for i, r in sorted(records.items())},
            )
            storage.write_bytes(
                layout.manifest_shard_uri(self.root, self.batch, shard), doc.encode()
            )
            self.dirty.discard(shard)
            self.written.add(shard)
            if all(i in terminal for i in records):
                self.shards.pop(shard, None)
                self.loaded.discard(shard)
        header.shards = sorted(self.written | set(header.shards))
        storage.write_bytes(layout.manifest_uri(self.root, self.batch), header.encode())

    def _merged(self, shard: int) -> dict[int, InputRecord]:
        """This shard's records, merged over what an earlier process wrote (read once)."""
        records = self.shards.setdefault(shard, {})
        if shard in self.loaded:
            return records
        self.loaded.add(shard)
        try:
            stored = decode_shard(
                storage.read_bytes(layout.manifest_shard_uri(self.root, self.batch, shard))
            )
        except storage.NotFound:
            stored = None
        if stored is not None:
            for key, rec in stored.inputs.items():
                records.setdefault(int(key), rec)
            self.written.add(shard)
        return records


def _settled(rec: InputRecord, outcome: str) -> InputRecord:
    """``rec`` with the batch's outcome; a last attempt still open ends with it."""
    attempts = list(rec.attempts)
    if attempts and attempts[-1].outcome in ("pending", "running") and outcome != "SUCCEEDED":
        attempts[-1] = attempts[-1].model_copy(
            update={"outcome": "cancelled" if outcome == "CANCELLED" else "failure"}
        )
    return rec.model_copy(update={"outcome": outcome, "attempts": attempts})


def _recorded_outcome(index: int, recorded: Recorded) -> str | None:
    if index in recorded.succeeded:
        return "SUCCEEDED"
    if index in recorded.failed:
        return "FAILED"
    if index in recorded.cancelled:
        return "CANCELLED"
    return None


def _result(plan: UnitPlan) -> str | None:
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
