"""The modes of `make bench` and its targets as the printed table and the JSON state them:
met, missed, or n/a when a mode they need did not run (never a made-up figure). Pure
functions: no cluster."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from bench_scripts import load

run = load("run")


# --------------------------------------------------------------------------- make bench


def test_the_modes_are_the_fixed_ones_and_a_chunk_mode_per_chunk_size():
    assert run.mode_names((5, 10, 20)) == [
        *("job", "python-job", "container", "function", "per-input"),
        *("chunk-5", "chunk-10", "chunk-20", "skewed", "gang"),
    ]
    assert "chunk-8" in run.mode_names((8,)) and "chunk-10" not in run.mode_names((8,))


def test_every_mode_has_a_runner():
    cfg = run.Config(300, 30, (5, 7), 900, "kinetic-bench")
    assert set(run.runners(cfg, frozenset())) == set(run.mode_names(cfg.chunk_sizes))


@pytest.mark.parametrize(
    "text, expected", [("5,10,20", (5, 10, 20)), ("20", (20,)), ("10,5,10", (10, 5))]
)
def test_chunk_sizes_are_read_in_order_once_each(text, expected):
    assert run.chunk_sizes(text) == expected


@pytest.mark.parametrize(
    "text, said",
    [
        ("1", "'1' in '1'"),
        ("5,x", "'x' in '5,x'"),
        ("5,,10", "'' in '5,,10'"),
        ("300", "from 2 to 256"),
    ],
)
def test_a_bad_chunk_size_is_refused_naming_it_the_bounds_and_the_per_input_mode(text, said):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        run.chunk_sizes(text)
    assert said in str(e.value) and "per-input mode" in str(e.value)


def mode(wall: float, ok: bool = True, **more: Any) -> dict[str, Any]:
    return {"ok": ok, "wall_seconds": wall, **more}


def full_run() -> dict[str, dict[str, Any]]:
    """A run of every mode, with figures chosen so that each target's verdict is known."""
    modes = {
        "job": mode(80.0, pod_start={"median_seconds": 6.0}, run={"writes_per_input": 10.9}),
        "python-job": mode(90.0),
        "container": mode(
            82.0, run={"writes_per_input": 11.5, "conflict_share": 0.0}, throughput_vs_job=0.976
        ),
        "function": mode(18.0, first_result_seconds=9.5, lag={"p95_seconds": 3.2}),
        "per-input": mode(150.0),
        "chunk-5": mode(30.0),
        "chunk-10": mode(16.0),
        "chunk-20": mode(17.0),
        "skewed": mode(
            12.0,
            first_result_seconds=16.0,
            lag={"p95_seconds": 12.5},
            work_seconds=117.0,
            longest_input_seconds=4.0,
        ),
    }
    return modes


def verdicts(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[Any, Any]]:
    return {(r["mode"], r["target"]): (r["value"], r["met"]) for r in rows}


def test_the_targets_of_a_full_run():
    rows = run.check_targets(full_run(), parallel=30)
    assert verdicts(rows) == {
        ("function", "wall vs job <="): (0.225, True),  # 18 / 80
        ("function", "wall vs best chunk-K <="): (1.125, True),  # 18 / 16 (chunk-10)
        ("skewed", "wall vs ideal <="): (1.2, True),  # 12 / (max(117 / 30, 4) + 6)
        ("function", "first result s <="): (9.5, True),
        ("function", "p95 lag s <="): (3.2, True),
        ("skewed", "first result s <="): (16.0, False),
        ("skewed", "p95 lag s <="): (12.5, False),
        ("per-input", "wall vs python-job <="): (1.667, False),  # 150 / 90
        ("container", "throughput vs job >="): (0.976, True),
        ("container", "writes/input - job's <="): (0.6, True),
        ("container", "409 share <="): (0.0, True),
    }
    by_target = {(r["mode"], r["target"]): r for r in rows}
    assert by_target[("function", "wall vs best chunk-K <=")]["best_chunk"] == "chunk-10"
    assert by_target[("skewed", "wall vs ideal <=")]["ideal_seconds"] == 10.0


def test_a_target_whose_modes_did_not_run_is_na_never_a_stand_in():
    only = {k: v for k, v in full_run().items() if k in ("function", "skewed")}
    got = verdicts(run.check_targets(only, parallel=30))
    assert got[("function", "first result s <=")] == (9.5, True)  # needs only its own mode
    for needs_another in [
        ("function", "wall vs job <="),
        ("function", "wall vs best chunk-K <="),
        ("skewed", "wall vs ideal <="),  # the job mode's Pod start is part of the ideal
        ("per-input", "wall vs python-job <="),
        ("container", "throughput vs job >="),
        ("container", "writes/input - job's <="),
        ("container", "409 share <="),
    ]:
        assert got[needs_another] == (None, None), needs_another
    assert len(got) == len(run.check_targets(full_run(), parallel=30))  # every row, still


def test_a_mode_that_failed_counts_as_not_run():
    modes = full_run()
    modes["job"]["ok"] = False  # e.g. the Job ended Failed
    modes["chunk-10"]["ok"] = False
    got = verdicts(run.check_targets(modes, parallel=30))
    assert got[("function", "wall vs job <=")] == (None, None)
    assert got[("function", "wall vs best chunk-K <=")] == (1.059, True)  # 18 / 17 (chunk-20)
    assert got[("skewed", "wall vs ideal <=")] == (None, None)


def test_the_gang_is_compared_with_one_pod_per_input():
    modes = {"per-input": mode(150.0), "gang": mode(300.0), "job": mode(75.0)}
    run.add_ratios(modes)
    assert modes["gang"]["wall_ratio_to_per_input"] == 2.0
    assert modes["per-input"]["wall_ratio_to_job"] == 2.0
