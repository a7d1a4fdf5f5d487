"""What the operator's manifest book keeps in memory for a large batch.

A batch of 30,000 inputs (30 shards) is played through a `ManifestBook` (real file
storage) with `tracemalloc` on. The book must hold the records of the few
shards still changing, and almost nothing per input once its shard is
written: before this was measured, every written shard was read back by
the settled-input check and kept (about 2.3 KB per input), and each chunk
input's result hash stayed in memory for the life of the batch.
"""

from __future__ import annotations

import gc
import tracemalloc

from kinetic.model import layout
from manifest_history import play

INPUTS = 30_000
CHUNK = 100
PARALLEL = 20  # units at once: 2,000 inputs
WRITE_EVERY = 2  # waves between manifest writes: 4,000 inputs, 4 shards (5 when unaligned)
RETAINED_PER_INPUT = 256  # bytes; measured about 4 after the fix, 2,300 before it


def test_thirty_thousand_inputs_leave_almost_nothing_behind(tmp_path):
    held: list[tuple[int, int, int]] = []

    def probe(book, wave: int) -> None:
        held.append((len(book.shards), len(book.hashes), len(book.read_reports)))

    gc.collect()
    tracemalloc.start(1)
    try:
        before = tracemalloc.get_traced_memory()[0]
        book = play(
            f"file://{tmp_path}/store",
            INPUTS,
            container=False,
            chunk=CHUNK,
            parallel=PARALLEL,
            write_every=WRITE_EVERY,
            probe=probe,
        )
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert book.shards == {}  # every shard written and settled
    per_input = retained / INPUTS
    assert per_input < RETAINED_PER_INPUT, f"{per_input:.0f} bytes per input retained"
    # Held only while changing: the shards noted since the last write, and the one after.
    shards = (WRITE_EVERY * PARALLEL * CHUNK) // layout.SHARD_SIZE + 2
    assert max(s for s, _, _ in held) <= shards
    assert max(h for _, h, _ in held) <= shards * layout.SHARD_SIZE
    assert max(r for _, _, r in held) <= shards * layout.SHARD_SIZE // CHUNK
