"""Work-sized units: the grid of where units start, and each input's own story inside a
unit, from its Pods' marks and ends. Tables, then randomized whole units."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from kinetic.model import digest
from kinetic.model.grid import Grid, GridError
from kinetic.model.progress import Mark
from kinetic.model.ranges import IndexSet
from kinetic_operator.logic.observed import PodView
from kinetic_operator.logic.units import UnitLimits, plan_unit, running_input

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MS = int(NOW.timestamp() * 1000)
INPUTS = [10, 11, 12, 13, 14]


# --------------------------------------------------------------------------- the grid


def test_the_grid_says_where_each_unit_starts_and_what_it_holds() -> None:
    grid = Grid().with_unit(0, 4).with_unit(8, 3).with_unit(14, 1)
    assert grid.text() == "0:4,8:3,14:1"
    assert [grid.unit_of(i) for i in (0, 3, 4, 7, 8, 10, 11, 13, 14, 20)] == [
        0,
        0,
        4,
        4,
        8,
        8,
        11,
        11,
        14,
        20,
    ]
    assert list(grid.inputs_of(11, 100)) == [11, 12, 13]
    assert list(grid.inputs_of(14, 100)) == [14]
    assert list(grid.inputs_of(4, 6)) == [4, 5]  # clipped to the batch
    assert Grid.parse(grid.text()) == grid
    assert Grid().with_unit(0, 1).with_unit(5, 1) == Grid()  # same size: no new segment


@pytest.mark.parametrize("text", ["0:0", "1:4", "0:4,0:2", "0:4,8", "x"])
def test_a_grid_the_operator_did_not_write_is_refused(text: str) -> None:
    with pytest.raises(GridError, match="unitGrid"):
        Grid.parse(text)


# --------------------------------------------------------------------------- one unit


def pod(attempt: int, phase: str = "Running", **kw: object) -> PodView:
    return PodView(
        name=f"g-i10-{attempt}", attempt=attempt, index=10, uid=f"u{attempt}", phase=phase, **kw
    )  # type: ignore[arg-type]


def ended(attempt: int, reason: str = "Completed", code: int = 0, **kw: object) -> PodView:
    phase = "Succeeded" if code == 0 else "Failed"
    return pod(attempt, phase, exit_code=code, terminated_reason=reason, **kw)


def begin(i: int) -> Mark:
    return Mark(i, "begin", at_ms=MS)


def ok(i: int, sha: str = "a" * 64) -> list[Mark]:
    return [begin(i), Mark(i, "end", at_ms=MS + 200, ok=True, seconds=0.2, sha256=sha)]


def raised(i: int) -> list[Mark]:
    return [begin(i), Mark(i, "end", at_ms=MS + 200, ok=False, seconds=0.2)]


def step(pods: dict[int, PodView], marks: dict[int, list[Mark]], retries: int = 0, **kw: object):
    return plan_unit(
        INPUTS,
        pods,
        {pods[a].name: m for a, m in marks.items() if a in pods},
        reserved=kw.pop("reserved", max(pods, default=0)),  # type: ignore[arg-type]
        creating=bool(kw.pop("creating", False)),
        limits=UnitLimits(retries, int(kw.pop("max_disruptions", 3))),  # type: ignore[arg-type]
        settled=kw.pop("settled", IndexSet()),  # type: ignore[arg-type]
        stopping=bool(kw.pop("stopping", False)),
        now=NOW,
        unread=kw.pop("unread", frozenset()),  # type: ignore[arg-type]
    )


def outcomes(s: object) -> dict[str, str]:
    return {o: str(s.of(o)) for o in ("succeeded", "failed", "running", "pending")}  # type: ignore[attr-defined]


def test_a_new_unit_creates_its_first_attempt() -> None:
    s = plan_unit(
        INPUTS, {}, {}, reserved=0, creating=False, limits=UnitLimits(0, 3),
        settled=IndexSet(), stopping=False, now=NOW,
    )  # fmt: skip
    assert (s.create, s.attempt, s.live) == (1, 1, True)


def test_inputs_end_one_by_one_while_the_unit_runs() -> None:
    s = step({1: pod(1)}, {1: [*ok(10), *ok(11), begin(12)]})
    assert outcomes(s) == {
        "succeeded": "10-11", "failed": "", "running": "12", "pending": "13-14"
    }  # fmt: skip
    assert s.create is None and s.live
    assert s.inputs[10].sha256 == "a" * 64 and s.inputs[10].seconds == 0.2
    assert [r.outcome for r in s.inputs[12].records] == ["running"]


def test_each_inputs_record_carries_the_size_its_pod_marked_beside_the_hash() -> None:
    sized = [begin(10), Mark(10, "end", at_ms=MS + 200, ok=True, seconds=0.2, sha256="b" * 64,
                             size=321)]  # fmt: skip
    s = step({1: pod(1)}, {1: [*sized, *ok(11)]})
    assert digest.reported_result(s.inputs[10].records[-1].message) == digest.Reported(
        "b" * 64, 321
    )
    assert digest.reported_result(s.inputs[11].records[-1].message) == digest.Reported("a" * 64)


def test_a_unit_killed_mid_input_charges_that_input_and_reruns_the_rest_free() -> None:
    """OOM at input 12: 10 and 11 keep their results, 12 spends a retry (with the
    kernel's reason), 13 and 14 were never begun: attempt 2 runs them, uncharged."""
    killed = ended(1, "OOMKilled", 137)
    s = step({1: killed}, {1: [*ok(10), *ok(11), begin(12)]}, retries=1)
    assert outcomes(s)["succeeded"] == "10-11" and s.create == 2
    assert (s.inputs[12].failures, s.inputs[12].reason) == (1, "OOMKilled")
    assert [r.outcome for r in s.inputs[12].records] == ["failure"]
    assert s.inputs[13].records == () and s.inputs[13].failures == 0
    logs = {1: [*ok(10), *ok(11), begin(12)], 2: [*ok(12), *ok(13), *ok(14)]}
    again = step({1: killed, 2: ended(2)}, logs, retries=1)
    assert outcomes(again)["succeeded"] == "10-14" and again.create is None
    assert [r.outcome for r in again.inputs[12].records] == ["failure", "success"]
    assert [r.attempt for r in again.inputs[12].records] == [1, 2]
    assert [r.pod for r in again.inputs[13].records] == ["g-i10-2"]


def test_with_no_retries_left_the_killed_input_fails_alone() -> None:
    s = step({1: ended(1, "OOMKilled", 137)}, {1: [*ok(10), begin(11)]}, retries=0)
    assert outcomes(s) == {
        "succeeded": "10", "failed": "11", "running": "", "pending": "12-14"
    }  # fmt: skip
    assert s.create == 2  # the rest go on


def test_an_input_that_raises_fails_alone_and_the_unit_goes_on() -> None:
    marks = [*ok(10), *raised(11), *ok(12), *ok(13), *ok(14)]
    s = step({1: ended(1, "Error", 1)}, {1: marks}, retries=0)
    assert outcomes(s)["failed"] == "11" and outcomes(s)["succeeded"] == "10,12-14"
    assert s.create is None and s.inputs[11].failures == 1
    retried = step({1: ended(1, "Error", 1), 2: ended(2)}, {1: marks, 2: ok(11)}, retries=1)
    assert outcomes(retried)["succeeded"] == "10-14"
    assert [r.outcome for r in retried.inputs[11].records] == ["failure", "success"]


def test_a_deleted_unit_charges_nobody() -> None:
    gone = pod(1, deleting=True, gone=True)
    s = step({1: gone}, {1: [*ok(10), begin(11)]}, retries=0)
    assert outcomes(s)["succeeded"] == "10" and s.create == 2
    assert (s.inputs[11].failures, s.inputs[11].disruptions) == (0, 1)
    assert [r.outcome for r in s.inputs[11].records] == ["disruption"]


def test_a_unit_that_dies_before_beginning_anything_charges_its_first_input() -> None:
    """A Pod that never starts (an image that exists nowhere) must not be retried for ever
    with every input uncharged: its first input takes the failure."""
    stuck = pod(
        1,
        "Pending",
        waiting_reason="ImagePullBackOff",
        created=(NOW - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )  # noqa: E501
    s = step({1: stuck}, {}, retries=0)
    assert outcomes(s)["failed"] == "10" and s.inputs[10].reason == "ImagePullBackOff"
    assert s.create == 2 and s.stop == ("g-i10-1",)


def test_too_many_disruptions_fail_the_input_not_the_unit() -> None:
    pods = {a: pod(a, gone=True, deleting=True) for a in (1, 2)}
    s = step(pods, {1: [begin(10)], 2: [begin(10)]}, max_disruptions=1)
    assert outcomes(s)["failed"] == "10" and s.inputs[10].reason == "TooManyDisruptions"
    assert s.create == 3


def test_when_the_batch_stops_the_unit_starts_nothing_new() -> None:
    skipped = [Mark(i, "skipped", why="the batch stopped") for i in (12, 13, 14)]
    s = step({1: ended(1)}, {1: [*ok(10), *ok(11), *skipped]}, stopping=True)
    assert s.create is None and outcomes(s)["pending"] == "12-14"


def test_a_stop_object_no_one_asked_for_costs_a_disruption_so_it_cannot_loop() -> None:
    """Anyone who writes the batch's storage can leave a stop object: a unit that skipped
    inputs while the batch runs on charges the first of them a free disruption."""
    skipped = [Mark(i, "skipped", why="the batch stopped") for i in (12, 13, 14)]
    s = step({1: ended(1)}, {1: [*ok(10), *ok(11), *skipped]})
    assert s.create == 2 and outcomes(s)["pending"] == "12-14"
    assert [(r.outcome, r.reason) for r in s.inputs[12].records] == [("disruption", "Stopped")]
    pods = {a: ended(a) for a in (1, 2, 3)}
    marks = {1: [*ok(10), *ok(11), *skipped], 2: skipped, 3: skipped}
    worn = step(pods, marks, max_disruptions=2)
    assert outcomes(worn)["failed"] == "12" and worn.inputs[12].reason == "TooManyDisruptions"


def test_a_unit_stopped_inside_a_cancelled_input_charges_no_one() -> None:
    """The input it ran was cancelled (settled): the rest run again, uncharged."""
    gone = pod(1, deleting=True, gone=True)
    s = step({1: gone}, {1: [*ok(10), begin(11)]}, settled=IndexSet([11]))
    assert s.create == 2 and {12, 13, 14} <= set(s.of("pending"))
    assert all(s.inputs[i].records == () for i in (12, 13, 14))


def test_the_input_a_unit_runs_now_is_the_last_begun_and_not_ended() -> None:
    assert running_input([*ok(10), begin(11)]) == 11
    assert running_input([*ok(10), *ok(11)]) is None
    assert running_input([Mark(12, "skipped", why="cancelled")]) is None
    assert running_input([]) is None


def test_an_ended_unit_whose_log_end_is_unread_is_not_judged_yet() -> None:
    """Marks read before the Pod ended may miss an input's end: charging that input the
    Pod's exit would record a success as a failure."""
    marks = {1: [*ok(10), begin(11)]}  # the read before it ended; 11-14 ended since
    s = step({1: ended(1)}, marks, unread=frozenset({"g-i10-1"}))
    assert s.create is None and outcomes(s)["running"] == "11" and s.inputs[11].failures == 0
    judged = step({1: ended(1)}, marks)  # read to the end: 11 truly never said how it ended
    assert judged.inputs[11].reason == "NoOutcome" and judged.create == 2
    gone = step({1: pod(1, gone=True, deleting=True)}, marks, unread=frozenset({"g-i10-1"}))
    assert gone.create == 2  # its log went with it: judged on what was read


def test_settled_inputs_are_not_run_again() -> None:
    s = step({1: ended(1)}, {1: [*ok(10), *ok(11)]}, settled=IndexSet([12, 13, 14]))
    assert s.create is None and not s.live


def test_a_committed_attempt_not_seen_is_created_again_unless_being_created() -> None:
    s = step({}, {}, reserved=2)
    assert (s.create, s.attempt) == (2, 2)
    assert step({}, {}, reserved=2, creating=True).create is None


# --------------------------------------------------------------------------- randomized


@pytest.mark.parametrize("seed", range(40))
def test_every_input_ends_exactly_once_whatever_the_units_suffer(seed: int) -> None:
    """A unit of random size runs attempt after attempt; each input raises, or its Pod is
    killed or deleted mid-input, at random. Every input ends succeeded or failed, with no
    more failures than retries + 1 and no more disruptions than allowed + 1, and the unit
    never needs more attempts than its inputs could be charged."""
    rng = random.Random(seed)
    inputs = list(range(rng.randint(1, 12)))
    retries, max_dis = rng.randint(0, 2), rng.randint(0, 2)
    pods: dict[int, PodView] = {}
    marks: dict[str, list[Mark]] = {}
    limits = UnitLimits(retries, max_dis)
    bound = len(inputs) * (retries + max_dis + 2)
    for attempt in range(1, bound + 2):
        s = plan_unit(
            inputs, pods, marks, reserved=attempt - 1, creating=False, limits=limits,
            settled=IndexSet(), stopping=False, now=NOW,
        )  # fmt: skip
        if s.create is None:
            break
        assert attempt <= bound, "the unit kept going"
        name = f"g-i0-{s.create}"
        todo = [i for i, st in s.inputs.items() if not st.terminal]
        run: list[Mark] = []
        fate = "done"
        for i in todo:
            roll = rng.random()
            if roll < 0.1:
                run.append(begin(i))
                fate = "killed"
                break
            if roll < 0.15:
                run.append(begin(i))
                fate = "deleted"
                break
            run += raised(i) if roll < 0.3 else ok(i)
        marks[name] = run
        if fate == "killed":
            pods[s.create] = PodView(name, s.create, index=0, phase="Failed", exit_code=137,
                                     terminated_reason="OOMKilled")  # fmt: skip
        elif fate == "deleted":
            pods[s.create] = PodView(name, s.create, index=0, gone=True, deleting=True)
        else:
            pods[s.create] = PodView(name, s.create, index=0, phase="Succeeded", exit_code=0)
    final = plan_unit(
        inputs, pods, marks, reserved=max(pods, default=0), creating=False, limits=limits,
        settled=IndexSet(), stopping=False, now=NOW,
    )  # fmt: skip
    assert final.create is None
    for i in inputs:
        st = final.inputs[i]
        assert st.terminal, (i, st)
        assert st.failures <= retries + 1 and st.disruptions <= max_dis + 1
        successes = [r for r in st.records if r.outcome == "success"]
        assert len(successes) == (1 if st.outcome == "succeeded" else 0)
