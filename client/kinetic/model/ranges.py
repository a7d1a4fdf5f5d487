"""Sets of input indexes, written as range strings like ``"0-4,7,9-12"``.

A KineticBatch may have 100,000 inputs, but its status must stay a few
hundred bytes, so it records which inputs succeeded, failed, were cancelled
or are active as *range strings* (the same notation as an Indexed Job's
``status.completedIndexes``), not as lists. Both sides use this module: the
operator to record outcomes, the client to read them.

The notation, exactly:

* the empty set is the empty string ``""``;
* otherwise comma-separated items, each either ``N`` or ``A-B`` with
  ``A < B``, all non-negative decimal integers without sign or leading zeros;
* items strictly ascending and never touching: ``"0-2,3"`` is written
  ``"0-3"``. `format_ranges` always writes this canonical form;
  `parse_ranges` accepts only it (plus surrounding whitespace), so two
  writers can never disagree about what a status means.

`IndexSet` is immutable: every operation returns a new set. It stores sorted,
disjoint, non-adjacent inclusive intervals, so its size follows the number
of runs, not the number of indexes.
"""

from __future__ import annotations

import operator
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator

__all__ = ["IndexSet", "RangeError", "format_ranges", "parse_ranges"]

_ITEM = re.compile(r"(0|[1-9][0-9]*)(?:-(0|[1-9][0-9]*))?\Z")


class RangeError(ValueError):
    """A range string is malformed; the message says where and why."""


Interval = tuple[int, int]  # inclusive bounds


