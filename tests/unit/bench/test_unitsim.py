"""The unit simulation (`bench/unitsim.py`): its clock shares CPU as the model says, every
design runs each input once (and a crash loses only what the design says it loses), it
sizes units with the operator's own policy, and the same seed gives the same figures."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
from kinetic_operator.logic import unit_sizing

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load_unitsim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unitsim", BENCH / "unitsim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["unitsim"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


u = load_unitsim()
DESIGNS = {d.name: d for d in u.designs()}
SMALL = [
    u.Workload("short", "120 x 0.2 s", (0.2,) * 120, 12),
    u.Workload("mixed", "90 mixed", tuple(0.1 + (i * 7 % 13) * 0.5 for i in range(90)), 10),
    u.Workload("long", "20 x 12 s", (12.0,) * 20, 8),
]


def finished_at(clock: object, events: list[tuple[str, float]], name: str) -> None:
    events.append((name, clock.now))  # type: ignore[attr-defined]


def test_work_shares_the_cores_and_each_gets_at_most_what_it_asks_for():
    clock = u.Clock(cores=1.0)
    ends: list[tuple[str, float]] = []
    clock.compute(1.0, 1.0, lambda: finished_at(clock, ends, "a"))
    clock.compute(1.0, 1.0, lambda: finished_at(clock, ends, "b"))
    while clock.step():
        pass
    assert ends == [("a", pytest.approx(2.0)), ("b", pytest.approx(2.0))]  # half a core each

    clock = u.Clock(cores=2.0)
    ends = []
    clock.compute(1.0, 1.0, lambda: finished_at(clock, ends, "alone"))  # capped at one core
    clock.compute(0.5, 0.5, lambda: finished_at(clock, ends, "half"))
    while clock.step():
        pass
    assert dict(ends) == {"alone": pytest.approx(1.0), "half": pytest.approx(1.0)}


def test_pods_started_together_take_longer_the_more_there_are():
    medians = [sorted(u.start_latencies(k))[k // 2] for k in (1, 10, 30)]
    assert medians[0] < medians[1] < medians[2]
    node = u.NODE
    alone = node.bind_seconds + node.start_wall_seconds + node.start_cpu_seconds
    assert medians[0] == pytest.approx(alone)
    # thirty starts share what the background leaves of the cores
    cores = node.cores - node.background_cores
    assert medians[2] == pytest.approx(alone - node.start_cpu_seconds + 30 * 0.4 / cores)


@pytest.mark.parametrize("design", sorted(DESIGNS))
def test_every_design_runs_each_input_once_and_no_faster_than_the_work_allows(design):
    for w in SMALL:
        out = u.simulate(w, DESIGNS[design])
        assert out.ended == Counter(range(len(w.durations))), w.key
        assert out.executions == len(w.durations), w.key
        assert out.wall >= sum(w.durations) / w.parallel, w.key
        assert out.first_result <= out.wall


@pytest.mark.parametrize("design", ["fixed-10", "sized", "pool-0.5"])
def test_a_unit_that_dies_loses_finished_inputs_only_if_nothing_reported_them(design):
    w = SMALL[0]
    crashes = [5, 17, 60]
    mid = u.simulate(w, DESIGNS[design], crash_inputs=crashes)
    end = u.simulate(w, DESIGNS[design], crash_inputs=crashes, mid_unit_progress=False)
    for out in (mid, end):
        assert out.ended == Counter(range(len(w.durations)))  # each outcome once, in the end
        assert out.charged == len(crashes)  # the input it died in, once each
    assert mid.rerun == 0
    assert mid.executions == len(w.durations) + len(crashes)  # the crashed ones, again
    assert end.rerun > 0  # reported only at the unit's end: its finished inputs run again
    assert end.executions == len(w.durations) + len(crashes) + end.rerun


def test_retries_exhausted_the_crashed_input_fails_and_the_rest_still_run():
    w = SMALL[0]
    out = u.simulate(w, DESIGNS["sized"], crash_inputs=[3], retries=0)
    assert out.ended == Counter(range(len(w.durations)))
    assert out.executions == len(w.durations)


@pytest.mark.parametrize("design", ["sized", "sized-unpaced", "pool-2"])
def test_the_sized_and_pool_designs_size_with_the_operators_policy(design, monkeypatch):
    calls: list[tuple[int, int, int]] = []

    def spy(remaining, free_slots, live_units, *args, **kwargs):
        size = unit_sizing.size_next_unit(remaining, free_slots, live_units, *args, **kwargs)
        calls.append((remaining, free_slots, size))
        return size

    monkeypatch.setattr(u, "size_next_unit", spy)
    out = u.simulate(SMALL[1], DESIGNS[design])
    assert calls and [size for _, _, size in calls] == [s for _, s, _ in out.sizes]


def test_the_same_seed_gives_the_same_figures():
    def figures() -> list[tuple[float, int, float]]:
        rows = []
        for w in u.workloads(seed=7)[2:3]:  # the skewed one: its long inputs come from the seed
            for d in DESIGNS.values():
                out = u.simulate(w, d, crash_inputs=u.crash_inputs(len(w.durations), 0.02, 7))
                rows.append((out.wall, out.pods, out.p95_lag))
        return rows

    assert figures() == figures()
    assert u.workloads(seed=7)[2].durations != u.workloads(seed=8)[2].durations
