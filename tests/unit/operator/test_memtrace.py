"""Opt-in heap snapshots: off unless asked, and a snapshot anyone can load and read."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import tracemalloc
from pathlib import Path

import pytest
from kinetic_operator import memtrace


def test_zero_frames_traces_nothing() -> None:
    assert not tracemalloc.is_tracing()
    assert memtrace.start(0) is False
    assert not tracemalloc.is_tracing()


def test_a_dump_writes_a_loadable_snapshot_and_a_readable_summary(tmp_path) -> None:
    assert memtrace.start(3)
    try:
        kept = [bytearray(4096) for _ in range(64)]  # 256 KiB this test holds
        path = memtrace.dump(str(tmp_path))
    finally:
        tracemalloc.stop()
    snapshot = tracemalloc.Snapshot.load(str(path))
    assert sum(s.size for s in snapshot.statistics("filename")) >= 64 * 4096
    text = path.with_suffix(".txt").read_text()
    assert text.startswith("traced ") and "test_memtrace.py" in text
    assert len(kept) == 64


def test_a_signalled_snapshot_is_written_while_the_event_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot of a busy operator takes tens of seconds; the watches and reconciles on
    the event loop must not wait for it. The stand-in dump finishes only once the loop
    has run something else, so a dump made on the loop would never finish."""
    loop_ran = threading.Event()

    def dump_after_the_loop_ran(directory: str | None = None) -> Path:
        assert loop_ran.wait(10), "the event loop was blocked while the snapshot was taken"
        return tmp_path / "snapshot.snap"

    monkeypatch.setattr(memtrace, "dump", dump_after_the_loop_ran)

    async def operator_at_work() -> None:
        loop = asyncio.get_running_loop()
        memtrace.install(loop, every=0)
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.01)  # other work on the loop, while the snapshot is taken
        loop_ran.set()
        for _ in range(1000):
            if "Heap snapshot written to" in caplog.text:
                return
            await asyncio.sleep(0.01)

    with caplog.at_level(logging.INFO, logger="kinetic.operator"):
        asyncio.run(operator_at_work())
    assert f"Heap snapshot written to {tmp_path / 'snapshot.snap'}" in caplog.text
