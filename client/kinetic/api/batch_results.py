"""What a batch's handle gathers while it reads: each input's overview, values and errors, and
the progress bar it shows meanwhile."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kinetic.api.handle import JobCancelled, JobFailed, JobStatus
from kinetic.api.inputs import input_summary
from kinetic.model.manifest import InputRecord
from kinetic.model.ranges import IndexSet

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


@dataclass(frozen=True)
class InputOverview:
    """What `BatchHandle.overview` read: enough to say each input's phase, attempt and message."""

    phases: dict[int, JobStatus]  # launched inputs (submission failures aside)
    pod_attempts: dict[int, int]  # unit start -> its newest live Pod's attempt
    record: Callable[[int], InputRecord | None]  # the manifest's record of an input
    unit_of: Callable[[int], int] = lambda index: index  # the unit (its first input) of one

    def of(self, index: int) -> dict[str, Any]:
        """Input ``index``'s phase, attempt and message, shaped like a KineticJob's status."""
        phase = self.phases.get(index, JobStatus.PENDING)
        record = self.record(index) if index in self.phases else None
        live = self.pod_attempts.get(self.unit_of(index), 0)
        return input_summary(phase, record, live)


@dataclass
class _Results:
    """What `BatchHandle.results()` has gathered: each input's value or exception so far."""

    values: dict[int, Any]
    errors: dict[int, Exception]
    order: list[int]  # completion order, submission failures first
    failed: set[int] = field(default_factory=set)  # inputs recorded FAILED, for `failures()`
    deleted: bool = False  # the batch was deleted while we followed it
    launched: int = 0  # the most inputs any status said were launched

    @classmethod
    def starting(cls, submission_failures: dict[int, Exception]) -> _Results:
        """Inputs that failed at submission are done before anything runs."""
        return cls({}, dict(submission_failures), sorted(submission_failures))

    def saw(self, status: dict) -> None:
        """Note what a status says of the whole batch: deleted, and how many inputs launched."""
        self.deleted = self.deleted or bool(status.get("deleted"))
        self.launched = max(self.launched, status.get("launched", 0))

    def ended(self, new: IndexSet, failed: IndexSet) -> None:
        """Inputs just recorded ended, in completion order; the failed ones kept apart."""
        self.order.extend(new)
        self.failed.update(i for i in new if i in failed)

    def add(self, collected: list[tuple[int, bool, Any]]) -> None:
        """Each input's value (ok) or exception, as `BatchHandle._collect` read it."""
        for i, ok, value in collected:
            (self.values if ok else self.errors)[i] = value

    def close(self, group_id: str, total: int) -> None:
        """An exception for every input that never ended: its batch was deleted, or it never
        ran (cancelled, or not launched before the batch ended)."""
        for i in range(total):
            if i not in self.values and i not in self.errors:
                self.errors[i] = (
                    JobFailed(f"input {i} of {group_id} did not end: its batch was deleted")
                    if self.deleted and i < self.launched
                    else JobCancelled(f"input {i} of {group_id} was never run")
                )
                self.order.append(i)


class _Progress:
    """A progress bar on a terminal; silent elsewhere."""

    def __init__(self, group_id: str, total: int, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.group_id = group_id
        self.total = total
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._progress = Progress(
                "[bold]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                "{task.fields[detail]}",
                TimeRemainingColumn(),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.group_id, total=self.total, detail="")
        return self

    def update(self, status: dict) -> None:
        if self._progress is None or self._task is None:
            return
        c = status.get("counts", {})
        done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
        detail = f"running {c.get('running', 0)}  failed {c.get('failed', 0)}"
        self._progress.update(self._task, completed=done, detail=detail)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
