"""A sized batch's units as the handler sees them: the marks in their Pods' logs, and the
stop the batch sends them. (What they mean is `kinetic_operator.logic.units`, which is pure.)

An input's outcome must reach the batch within seconds of its end, while its unit goes on.
What vouches for it travels on a channel tied to that Pod, which a namespace-mate cannot
write: the Pod's own log, read through the API server (`kinetic.model.progress`). Storage
alone never vouches. So while a unit's Pod runs, each reconcile of its batch (at least
every ``progress_interval`` seconds) reads the log lines written since the last read, at
most a bounded number of bytes, and keeps the marks; once the Pod has ended, one last read
takes the rest. What is kept is a few dozen bytes per input, dropped once the unit's
inputs are recorded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kinetic import storage
from kinetic.model import layout, progress
from kinetic.model.grid import Grid
from kinetic.model.progress import Mark
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import KineticBatchSpec, KineticBatchStatus

from kinetic_operator.kube import Kube
from kinetic_operator.logic.batch_logic import UnitObservation
from kinetic_operator.logic.unit_sizing import DurationEstimate, SizingRules
from kinetic_operator.logic.units import Sizing, units_sized
from kinetic_operator.settings import OperatorSettings

log = logging.getLogger("kinetic.operator")

READ_BYTES = 1 << 20  # one read of a unit's log; more follow while it was full
READS = 8  # at most this many reads of one Pod per reconcile


@dataclass
class PodProgress:
    """The marks read from one unit Pod's log, and where reading stopped."""

    marks: list[Mark] = field(default_factory=list)
    last: tuple[int, int] | None = None  # the newest line read: (unix seconds, nanoseconds)
    final: bool = False  # read after the Pod ended: nothing more will come


@dataclass
class UnitProgress:
    """Per batch: each unit Pod's progress, and whether its units were told to stop."""

    pods: dict[str, PodProgress] = field(default_factory=dict)
    stop_written: bytes = b""  # the stop order last written to storage

    def marks(self) -> dict[str, Sequence[Mark]]:
        return {name: p.marks for name, p in self.pods.items()}

    def unread(self, units: Mapping[int, UnitObservation]) -> frozenset[str]:
        """Ended Pods whose log's end was not read (the read failed): until it is, their
        marks may be missing an input's end, so they are not judged yet."""
        return frozenset(
            pod.name
            for obs in units.values()
            for pod in obs.pods.values()
            if pod.terminal and not pod.gone and not self.pods.get(pod.name, PodProgress()).final
        )

    def forget(self, pods: set[str]) -> None:
        """Pods whose unit's inputs are all recorded: their marks are needed no more."""
        for name in pods:
            self.pods.pop(name, None)


def read_progress(
    kube: Kube,
    namespace: str,
    units: Mapping[int, UnitObservation],
    kept: UnitProgress,
    now: datetime,
) -> None:
    """Read what each unit Pod has written to its log since the last look (its whole log the
    first time), and keep the marks."""
    for obs in units.values():
        for pod in obs.pods.values():
            seen = kept.pods.setdefault(pod.name, PodProgress())
            if seen.final or pod.gone or (pod.phase == "Pending" and not pod.start_time):
                continue
            try:
                _read(kube, namespace, pod.name, seen, now)
            except Exception as exc:  # noqa: BLE001 - the next look reads it again
                log.warning("Cannot read the progress of %s/%s: %s", namespace, pod.name, exc)
                continue
            seen.final = pod.terminal


def _read(kube: Kube, namespace: str, pod: str, seen: PodProgress, now: datetime) -> None:
    for _ in range(READS):
        since = None
        if seen.last is not None:
            since = max(1, math.ceil(now.timestamp() - seen.last[0]) + 1)
        data = kube.pod_log_since(namespace, pod, since, READ_BYTES)
        if not data:
            return
        newest = _take(data, seen)
        if len(data) < READ_BYTES or newest is None:
            return


def _take(data: bytes, seen: PodProgress) -> tuple[int, int] | None:
    """The marks among timestamped log lines newer than the last one read; the newest
    line's time (None when no line was new)."""
    newest = None
    for line in data.split(b"\n"):
        stamp, _, text = line.partition(b" ")
        when = _when(stamp)
        if when is None or (seen.last is not None and when <= seen.last):
            continue
        newest = seen.last = when
        if text.startswith(progress.PREFIX):
            mark = progress.parse(text)
            if mark is not None:
                seen.marks.append(mark)
    return newest


def _when(stamp: bytes) -> tuple[int, int] | None:
    """``2026-11-28T06:20:01.12345Z`` as (unix seconds, nanoseconds), or None."""
    text = stamp.decode("ascii", "replace")
    if not text.endswith("Z") or "T" not in text:
        return None
    whole, _, fraction = text[:-1].partition(".")
    try:
        seconds = int(datetime.fromisoformat(whole + "+00:00").timestamp())
    except ValueError:
        return None
    digits = (fraction + "000000000")[:9]
    return (seconds, int(digits)) if digits.isdigit() else None


def write_stop(home: layout.Home, kept: UnitProgress, order: progress.StopOrder) -> None:
    """Tell the batch's units what not to begin (each time the order changes; retried next
    time if storage did not take it): each reads it before its next input."""
    text = order.text()
    if kept.stop_written == text:
        return
    try:
        storage.write_bytes(home.stop_uri, text)
    except storage.StorageError as exc:
        log.warning("Could not tell the units of %s what to skip: %s", home.prefix, exc)
        return
    kept.stop_written = text


def grid_of(spec: KineticBatchSpec, status: KineticBatchStatus) -> Grid:
    """Where the batch's units start: the status's grid (chunkSize auto), else every
    ``chunkSize`` inputs."""
    if units_sized(spec):
        return Grid.parse(status.unit_grid)
    return Grid.fixed(spec.fixed_chunk)


def pod_unit_inputs(pod: str, grid: Grid, total: int) -> IndexSet:
    """The inputs of the unit a unit Pod's name says it runs (``<grp>-i<start>-<a>``)."""
    tail = pod.rsplit("-i", 1)[-1].split("-", 1)[0]
    return grid.inputs_of(int(tail), total) if tail.isdigit() else IndexSet()


def sizing_rules(settings: OperatorSettings) -> SizingRules:
    """How units of batches with chunkSize auto are sized and paced on this cluster (the
    chart's ``units`` values)."""
    return SizingRules(
        first_unit=settings.unit_first_inputs,
        min_unit_seconds=settings.unit_min_seconds,
        start_at_once=settings.unit_starts_at_once or None,
    )


def sizing_of(
    spec: KineticBatchSpec, status: KineticBatchStatus, settings: OperatorSettings
) -> Sizing:
    """How the batch's new units are sized: its own target, else the operator's, from the
    durations its status says were measured so far."""
    measured = status.unit_durations
    estimate = (
        DurationEstimate(measured.count, measured.total_seconds, measured.longest_seconds)
        if measured is not None and measured.count
        else None
    )
    target = spec.target_unit_seconds or settings.unit_target_seconds
    return Sizing(sizing_rules(settings), target, estimate)
