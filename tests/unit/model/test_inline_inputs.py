"""Which run_async_map inputs travel inline as JSON (no upload, no download per input)."""

from __future__ import annotations

import enum
import json
import math

import pytest
from kinetic.model.payload import inline_inputs


class Level(enum.IntEnum):
    LOW = 1


class Text(str):
    pass


@pytest.mark.parametrize(
    "values",
    [
        list(range(300)),
        [0.001, 0.01, -0.0, 1e300, 5e-324],
        ["a", "", "ünïcödé", "line\nbreak", '"quoted"'],
        [True, False, None, 2**80, -(2**63)],
    ],
)
def test_plain_scalars_go_inline_and_come_back_identical(values: list[object]) -> None:
    inline = inline_inputs(values)
    assert inline == values
    back = json.loads(json.dumps(inline, ensure_ascii=False))
    assert [(type(v), v) for v in back] == [(type(v), v) for v in values]
    assert [math.copysign(1, v) for v in back if type(v) is float] == [
        math.copysign(1, v) for v in values if type(v) is float
    ]


@pytest.mark.parametrize(
    "odd_one",
    [
        (1, 2),  # a tuple would arrive as a list
        [1, 2],  # containers stay pickled: tuples inside, non-str keys, ...
        {"lr": 0.1},
        math.nan,
        math.inf,
        Level.LOW,  # a subclass would arrive as its base type
        Text("x"),
        "\ud800",  # a lone surrogate has no UTF-8
        b"bytes",
        object(),
    ],
)
def test_anything_json_would_change_keeps_the_whole_batch_pickled(odd_one: object) -> None:
    assert inline_inputs([1, 2, odd_one, 3]) is None


def test_a_batch_over_the_budget_is_pickled() -> None:
    assert inline_inputs(["x" * 100] * 10, budget=1000) is None
    assert inline_inputs(["x" * 100] * 9, budget=1000) is not None
