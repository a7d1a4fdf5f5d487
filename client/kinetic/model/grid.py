"""Where the units of a batch start, and what each holds: the status's ``unitGrid``. Pure.

A unit is what one Pod runs: a block of consecutive inputs. With a fixed
``chunkSize`` every unit holds that many; with ``chunkSize: auto`` the operator
decides each unit's size when it launches it, from the durations it has
measured (inputs are launched in order, so a unit's size is decided for inputs
past every unit launched so far, and the grid only ever grows past them). The
grid is written in the batch's status with the launch that extends it, before
the unit's Pod is created, so a restarted operator, and a client finding an
input's Pod, know every unit's inputs. A segment ``start:size`` says that units
of ``size`` inputs start at ``start``, ``start + size``, ... up to the next
segment.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from kinetic.model.ranges import IndexSet

MAX_SEGMENTS = 400  # past that, new units keep the last segment's size: the status stays small


class GridError(ValueError):
    """A grid that does not parse: the status was not written by the operator."""


@dataclass(frozen=True)
class Grid:
    """Where the units of a batch start: segments ``(start, size)``, starts increasing,
    each from its start up to the next one's (the last one's, to the end)."""

    segments: tuple[tuple[int, int], ...] = ((0, 1),)

    @classmethod
    def fixed(cls, size: int) -> Grid:
        """Units of ``size`` inputs each: a fixed ``chunkSize``."""
        return cls(((0, max(1, size)),))

    def _segment(self, index: int) -> int:
        return max(bisect.bisect_right(self.segments, (index, float("inf"))) - 1, 0)

    def unit_of(self, index: int) -> int:
        """The start of the unit that holds input ``index``."""
        start, size = self.segments[self._segment(index)]
        return index - (index - start) % size

    def inputs_of(self, unit: int, total: int) -> IndexSet:
        """The inputs of the unit that starts at ``unit`` (clipped to the batch and to the
        next segment)."""
        at = self._segment(unit)
        end = unit + self.segments[at][1]
        if at + 1 < len(self.segments):
            end = min(end, self.segments[at + 1][0])
        return IndexSet.range(unit, min(end, total))

    def with_unit(self, start: int, size: int) -> Grid:
        """This grid with units of ``size`` from ``start`` on (``start`` past every unit
        launched so far, and a unit boundary)."""
        last_start, last_size = self.segments[-1]
        if size == last_size and (start - last_start) % last_size == 0:
            return self
        if len(self.segments) >= MAX_SEGMENTS:
            return self
        kept = tuple((s, z) for s, z in self.segments if s < start)
        return Grid((*kept, (start, size)) if kept else ((start, size),))

    def text(self) -> str:
        """As the status writes it: ``"0:16,320:8"``."""
        return ",".join(f"{s}:{z}" for s, z in self.segments)

    @classmethod
    def parse(cls, text: str | None) -> Grid:
        if not text:
            return cls()
        segments = []
        for item in text.split(","):
            start, _, size = item.partition(":")
            if not (start.isdigit() and size.isdigit() and int(size) >= 1):
                raise GridError(f"unitGrid {text!r}: {item!r} is not <start>:<size>")
            segments.append((int(start), int(size)))
        starts = [start for start, _ in segments]
        if starts[0] != 0 or starts != sorted(set(starts)):
            raise GridError(f"unitGrid {text!r}: starts must begin at 0 and increase")
        return cls(tuple(segments))
