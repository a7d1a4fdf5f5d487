"""The rows the pages show, and the page of them a request asks for. Pure.

A batch's inputs become `InputRow`s once per change of the batch (`reads`), so a
page of a 10,000-input table is a filter and a slice over rows already made:
no call to the API server or to storage per request, per tab or per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinetic.model.names import parse_time

PHASES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


class BadRequest(ValueError):
    """A request's parameter is out of bounds; the message names it, its limit and the fix."""


def seconds_of(text: str | None) -> float | None:
    """An RFC 3339 time as seconds since the epoch (None when absent or unreadable)."""
    if not text:
        return None
    try:
        return parse_time(text).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Attempt:
    """One attempt of an input or a job, as the operator recorded it (times in epoch s)."""

    attempt: int
    pod: str
    start: float | None = None
    end: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    outcome: str = "running"

    @classmethod
    def of(cls, wire: Mapping[str, Any]) -> Attempt:
        """From an attempt record as JSON (`AttemptRecord.wire()` or a job's status)."""
        code = wire.get("exitCode")
        return cls(
            attempt=int(wire.get("attempt") or 0),
            pod=str(wire.get("pod") or ""),
            start=seconds_of(wire.get("startTime")),
            end=seconds_of(wire.get("endTime")),
            exit_code=code if isinstance(code, int) else None,
            reason=wire.get("reason") or None,
            message=wire.get("message") or None,
            outcome=str(wire.get("outcome") or "running"),
        )

    @property
    def seconds(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, self.end - self.start)

    def wire(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "pod": self.pod,
            "start": self.start,
            "end": self.end,
            "seconds": self.seconds,
            "exitCode": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class InputRow:
    """One input of a batch: its phase, its attempts and why it ended as it did."""

    index: int
    phase: str
    attempts: tuple[Attempt, ...] = ()
    message: str | None = None

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def seconds(self) -> float | None:
        """How long its last attempt ran (None until it ended)."""
        return self.last.seconds if self.last is not None else None

    @property
    def ended_at(self) -> float | None:
        return self.last.end if self.last is not None and self.phase in TERMINAL else None

    def wire(self) -> dict[str, Any]:
        last = self.last
        return {
            "index": self.index,
            "phase": self.phase,
            "attempt": last.attempt if last is not None else 0,
            "pod": last.pod if last is not None else "",
            "start": last.start if last is not None else None,
            "seconds": self.seconds,
            "exitCode": last.exit_code if last is not None else None,
            "reason": last.reason if last is not None else None,
            "message": self.message,
        }


def input_row(
    index: int, phase: str, attempts: Iterable[Mapping[str, Any]], message: str | None
) -> InputRow:
    """An input's row from what its handle read: its phase, attempt records and message."""
    return InputRow(index, phase, tuple(Attempt.of(a) for a in attempts), message)


@dataclass(frozen=True)
class Page:
    """One page of rows, and what the table's header shows around it."""

    rows: Sequence[InputRow]
    matching: int  # rows that pass the filter
    page: int  # from 1
    pages: int
    size: int
    counts: dict[str, int] = field(default_factory=dict)  # all rows, per phase

    def wire(self) -> dict[str, Any]:
        return {
            "rows": [r.wire() for r in self.rows],
            "matching": self.matching,
            "page": self.page,
            "pages": self.pages,
            "size": self.size,
            "counts": self.counts,
        }


def paging(status: str | None, page: str | None, size: str | None) -> tuple[str | None, int, int]:
    """A table request's filter, page and page size, checked; BadRequest names what is wrong."""
    chosen = (status or "").upper() or None
    if chosen is not None and chosen not in PHASES:
        raise BadRequest(f"status={status!r}: choose one of {', '.join(PHASES)} (or leave it out)")
    number = _whole("page", page, 1, 1, None)
    per = _whole("size", size, DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
    return chosen, number, per


def _whole(name: str, text: str | None, default: int, low: int, high: int | None) -> int:
    if text is None or text == "":
        return default
    bound = f"from {low} to {high}" if high is not None else f"{low} or more"
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name}={text!r}: a whole number {bound}") from None
    if value < low or (high is not None and value > high):
        raise BadRequest(f"{name}={value}: out of bounds, use a whole number {bound}")
    return value


def page_of(rows: Sequence[InputRow], status: str | None, page: int, size: int) -> Page:
    """Page ``page`` (from 1) of ``size`` rows among those in phase ``status`` (all: None).

    A page past the end gives the last page, so a table whose filter just lost
    rows (inputs moved on) never goes blank.
    """
    counts = {p: 0 for p in PHASES}
    for row in rows:
        counts[row.phase] = counts.get(row.phase, 0) + 1
    chosen = rows if status is None else [r for r in rows if r.phase == status]
    pages = max(1, -(-len(chosen) // size))
    page = min(page, pages)
    start = (page - 1) * size
    return Page(chosen[start : start + size], len(chosen), page, pages, size, counts)


# --------------------------------------------------------------------------- lists


def progress(status: Mapping[str, Any], total: int) -> dict[str, Any]:
    """A batch's counts and how far along it is (ended inputs over its total)."""
    counts = {k: int(v) for k, v in (status.get("counts") or {}).items() if isinstance(v, int)}
    ended = sum(counts.get(k, 0) for k in ("succeeded", "failed", "cancelled"))
    return {"counts": counts, "ended": ended, "fraction": ended / total if total else 0.0}


def age_seconds(created: str | None, now: datetime | None = None) -> float | None:
    started = seconds_of(created)
    if started is None:
        return None
    return max(0.0, (now or datetime.now(UTC)).timestamp() - started)


def duration_seconds(
    start: str | None, end: str | None, now: datetime | None = None
) -> float | None:
    """How long it has run: start to end, or to now while it runs (None before it starts)."""
    began = seconds_of(start)
    if began is None:
        return None
    ended = seconds_of(end)
    until = ended if ended is not None else (now or datetime.now(UTC)).timestamp()
    return max(0.0, until - began)


def summary(obj: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """One row of the jobs-and-batches list, from the object the watch holds."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    kind = "batch" if obj.get("kind") == "KineticBatch" else "job"
    total = int(status.get("total") or (1 if kind == "job" else 0))
    row: dict[str, Any] = {
        "kind": kind,
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "title": spec.get("name") or _what_it_runs(spec),
        "phase": status.get("phase") or "PENDING",
        "created": meta.get("creationTimestamp"),
        "age": age_seconds(meta.get("creationTimestamp"), now),
        "duration": duration_seconds(status.get("startTime"), status.get("completionTime"), now),
        "message": status.get("message"),
        "cancel": bool(spec.get("cancel")),
        "total": total,
    }
    if kind == "batch":
        row |= progress(status, total)
    else:
        row["attempt"] = status.get("attempt", 0)
    return row


def _what_it_runs(spec: Mapping[str, Any]) -> str:
    """A function's name or a container's command (a batch's template's, or its first job's)."""
    jobs = spec.get("jobs")
    body = spec.get("template") or (jobs[0] if isinstance(jobs, list) and jobs else spec)
    fn = body.get("function") or {}
    if fn.get("name"):
        return str(fn["name"])
    return " ".join(str(c) for c in (body.get("container") or {}).get("command") or [])


def matches(row: Mapping[str, Any], phase: str | None, search: str | None) -> bool:
    """Whether a list row passes the page's phase filter and name search."""
    if phase and row["phase"] != phase:
        return False
    needle = (search or "").strip().lower()
    return not needle or needle in row["name"].lower() or needle in str(row["title"]).lower()
