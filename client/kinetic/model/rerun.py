"""Reruns: which inputs of a batch run again, and which original input each one is. Pure.

A rerun is a new KineticBatch over some inputs of an earlier one (the
*source*). Its inputs are the source's, restricted by ``spec.inputs.indexes``:
the ascending list of *original* indexes it runs. Input ``p`` of the rerun
(its position: Pod names, status ranges, results) is the ``p``-th of them,
and that original index is what it runs with: its input, its
``KINETIC_INDEX``, its output folder. So a rerun of a rerun still says
``KINETIC_INDEX=7`` for the input that was 7 in the very first batch.

The selectors, as written in ``spec.inputs.fromBatch.indexes`` or chosen by
``kinetic batches rerun --failed|--all``:

* ``failed``: the source's failed inputs, except submission failures (inputs
  the client never packaged: they have nothing to run and would fail again);
* ``all``: every input of the source;
* ``"1,4-6"``: these indexes of the source, as its own status and manifest
  number them (its positions).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kinetic.model.ranges import IndexSet, RangeError

SELECT_FAILED = "failed"
SELECT_ALL = "all"
SELECTOR_PATTERN = r"^(failed|all|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)$"


class SelectionError(ValueError):
    """The selector names inputs the source does not have, or none at all."""


def select(
    selector: str,
    *,
    total: int,
    failed: str = "",
    submission_failures: Iterable[int] = (),
) -> IndexSet:
    """The source positions a rerun takes, from its ``failedIndexes`` and its input count."""
    if selector == SELECT_ALL:
        chosen = IndexSet.range(0, total)
    elif selector == SELECT_FAILED:
        chosen = IndexSet.parse(failed).difference(submission_failures)
    else:
        try:
            chosen = IndexSet.parse(selector)
        except RangeError as exc:
            raise SelectionError(
                f"{selector!r} is not failed, all or index ranges: {exc}"
            ) from None
        top = chosen.max()
        if top is not None and top >= total:
            raise SelectionError(
                f"index {top} is out of range: the source batch has {total} "
                f"input{'' if total == 1 else 's'} (0-{max(total - 1, 0)})"
            )
    if not chosen:
        what = "no failed inputs" if selector == SELECT_FAILED else "no inputs"
        raise SelectionError(f"the source batch has {what} to rerun")
    return chosen


@dataclass(frozen=True)
class IndexMap:
    """Position -> original index for a batch whose ``inputs.indexes`` is set.

    Held as intervals with cumulative offsets, so looking one position up
    costs a bisection however many inputs there are.
    """

    starts: tuple[int, ...]  # original index each interval starts at
    offsets: tuple[int, ...]  # position of each interval's first element
    total: int

    def __len__(self) -> int:
        return self.total

    def original(self, position: int) -> int:
        if not 0 <= position < self.total:
            raise IndexError(f"position {position} is out of range: the batch has {self.total}")
        k = bisect.bisect_right(self.offsets, position) - 1
        return self.starts[k] + (position - self.offsets[k])


@functools.lru_cache(maxsize=64)
def index_map(indexes: str) -> IndexMap:
    """The map of an ``inputs.indexes`` ranges string (cached: read per Pod built)."""
    starts, offsets, total = [], [], 0
    for start, end in IndexSet.parse(indexes).intervals:  # inclusive bounds
        starts.append(start)
        offsets.append(total)
        total += end - start + 1
    return IndexMap(tuple(starts), tuple(offsets), total)


def original_index(indexes: str | None, position: int) -> int:
    """The original index input ``position`` runs as (itself when nothing is mapped)."""
    return position if indexes is None else index_map(indexes).original(position)


def originals(indexes: str | None, positions: IndexSet) -> IndexSet:
    """Map source positions to original indexes, through the source's own map if it has one."""
    if indexes is None:
        return positions
    mapping = index_map(indexes)
    return IndexSet(mapping.original(p) for p in positions)


_NOT_WITH_FROM_BATCH = ("count", "items", "grid", "uriPrefix", "sha256URI", "sha256", "indexes")


def from_batch_problems(spec: Any) -> list[str]:
    """Why a raw spec's ``inputs.fromBatch`` is refused at admission (empty: fine or absent).

    The source's inputs replace this batch's, so naming inputs as well is a
    mistake worth saying at ``kubectl apply`` rather than after the fact.
    """
    inputs = spec.get("inputs") if isinstance(spec, dict) else None
    if not isinstance(inputs, dict) or inputs.get("fromBatch") is None:
        return []
    problems = []
    stray = [k for k in _NOT_WITH_FROM_BATCH if k in inputs]
    if stray:
        names = ", ".join(f"spec.inputs.{k}" for k in stray)
        problems.append(
            f"{names} cannot be set with spec.inputs.fromBatch, which takes the source batch's "
            "inputs: remove them (or remove fromBatch)"
        )
    if spec.get("submissionFailures"):
        problems.append("spec.submissionFailures cannot be set with spec.inputs.fromBatch")
    return problems
