"""Opt-in heap snapshots: off unless asked, and a snapshot anyone can load and read."""

from __future__ import annotations

import tracemalloc

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
