"""Ready, Reconciling and Stalled (kstatus) for every phase, on both kinds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kinetic.model.resources import Condition, Phase
from kinetic_operator.logic.conditions import readiness

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def as_table(conditions: list[Condition]) -> dict[str, tuple[str, str | None]]:
    return {c.type: (c.status, c.reason) for c in conditions}


WAIT = ("False", "InProgress")  # False while the object is still in progress


@pytest.mark.parametrize(
    ("phase", "reason", "ready", "reconciling", "stalled"),
    [
        (Phase.PENDING, "Pending", WAIT, ("True", "Pending"), WAIT),
        (Phase.RUNNING, "Running", WAIT, ("True", "Running"), WAIT),
        (
            Phase.SUCCEEDED,
            "AllSucceeded",
            ("True", "AllSucceeded"),
            ("False", "AllSucceeded"),
            ("False", "AllSucceeded"),
        ),
        (
            Phase.FAILED,
            "InvalidSpec",
            ("False", "InvalidSpec"),
            ("False", "InvalidSpec"),
            ("True", "InvalidSpec"),
        ),
        (
            Phase.CANCELLED,
            "Cancelled",
            ("False", "Cancelled"),
            ("False", "Cancelled"),
            ("True", "Cancelled"),
        ),
    ],
)
def test_exactly_one_of_ready_reconciling_stalled_is_true(
    phase: Phase, reason: str, ready: tuple, reconciling: tuple, stalled: tuple
) -> None:
    got = as_table(readiness([], phase, reason, "a sentence", T0))
    assert got == {"Ready": ready, "Reconciling": reconciling, "Stalled": stalled}


def test_transition_times_move_only_when_a_condition_flips() -> None:
    running = readiness([], Phase.RUNNING, "Running", "m", T0)
    still = readiness(running, Phase.RUNNING, "Running", "other words", T1)
    assert [c.last_transition_time for c in still] == [T0, T0, T0]
    done = readiness(still, Phase.SUCCEEDED, "AllSucceeded", "m", T1)
    times = {c.type: c.last_transition_time for c in done}
    assert times == {"Ready": T1, "Reconciling": T1, "Stalled": T0}


def test_batches_carry_them_through_their_whole_life() -> None:
    from kinetic.model.resources import KineticBatchSpec
    from kinetic_operator.logic.batch_logic import decide_batch, invalid_batch

    now = datetime(2026, 1, 1, tzinfo=UTC)
    spec = KineticBatchSpec.model_validate(
        {"template": {"container": {"command": ["true"]}}, "inputs": {"count": 2}}
    )
    started = decide_batch(spec, None, {}, now, batch="b").status
    assert as_table(started.conditions)["Reconciling"][0] == "True"
    bad = invalid_batch(started, ["spec.inputs: too many"], now).status
    table = as_table(bad.conditions)
    assert table["Stalled"] == ("True", "InvalidSpec") and table["Ready"][0] == "False"