class IndexSet:
    """An immutable set of non-negative ints stored as inclusive intervals.

    Build one with ``IndexSet(iterable)``, `IndexSet.parse`, or
    `IndexSet.range`; combine with ``|``, ``-``, ``&`` (or `union`,
    `difference`, `intersection`); ``str()`` gives the canonical range string.
    """

    __slots__ = ("_starts", "_ends", "_len")
    _starts: list[int]
    _ends: list[int]
    _len: int

    def __init__(self, indexes: Iterable[int] = ()) -> None:
        if isinstance(indexes, IndexSet):
            self._starts, self._ends, self._len = indexes._starts, indexes._ends, indexes._len
            return
        values = sorted({operator.index(v) for v in indexes})  # TypeError for 1.5, "3"
        if values and values[0] < 0:
            raise ValueError(f"indexes must be non-negative, got {values[0]}")
        intervals: list[Interval] = []
        for v in values:
            if intervals and v == intervals[-1][1] + 1:
                intervals[-1] = (intervals[-1][0], v)
            else:
                intervals.append((v, v))
        self._set(intervals)

    # ------------------------------------------------------------ constructors

    @classmethod
    def _from_intervals(cls, intervals: list[Interval]) -> IndexSet:
        """Trusted constructor: intervals already sorted, disjoint, non-adjacent."""
        new = cls.__new__(cls)
        new._set(intervals)
        return new

    def _set(self, intervals: list[Interval]) -> None:
        self._starts = [a for a, _ in intervals]
        self._ends = [b for _, b in intervals]
        self._len = sum(b - a + 1 for a, b in intervals)

    @classmethod
    def range(cls, start: int, stop: int) -> IndexSet:
        """The indexes ``start <= i < stop`` (like `range`), in O(1) space."""
        if start < 0:
            raise ValueError(f"indexes must be non-negative, got start={start}")
        if stop <= start:
            return cls._from_intervals([])
        return cls._from_intervals([(start, stop - 1)])

    @classmethod
    def parse(cls, text: str | None) -> IndexSet:
        """Parse a canonical range string; `RangeError` says what is wrong."""
        if text is None:
            return cls._from_intervals([])
        body = text.strip()
        if not body:
            return cls._from_intervals([])
        intervals: list[Interval] = []
        for position, item in enumerate(body.split(","), start=1):
            m = _ITEM.match(item)
            if m is None:
                raise RangeError(
                    f"invalid index range {text!r}: item {position} ({item!r}) is not "
                    "'N' or 'A-B' with non-negative integers without leading zeros"
                )
            a = int(m.group(1))
            b = int(m.group(2)) if m.group(2) is not None else a
            if m.group(2) is not None and b <= a:
                raise RangeError(
                    f"invalid index range {text!r}: item {position} ({item!r}) must have "
                    "its start below its end"
                )
            if intervals and a <= intervals[-1][1] + 1:
                raise RangeError(
                    f"invalid index range {text!r}: item {position} ({item!r}) must start "
                    f"above {intervals[-1][1] + 1} (items ascend, never overlap or touch)"
                )
            intervals.append((a, b))
        return cls._from_intervals(intervals)

    # ------------------------------------------------------------ queries

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        k = bisect_right(self._starts, index) - 1
        return k >= 0 and index <= self._ends[k]

    def __iter__(self) -> Iterator[int]:
        for a, b in zip(self._starts, self._ends, strict=True):
            yield from range(a, b + 1)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexSet):
            return NotImplemented
        return self._starts == other._starts and self._ends == other._ends

    def __hash__(self) -> int:
        return hash((tuple(self._starts), tuple(self._ends)))

    def __repr__(self) -> str:
        return f"IndexSet({str(self)!r})"

    def __str__(self) -> str:
        return ",".join(
            str(a) if a == b else f"{a}-{b}" for a, b in zip(self._starts, self._ends, strict=True)
        )

    @property
    def intervals(self) -> list[Interval]:
        """The inclusive ``(start, end)`` runs, ascending."""
        return list(zip(self._starts, self._ends, strict=True))

    def min(self) -> int | None:
        """The smallest index, or None when empty."""
        return self._starts[0] if self._starts else None

    def max(self) -> int | None:
        """The largest index, or None when empty."""
        return self._ends[-1] if self._ends else None

    def first(self, n: int) -> IndexSet:
        """The ``n`` smallest indexes (all of them when there are fewer)."""
        if n <= 0:
            return IndexSet._from_intervals([])
        out: list[Interval] = []
        left = n
        for a, b in zip(self._starts, self._ends, strict=True):
            size = b - a + 1
            if size >= left:
                out.append((a, a + left - 1))
                return IndexSet._from_intervals(out)
            out.append((a, b))
            left -= size
        return self

    # ------------------------------------------------------------ algebra

    def union(self, *others: Iterable[int]) -> IndexSet:
        """Indexes in this set or any of ``others``."""
        pairs = self.intervals
        for other in others:
            pairs.extend(_as_set(other).intervals)
        pairs.sort()
        merged: list[Interval] = []
        for a, b in pairs:
            if merged and a <= merged[-1][1] + 1:
                if b > merged[-1][1]:
                    merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        return IndexSet._from_intervals(merged)

    def difference(self, other: Iterable[int]) -> IndexSet:
        """Indexes in this set and not in ``other``."""
        cut = _as_set(other).intervals
        out: list[Interval] = []
        j = 0
        for a, b in self.intervals:
            while j < len(cut) and cut[j][1] < a:
                j += 1
            k = j
            start = a
            while k < len(cut) and cut[k][0] <= b:
                ca, cb = cut[k]
                if ca > start:
                    out.append((start, ca - 1))
                start = max(start, cb + 1)
                if cb >= b:
                    break
                k += 1
            if start <= b:
                out.append((start, b))
        return IndexSet._from_intervals(out)

    def intersection(self, other: Iterable[int]) -> IndexSet:
        """Indexes in both sets."""
        mine, theirs = self.intervals, _as_set(other).intervals
        out: list[Interval] = []
        i = j = 0
        while i < len(mine) and j < len(theirs):
            a = max(mine[i][0], theirs[j][0])
            b = min(mine[i][1], theirs[j][1])
            if a <= b:
                out.append((a, b))
            if mine[i][1] < theirs[j][1]:
                i += 1
            else:
                j += 1
        return IndexSet._from_intervals(out)

    def add(self, *indexes: int) -> IndexSet:
        """A new set with ``indexes`` added."""
        return self.union(IndexSet(indexes))

    def isdisjoint(self, other: Iterable[int]) -> bool:
        """True when no index is in both sets."""
        return not self.intersection(other)

    __or__ = union
    __sub__ = difference
    __and__ = intersection


def _as_set(value: Iterable[int]) -> IndexSet:
    return value if isinstance(value, IndexSet) else IndexSet(value)


def format_ranges(indexes: Iterable[int]) -> str:
    """The canonical range string for ``indexes`` (any order, duplicates ignored)."""
    return str(_as_set(indexes))


def parse_ranges(text: str | None) -> list[int]:
    """Every index in a range string, ascending; `RangeError` when malformed."""
    return list(IndexSet.parse(text))
