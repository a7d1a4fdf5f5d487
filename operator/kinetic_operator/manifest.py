"""The batch manifest: what a batch launched, built purely from what is known.

The manifest lives next to the batch's inputs, at
``<root>/batches/<group_id>/manifest.json`` (`manifest_uri`). It outlives the
Kubernetes objects: after ``results(cleanup=True)`` deleted the children,
and even after the KineticBatch itself is gone, ``attach_batch`` can still
tell which inputs had a child job, how many attempts each took and how each
ended. The operator writes it before it creates the first child, then as
children launch and finish, debounced (`Debouncer`), and at the end.

Schema, version 1 (keys camelCase; absent means unknown)::

    {
      "version": 1,
      "groupId": "grp-1a2b3c4d",          # the KineticBatch's name
      "name": "sweep" | null,             # spec.name
      "tags": {"team": "ml"},             # spec.tags
      "kind": "function" | "container",   # what the template runs
      "functionName": "train" | null,     # spec.template.function.name
      "total": 10,                        # inputs expected
      "inputMode": "auto",
      "maxConcurrent": 64 | null,
      "retries": 0,
      "failFast": false,
      "cancelRunningOnFail": false,
      "createdAt": "2024-05-01T12:00:00Z",   # the batch's creationTimestamp
      "updatedAt": "2024-05-01T12:03:10Z",   # when this version was built
      "phase": "RUNNING",                    # the batch phase
      "launched": 7,                         # launch high-water mark
      "succeededIndexes": "0-3,5",           # range strings, as in the status
      "failedIndexes": "4",
      "cancelledIndexes": "",
      "children": {                          # only inputs that got a child
        "0": {"job": "grp-1a2b3c4d-0", "attempts": 1, "outcome": "SUCCEEDED"},
        "6": {"job": "grp-1a2b3c4d-6", "attempts": null, "outcome": "PENDING"}
      },
      "submissionFailures": [{"index": 7, "message": "cannot pickle ..."}]
    }

``outcome`` is the recorded result (SUCCEEDED, FAILED, CANCELLED) once the
batch status has one, else the child's last observed phase (PENDING,
RUNNING), PENDING for a child reserved but not yet seen. ``attempts`` is
the child's attempt count when last observed; it is carried over from the
previous manifest for children that no longer exist, so pass ``previous``
(the manifest as last written, read back from storage after an operator
restart). An index without an entry never had a child: it is a submission
failure, was never launched (cancelled by fail-fast or ``spec.cancel``, see
``cancelledIndexes``), or is still waiting for a slot.

Children are launched in ascending index order, skipping submission
failures, so "had a child" is exactly: below ``launched`` and not a
submission failure, or currently active.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinetic.fanout import child_name, input_count
from kinetic.ranges import IndexSet
from kinetic.resources import KineticBatchSpec, KineticBatchStatus, Phase

from kinetic_operator.batch_logic import ChildObservation

__all__ = [
    "MANIFEST_VERSION",
    "Debouncer",
    "build_manifest",
    "encode_manifest",
    "manifest_uri",
]

MANIFEST_VERSION = 1


def manifest_uri(storage_root: str, group_id: str) -> str:
    """``<root>/batches/<group_id>/manifest.json``."""
    return f"{storage_root.rstrip('/')}/batches/{group_id}/manifest.json"


def build_manifest(
    group_id: str,
    spec: KineticBatchSpec,
    status: KineticBatchStatus,
    children: Mapping[int, ChildObservation],
    *,
    created: str | None,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest (schema version 1, above) for a batch as it stands.

    ``status`` should be the status the decision just produced, so the
    manifest never claims less than the status does. ``previous`` is the
    manifest as last written (or None); attempt counts of children that no
    longer exist come from it. A previous manifest of another version is
    ignored rather than misread.
    """
    total = input_count(spec.inputs)
    succeeded = IndexSet.parse(status.succeeded_indexes)
    failed = IndexSet.parse(status.failed_indexes)
    cancelled = IndexSet.parse(status.cancelled_indexes)
    active = IndexSet.parse(status.active_indexes)
    submission = IndexSet(f.index for f in spec.submission_failures if f.index < total)
    observed = IndexSet(i for i in children if 0 <= i < total)
    had_child = ((IndexSet.range(0, min(status.launched, total)) - submission) | active) | (
        observed - submission
    )

    old_children: Mapping[str, Any] = {}
    if previous and previous.get("version") == MANIFEST_VERSION:
        old_children = previous.get("children") or {}

    entries: dict[str, dict[str, Any]] = {}
    for i in had_child:
        key = str(i)
        obs = children.get(i)
        before = old_children.get(key) or {}
        attempts = before.get("attempts")
        if obs is not None and obs.attempts:
            attempts = max(obs.attempts, attempts or 0)
        if i in succeeded:
            outcome = Phase.SUCCEEDED.value
        elif i in failed:
            outcome = Phase.FAILED.value
        elif i in cancelled:
            outcome = Phase.CANCELLED.value
        elif obs is not None:
            outcome = Phase(obs.phase).value
        else:
            outcome = before.get("outcome") or Phase.PENDING.value
        entries[key] = {"job": child_name(group_id, i), "attempts": attempts, "outcome": outcome}

    template = spec.template
    return {
        "version": MANIFEST_VERSION,
        "groupId": group_id,
        "name": spec.name,
        "tags": dict(spec.tags),
        "kind": "function" if template.function is not None else "container",
        "functionName": template.function.name if template.function is not None else None,
        "total": total,
        "inputMode": spec.input_mode,
        "maxConcurrent": spec.max_concurrent,
        "retries": spec.retries,
        "failFast": spec.fail_fast,
        "cancelRunningOnFail": spec.cancel_running_on_fail,
        "createdAt": created,
        "updatedAt": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "phase": Phase(status.phase).value,
        "launched": status.launched,
        "succeededIndexes": str(succeeded),
        "failedIndexes": str(failed),
        "cancelledIndexes": str(cancelled),
        "children": entries,
        "submissionFailures": [
            {"index": f.index, "message": f.message}
            for f in sorted(spec.submission_failures, key=lambda f: f.index)
        ],
    }


def encode_manifest(manifest: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON: a 100k-input manifest is a few MB, not tens."""
    return json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class Debouncer:
    """When to write a batch's manifest: promptly when it matters, rarely otherwise.

    One per batch, kept in the operator's memory; times are seconds from any
    monotonic clock, injected so tests need no sleeping. Call `mark` when a
    decision says the manifest is dirty (with its ``urgent`` flag), `due` to
    ask whether to write now, `delay` for how long until it will be (to
    schedule a wake-up), then `written` or `failed` after the attempt.

    * The first write, and any urgent one (the first child is about to be
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
