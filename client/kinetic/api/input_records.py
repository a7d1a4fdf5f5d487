"""What the client reads of a batch's inputs outside their handle: the manifest (header, shards,
the view the status vouches for), the outcomes recorded so far, and what a Pod says of its input.

`kinetic.api.inputs` (the `InputHandle`) and `kinetic.api.batch_handle` read through these;
`kinetic.api.inputs` re-exports the names it always had.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kinetic.api.handle import (
    JobStatus,
)
from kinetic.api.kube import KubeClient
from kinetic.api.submission import SubmissionError as SubmissionError  # kinetic.SubmissionError
from kinetic.api.vouched import VouchedManifest, newest_header, newest_shard
from kinetic.model import layout
from kinetic.model import resources as r
from kinetic.model.manifest import InputRecord, ManifestHeader, ManifestShard
from kinetic.model.ranges import IndexSet

if TYPE_CHECKING:
    from kubernetes.client import V1Pod


_HEADER_READ_INTERVAL = 2.0  # seconds between manifest header reads while a status is truncated
RECORD_WAIT = 30.0  # how long to wait for the manifest to catch up (it is <= ~10 s behind)


def read_manifest(home: layout.Home) -> ManifestHeader | None:
    """The batch's newest manifest header, unchecked (None when there is none): for what it
    says of the batch, never for a result (`kinetic.api.vouched` reads what the status vouches)."""
    return newest_header(home)


def read_shard(home: layout.Home, shard: int) -> ManifestShard | None:
    """One manifest shard where the newest header puts it, unchecked (None before the
    operator first wrote it); like `read_manifest`, never for a result."""
    return newest_shard(home, newest_header(home), shard)


def vouched_manifest(
    home: layout.Home, namespace: str, group: str, kube: KubeClient
) -> VouchedManifest:
    """The manifest as the status of batch ``group`` (the one with ``home``'s UID) vouches."""

    def status() -> dict[str, Any] | None:
        obj = kube.get(r.BATCH_PLURAL, namespace, group)
        if obj is None or (obj.get("metadata") or {}).get("uid") != home.uid:
            return None  # gone, or another batch of that name now
        return obj.get("status") or {}

    return VouchedManifest(home, status)


def status_from_header(header: ManifestHeader) -> dict[str, Any]:
    """The parts of a batch status the manifest header also records (its ranges complete)."""
    succeeded, failed, cancelled = (
        IndexSet.parse(header.succeeded_indexes),
        IndexSet.parse(header.failed_indexes),
        IndexSet.parse(header.cancelled_indexes),
    )
    return {
        "phase": header.phase,
        "total": header.total,
        "launched": header.launched,
        "succeededIndexes": header.succeeded_indexes,
        "failedIndexes": header.failed_indexes,
        "cancelledIndexes": header.cancelled_indexes,
        "counts": {
            "succeeded": len(succeeded),
            "failed": len(failed),
            "cancelled": len(cancelled),
        },
    }


class RecordedOutcomes:
    """Which inputs the operator has recorded terminal, complete even when the status is truncated.

    Recorded outcomes never revert, so what was learnt from any copy of the
    status, or from the manifest header, stays true: everything is merged.
    The header is read only when the status says its ranges were cut and
    they do not yet account for its counts, and at most every couple of
    seconds (it is written debounced, so reading it on every event is waste).
    """

    def __init__(self, read_header: Callable[[], ManifestHeader | None]) -> None:
        self._read_header = read_header
        self.succeeded = IndexSet()
        self.failed = IndexSet()
        self.cancelled = IndexSet()
        self._header_read_at: float | None = None

    def merge(self, succeeded: str, failed: str, cancelled: str) -> None:
        self.succeeded = self.succeeded | IndexSet.parse(succeeded)
        self.failed = self.failed | IndexSet.parse(failed)
        self.cancelled = self.cancelled | IndexSet.parse(cancelled)

    def update(self, status: dict[str, Any], final: bool = False) -> None:
        """Take in a status; with final=True wait (bounded) for a lagging header to catch up."""
        self.merge(
            status.get("succeededIndexes", ""),
            status.get("failedIndexes", ""),
            status.get("cancelledIndexes", ""),
        )
        if not status.get("truncated"):
            return
        counts = status.get("counts") or {}
        want = sum(counts.get(k, 0) for k in ("succeeded", "failed", "cancelled"))
        deadline = time.monotonic() + RECORD_WAIT
        while self.known < want:
            since = (
                None if self._header_read_at is None else time.monotonic() - self._header_read_at
            )
            if since is not None and since < _HEADER_READ_INTERVAL:
                if not final:
                    return
                time.sleep(_HEADER_READ_INTERVAL - since)
            self._header_read_at = time.monotonic()
            header = self._read_header()
            if header is not None:
                self.merge(
                    header.succeeded_indexes, header.failed_indexes, header.cancelled_indexes
                )
            if not final or time.monotonic() > deadline:
                return

    @property
    def known(self) -> int:
        return len(self.succeeded) + len(self.failed) + len(self.cancelled)

    def done(self) -> IndexSet:
        return self.succeeded | self.failed | self.cancelled

    def of(self, index: int) -> JobStatus | None:
        if index in self.succeeded:
            return JobStatus.SUCCEEDED
        if index in self.failed:
            return JobStatus.FAILED
        if index in self.cancelled:
            return JobStatus.CANCELLED
        return None


def recorded_message(
    record: InputRecord | None, attempts: list[dict[str, Any]] | None = None
) -> str | None:
    """Why an input ended as it did, as its manifest record says: the record's own message,
    else the newest attempt's that has one (of ``attempts`` when given: the record's merged
    with live Pods); None when nothing says."""
    if record is not None and record.message:
        return record.message
    if attempts is None:
        attempts = [a.wire() for a in record.attempts] if record is not None else []
    for attempt in reversed(attempts):
        if attempt.get("message"):
            return str(attempt["message"])
    return None


def input_summary(
    phase: JobStatus, record: InputRecord | None, live_attempt: int = 0
) -> dict[str, Any]:
    """One input's phase, attempt and message, shaped like a KineticJob's status (what
    `kinetic jobs list` shows): the attempt is the newest the manifest records or a live
    Pod runs, the message the record's (`recorded_message`)."""
    recorded = max((a.attempt for a in record.attempts), default=0) if record is not None else 0
    out: dict[str, Any] = {"phase": phase.value, "attempt": max(recorded, live_attempt)}
    message = recorded_message(record)
    if message:
        out["message"] = message
    return out


def owned_by(pod: V1Pod, uid: str | None) -> bool:
    """Whether the Pod is the batch's with this UID (not a same-named predecessor's)."""
    refs = pod.metadata.owner_references or []
    return uid is not None and any(ref.uid == uid for ref in refs)


def terminated_state(pod: V1Pod) -> Any:
    """The main container's terminated state, or None while it has not ended."""
    statuses = (pod.status and pod.status.container_statuses) or []
    if not statuses or statuses[0].state is None:
        return None
    return statuses[0].state.terminated


def live_phase(pod: V1Pod | None) -> JobStatus:
    """What a user sees of an input from its newest Pod, before the batch records an outcome.

    A Pod that has ended but is not recorded yet still counts as RUNNING: the
    operator is about to record it, or to retry it.
    """
    if pod is None:
        return JobStatus.PENDING
    phase = pod.status.phase if pod.status else None
    return JobStatus.PENDING if phase in (None, "Pending", "Unknown") else JobStatus.RUNNING


def chunk_outcome(message: str | None, index: int) -> str | None:
    """A chunk Pod's own report of one input ("success"/"failure"), from its termination message."""
    try:
        report = json.loads(message or "")
        if index in IndexSet.parse(report.get("succeeded", "")):
            return "success"
        if index in IndexSet.parse(report.get("failed", "")):
            return "failure"
    except (ValueError, AttributeError):
        pass
    return None
