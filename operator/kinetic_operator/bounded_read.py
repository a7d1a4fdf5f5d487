"""Read what the operator did not write, never more than a known number of bytes.

Every Pod of every tenant can write to storage, and so can anyone with the
bucket's credentials: a chunk report, a manifest shard, an accepted spec or
an input hash list may be any size by the time the operator reads it. Each
such read goes through `read_at_most` with a bound that follows from what a
genuine object can hold (`kinetic.model.limits`), so ``file:///dev/zero`` or a
2 GB upload is refused by its size, at the cost of a few kilobytes, instead
of being read until the operator runs out of memory and every tenant's
work stops with it.

The capped read itself is `kinetic.storage.read_at_most` (one per backend,
the client reads the same way); this module is where the operator takes it
from, so a read of pod-written data without a bound stands out in review.

Pod logs are the other thing a Pod writes that the operator reads: the
reaper archives each finished Pod's log before deleting it. `log_archive`
keeps the end of a log that is too long, and says on its first line that
it was cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from kinetic.model.logs import CUT_NOTE, cut_archive
from kinetic.storage import TooLarge, read_at_most

__all__ = ["CUT_NOTE", "TooLarge", "first_bytes", "last_bytes", "log_archive", "read_at_most"]


# --------------------------------------------------------------------------- pod logs

# Lines asked for when a log is too large to archive whole: its end is what says
# what went wrong. The log API's tailLines counts lines, not bytes, so what comes
# back is still read through `last_bytes`, never held whole.
TAIL_LINES = 10_000
CHUNK = 1 << 16


OpenLog = Callable[[int | None, int | None], Iterable[bytes]]
"""``open_log(limit_bytes, tail_lines)``: the Pod's log as the API serves it, in pieces.

``limit_bytes`` and ``tail_lines`` are the log API's ``limitBytes`` and
``tailLines`` (None: not sent)."""


def log_archive(open_log: OpenLog, limit: int) -> bytes:
    """What to archive of a Pod's log: all of it when it holds at most ``limit`` bytes, else
    its last ``limit`` bytes (from a line start) after a line that says it was cut.

    The first read asks the API server for ``limit + 1`` bytes (``limitBytes``): a
    log that fits costs one read of its size. A larger one is read again from
    ``TAIL_LINES`` lines before its end, keeping only the last ``limit`` bytes as
    they stream by, so a Pod that printed 300 MB costs the operator ``limit``
    bytes of memory, not 300 MB.
    """
    head = first_bytes(open_log(limit + 1, None), limit + 1)
    if len(head) <= limit:
        return head
    room = max(limit - len(CUT_NOTE.format(limit=limit).encode()), 0)
    return cut_archive(last_bytes(open_log(None, TAIL_LINES), room), limit + 1, limit)


def first_bytes(pieces: Iterable[bytes], keep: int) -> bytes:
    """The first ``keep`` bytes of a stream; the rest is never read."""
    held: list[bytes] = []
    size = 0
    stream = iter(pieces)
    try:
        for piece in stream:
            held.append(piece)
            size += len(piece)
            if size >= keep:
                break
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # a generator's cleanup: the connection goes, unread
    return b"".join(held)[:keep]


def last_bytes(pieces: Iterable[bytes], keep: int) -> bytes:
    """The last ``keep`` bytes of a stream, holding no more than about ``keep + CHUNK``."""
    held: deque[bytes] = deque()
    size = 0
    for piece in pieces:
        held.append(piece)
        size += len(piece)
        while held and size - len(held[0]) >= keep:
            size -= len(held.popleft())
    data = b"".join(held)
    return data[len(data) - keep :] if len(data) > keep else data
