"""How many inputs a template batch (``template`` + ``inputs``) has. Pure, no I/O.

Both forms of a batch need this one fact: `kinetic.model.fanout` to build
input ``i``'s spec and check the spec, and `kinetic.model.batchjobs` to answer
`batchjobs.batch_total` for either form. It lives here, below both, so each
imports it and neither imports the other to get it.
"""

from __future__ import annotations

from kinetic.model.rerun import index_map
from kinetic.model.resources import BatchInputs

__all__ = ["base_count", "input_count"]


def input_count(inputs: BatchInputs) -> int:
    """How many inputs a batch has: ``inputs.indexes`` when set, else all of them.

    A grid with an empty list has no points; a grid with no keys has exactly
    one (the empty point), as ``itertools.product()`` does — but
    `kinetic.model.fanout.validate_batch_spec` rejects it, since it is surely a
    mistake. A ``fromBatch`` the operator has not resolved yet has no inputs
    known (0).
    """
    if inputs.indexes is not None:
        return len(index_map(inputs.indexes))
    return base_count(inputs)


def base_count(inputs: BatchInputs) -> int:
    """How many inputs count, items or grid name, before ``inputs.indexes`` picks some."""
    if inputs.from_batch is not None and not _has_kind(inputs):
        return 0
    if inputs.count is not None:
        return inputs.count
    if inputs.items is not None:
        return len(inputs.items)
    if inputs.grid is not None:
        total = 1
        for values in inputs.grid.values():
            total *= len(values)
        return total
    raise ValueError("spec.inputs needs one of count, items or grid")


def _has_kind(inputs: BatchInputs) -> bool:
    return any(getattr(inputs, k) is not None for k in ("count", "items", "grid"))
