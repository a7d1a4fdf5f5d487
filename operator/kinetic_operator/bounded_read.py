"""Read what the operator did not write, never more than a known number of bytes.

Every Pod of every tenant can write to storage, and so can anyone with the
bucket's credentials: a chunk report, a manifest shard, an accepted spec or
an input hash list may be any size by the time the operator reads it. Each
such read goes through `read_at_most` with a bound that follows from what a
genuine object can hold (`kinetic.limits`), so ``file:///dev/zero`` or a
2 GB upload is refused by its size, at the cost of a few kilobytes, instead
of being read until the operator runs out of memory and every tenant's
work stops with it.

The capped read itself is `kinetic.storage.read_at_most` (one per backend,
the client reads the same way); this module is where the operator takes it
from, so a read of pod-written data without a bound stands out in review.
"""

from __future__ import annotations

from kinetic.storage import TooLarge, read_at_most

__all__ = ["TooLarge", "read_at_most"]
