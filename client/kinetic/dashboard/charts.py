"""What a batch's three charts plot, computed on the server once per change. Pure.

The page draws them as SVG from these numbers (no plotting library): inputs
ended over time, a timeline of attempts in slots, and a histogram of input
durations. Each is bounded in size whatever the batch's, so a 10,000-input
batch sends a few hundred points and at most `MAX_SEGMENTS` bars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kinetic.dashboard.tables import InputRow

MAX_POINTS = 400
MAX_SEGMENTS = 4000
HISTOGRAM_BINS = 24


def completions(rows: Sequence[InputRow]) -> dict[str, Any]:
    """Inputs ended (succeeded, failed, cancelled) over time: [[t, how many by t], ...],
    with t in seconds since the first attempt started; at most `MAX_POINTS` points."""
    ends = sorted(row.ended_at for row in rows if row.ended_at is not None)
    starts = [a.start for row in rows for a in row.attempts if a.start is not None]
    if not ends:
        return {"t0": min(starts) if starts else None, "points": []}
    t0 = min([*starts, ends[0]])
    step = max(1, math.ceil(len(ends) / MAX_POINTS))
    points = [[ends[i] - t0, i + 1] for i in range(step - 1, len(ends), step)]
    if points[-1][1] != len(ends):
        points.append([ends[-1] - t0, len(ends)])
    return {"t0": t0, "points": [[0.0, 0], *points]}


def histogram(rows: Sequence[InputRow], bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Durations of the inputs that succeeded, in ``bins`` equal bins from 0 to the longest."""
    values = [r.seconds for r in rows if r.phase == "SUCCEEDED" and r.seconds is not None]
    if not values:
        return {"bins": [], "count": 0}
    top = max(values) or 1.0
    width = top / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int(v / width))] += 1
    return {
        "bins": [[i * width, (i + 1) * width, n] for i, n in enumerate(counts)],
        "count": len(values),
        "median": sorted(values)[len(values) // 2],
    }


def kind_of(outcome: str, reason: str | None) -> str:
    """How an attempt's bar is coloured: an OOM kill and a disruption stand out from a
    plain failure, and a retry (any attempt after the first) is marked by the page."""
    if reason == "OOMKilled":
        return "oom"
    return outcome if outcome in ("success", "failure", "disruption", "cancelled") else "running"


def timeline(rows: Sequence[InputRow], now: float) -> dict[str, Any]:
    """Every attempt as a bar in a slot: slots are filled greedily in start order, so as
    many slots are used as attempts ran at once. At most `MAX_SEGMENTS` bars (the newest);
    a bar still running ends at ``now``."""
    bars = sorted(
        (
            (a.start, a.end if a.end is not None else now, row.index, a)
            for row in rows
            for a in row.attempts
            if a.start is not None
        ),
        key=lambda bar: (bar[0], bar[2]),
    )
    dropped = max(0, len(bars) - MAX_SEGMENTS)
    bars = bars[dropped:]
    if not bars:
        return {"t0": None, "t1": None, "slots": 0, "segments": [], "dropped": dropped}
    t0 = bars[0][0]
    free_at: list[float] = []  # per slot, when its last bar ends
    segments = []
    for start, end, index, a in bars:
        slot = next((i for i, t in enumerate(free_at) if t <= start), len(free_at))
        if slot == len(free_at):
            free_at.append(end)
        else:
            free_at[slot] = end
        segments.append(
            [slot, start - t0, max(end, start) - t0, kind_of(a.outcome, a.reason), index, a.attempt]
        )
    return {
        "t0": t0,
        "t1": max(end for _, end, _, _ in bars),
        "slots": len(free_at),
        "segments": segments,
        "dropped": dropped,
    }
