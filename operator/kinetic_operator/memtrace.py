"""Opt-in heap snapshots of the running operator, to find what holds memory.

Off by default: tracing every allocation slows the operator. With
``KINETIC_TRACEMALLOC_FRAMES`` > 0 the operator starts `tracemalloc` at
start-up keeping that many frames per allocation, and writes a snapshot
to its temporary directory on SIGUSR1 and, with
``KINETIC_TRACEMALLOC_SECONDS`` > 0, every that many seconds. Each
snapshot is a `tracemalloc.Snapshot` dump (load it with
``tracemalloc.Snapshot.load``) beside a text file of the largest holders,
so a look needs no Python session. The files' paths are logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
import time
import tracemalloc
from pathlib import Path

log = logging.getLogger("kinetic.operator")

TOP = 40  # holders listed in the text summary


def start(frames: int) -> bool:
    """Start tracing with ``frames`` frames per allocation; False when ``frames`` is 0."""
    if frames <= 0:
        return False
    if not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    return True


def dump(directory: str | None = None) -> Path:
    """Write a snapshot and its summary; returns the snapshot's path."""
    folder = Path(directory or tempfile.gettempdir())
    stem = f"kinetic-tracemalloc-{os.getpid()}-{time.strftime('%Y%m%dT%H%M%S')}"
    path = folder / f"{stem}.snap"
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    snapshot.dump(str(path))
    (folder / f"{stem}.txt").write_text(summary(snapshot))
    return path


def summary(snapshot: tracemalloc.Snapshot, top: int = TOP) -> str:
    """Total traced bytes and the largest holders by line, as text."""
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    lines = [f"traced {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks"]
    for s in stats[:top]:
        frame = s.traceback[0]
        lines.append(f"{s.size / 2**10:10.1f} KiB {s.count:8d}  {frame.filename}:{frame.lineno}")
    return "\n".join(lines) + "\n"


def install(loop: asyncio.AbstractEventLoop, every: float) -> asyncio.Task[None] | None:
    """Dump on SIGUSR1, and every ``every`` seconds when it is > 0 (returns that task)."""

    async def dump_aside() -> None:
        # Off the event loop: a snapshot of a busy operator takes tens of seconds
        # (measured: 30-70 s at 3,000 inputs with 10 frames), and on the loop it
        # stalled every watch and reconcile meanwhile.
        path = await asyncio.to_thread(dump)
        log.info("Heap snapshot written to %s", path)

    pending: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    def on_signal() -> None:
        task = loop.create_task(dump_aside())
        pending.add(task)
        task.add_done_callback(pending.discard)

    loop.add_signal_handler(signal.SIGUSR1, on_signal)
    if every <= 0:
        return None

    async def periodic() -> None:
        while True:
            await asyncio.sleep(every)
            await dump_aside()

    return loop.create_task(periodic())
