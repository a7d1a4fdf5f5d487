"""The modes of `make bench` and the targets of `make bench` and `make bench-scale` as the
printed table and the JSON state them: met, missed, or n/a when a mode they need did not
run (never a made-up figure). Pure functions: no cluster."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from bench_scripts import load

run = load("run")
scale = load("scale")


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
        "job": mode(
            80.0,
            pod_start={"median_seconds": 6.0},
            run={"writes_per_input": 10.9},
            slot_refill={"p95_seconds": 2.0},
        ),
        "python-job": mode(90.0),
        "container": mode(
            82.0,
            run={"writes_per_input": 11.5, "conflict_share": 0.0},
            throughput_vs_job=0.976,
            slot_refill={"p95_seconds": 3.0},
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
        ("container", "p95 slot refill - job's <="): (1.0, False),  # 3 s against the Job's 2
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
        ("container", "p95 slot refill - job's <="),
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


# --------------------------------------------------------------------------- make bench-scale


@pytest.mark.parametrize(
    "seconds, expected",
    [
        ([], None),
        ([3.0], 3.0),
        ([1.0, 2.0, None], 2.0),  # the one that never started is the slowest
        ([1.0, None, None], None),  # the median one never started
        ([4.0, 1.0, 2.0, 3.0], 2.5),
    ],
)
def test_a_probes_median_counts_a_probe_that_never_started_as_the_slowest(seconds, expected):
    assert scale.median_or_never(seconds) == expected


def scale_result(**over: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "inputs": 10_000,
        "parallel": 30,
        "wall_seconds": 240.0,
        "operator_rss_mb": {"max": 180.0},
        "writes": {"run": {"writes_per_input": 0.15}},
        "status_bytes": {"max": 3000},
        "probe_summary": {"run": {"probes": 16, "median_start_seconds": 4.2}},
        "results_right": True,
        "final_phase": "SUCCEEDED",
    }
    result.update(over)
    return result


def test_a_function_batch_at_scale_meeting_every_target():
    assert scale.function_targets(scale_result()) == {
        "wall_within_300s_for_10000_at_30": True,
        "rss_under_250mb": True,
        "writes_per_input_at_most_0.2": True,
        "status_under_64kib": True,
        "probe_median_start_within_5s_while_running": True,
        "all_results_returned": True,
        "batch_succeeded": True,
    }


@pytest.mark.parametrize(
    "over, target, verdict",
    [
        ({"wall_seconds": 301.0}, "wall_within_300s_for_10000_at_30", False),
        ({"wall_seconds": None}, "wall_within_300s_for_10000_at_30", False),  # results() failed
        ({"inputs": 2000}, "wall_within_300s_for_10000_at_30", None),  # the limit is for 10,000
        ({"parallel": 10}, "wall_within_300s_for_10000_at_30", None),
        ({"operator_rss_mb": {"max": 250.0}}, "rss_under_250mb", False),
        ({"operator_rss_mb": {"max": None}}, "rss_under_250mb", None),  # no operator sampled
        ({"writes": {"run": {"writes_per_input": 0.21}}}, "writes_per_input_at_most_0.2", False),
        ({"status_bytes": {"max": 65536}}, "status_under_64kib", False),
        (
            {"probe_summary": {"run": {"probes": 9, "median_start_seconds": 5.1}}},
            "probe_median_start_within_5s_while_running",
            False,
        ),
        (
            {"probe_summary": {"run": {"probes": 9, "median_start_seconds": None}}},
            "probe_median_start_within_5s_while_running",
            False,  # the median probe never started
        ),
        (
            {"probe_summary": {"run": {"probes": 0, "median_start_seconds": None}}},
            "probe_median_start_within_5s_while_running",
            None,  # no probe ran: no verdict
        ),
        ({"results_right": False}, "all_results_returned", False),
        ({"final_phase": "FAILED"}, "batch_succeeded", False),
    ],
)
def test_each_function_target_at_scale_says_met_missed_or_na(over, target, verdict):
    assert scale.function_targets(scale_result(**over))[target] is verdict


def test_the_probe_summary_has_the_median_beside_the_worst():
    probes = [
        {"during": "run", "at_seconds": t, "pod_seconds": 0.2, "start_seconds": s}
        for t, s in [(0, 3.0), (15, 9.0), (30, 4.0), (45, None)]
    ]
    summary = scale.summarise_probes(probes, None)["run"]
    assert summary["probes"] == 4 and summary["not_started"] == 1
    assert summary["max_start_seconds"] == 9.0
    assert summary["median_start_seconds"] == 6.5  # 3, 4, 9, never: between 4 and 9
    assert summary["median_pod_seconds"] == 0.2
