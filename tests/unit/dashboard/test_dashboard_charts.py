"""What a batch's charts plot (`kinetic.dashboard.charts`)."""

from __future__ import annotations

from kinetic.dashboard import charts
from kinetic.dashboard.tables import Attempt, InputRow


def ran(index: int, start: float, end: float | None, outcome: str = "success", **kw) -> InputRow:
    phase = {"success": "SUCCEEDED", "failure": "FAILED"}.get(outcome, "RUNNING")
    if end is None:
        phase = "RUNNING"
    return InputRow(index, phase, (Attempt(1, f"p-{index}", start, end, outcome=outcome, **kw),))


def test_attempts_that_overlap_take_as_many_slots_as_ran_at_once():
    rows = [ran(0, 100, 110), ran(1, 105, 120), ran(2, 111, 115), ran(3, 121, 130)]
    plot = charts.timeline(rows, now=200)
    assert plot["slots"] == 2
    assert [seg[0] for seg in plot["segments"]] == [0, 1, 0, 0]
    assert plot["segments"][0][1:3] == [0, 10]  # from the first start


def test_a_running_attempt_ends_now_and_an_oom_kill_stands_out():
    rows = [ran(0, 100, None, "running"), ran(1, 100, 104, "failure", reason="OOMKilled")]
    plot = charts.timeline(rows, now=130)
    assert {tuple(s[2:4]) for s in plot["segments"]} == {(30, "running"), (4, "oom")}


def test_the_timeline_keeps_the_newest_bars_within_its_bound():
    rows = [ran(i, float(i), float(i) + 0.5) for i in range(charts.MAX_SEGMENTS + 10)]
    plot = charts.timeline(rows, now=1e9)
    assert len(plot["segments"]) == charts.MAX_SEGMENTS and plot["dropped"] == 10
    assert plot["segments"][0][4] == 10


def test_completions_count_up_to_every_ended_input_in_bounded_points():
    rows = [ran(i, 0.0, float(i + 1)) for i in range(1000)] + [ran(1000, 0.0, None, "running")]
    plot = charts.completions(rows)
    assert plot["points"][0] == [0.0, 0]
    assert plot["points"][-1] == [1000.0, 1000]
    assert len(plot["points"]) <= charts.MAX_POINTS + 2
    counts = [n for _, n in plot["points"]]
    assert counts == sorted(counts)


def test_the_histogram_bins_succeeded_durations():
    rows = [ran(i, 0.0, d) for i, d in enumerate([1, 1, 2, 10])] + [ran(9, 0, 50, "failure")]
    plot = charts.histogram(rows, bins=10)
    assert plot["count"] == 4 and sum(n for _, _, n in plot["bins"]) == 4
    assert plot["bins"][-1] == [9.0, 10.0, 1]
    assert [n for _, _, n in plot["bins"][:3]] == [0, 2, 1]  # [0, 1) empty; 1 s twice; 2 s


def test_nothing_ended_plots_nothing():
    assert charts.histogram([]) == {"bins": [], "count": 0}
    assert charts.completions([ran(0, 5.0, None, "running")])["points"] == []
    assert charts.timeline([], 0)["segments"] == []
