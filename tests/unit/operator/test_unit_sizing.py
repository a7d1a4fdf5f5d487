"""The unit sizing policy (`kinetic_operator.logic.unit_sizing`): its rules in tables, then whole
batches run on a simulated clock with random durations and units that die mid-way."""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from dataclasses import dataclass, field

import pytest
from kinetic.model.limits import MAX_CHUNK_SIZE
from kinetic_operator.logic.unit_sizing import (
    DEFAULT_RULES,
    DurationEstimate,
    SizingRules,
    from_durations,
    observe,
    size_next_unit,
    units_to_create,
)

# Rules with an even split, no floor and one sample enough: each table row tests one rule.
PLAIN = SizingRules(first_unit=2, min_samples=1, min_unit_seconds=0.0, start_at_once=None)


def known(mean: float, count: int = 100, longest: float | None = None) -> DurationEstimate:
    return DurationEstimate(
        count=count, total_seconds=mean * count, longest_seconds=longest or mean
    )


# --------------------------------------------------------------------------- the estimate


def test_an_estimate_grows_one_duration_at_a_time_and_never_changes_in_place():
    first = observe(None, 2.0)
    assert first == DurationEstimate(count=1, total_seconds=2.0, longest_seconds=2.0)
    second = first.observe(4.0)
    assert second == DurationEstimate(count=2, total_seconds=6.0, longest_seconds=4.0)
    assert second.mean_seconds == 3.0
    assert first.count == 1  # the old value stands


@pytest.mark.parametrize(
    "durations, expected",
    [
        ([], None),
        ([float("nan")], None),
        ([1.0, float("inf"), 3.0], DurationEstimate(2, 4.0, 3.0)),  # not a number: ignored
        ([-5.0, 1.0], DurationEstimate(2, 1.0, 1.0)),  # a clock stepped back: 0
    ],
)
def test_what_a_pod_reports_is_sanitised(durations, expected):
    assert from_durations(durations) == expected


def test_nothing_measured_has_no_mean():
    assert DurationEstimate(0, 0.0, 0.0).mean_seconds == 0.0


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    "remaining, free, live, estimate, target, size",
    [
        # about target seconds of work: 30 s of 0.2 s inputs is 150 (under the share)
        (100_000, 30, 0, known(0.2), 30.0, 150),
        (100_000, 30, 0, known(2.0), 30.0, 15),
        (100_000, 30, 0, known(7.0), 30.0, 4),  # rounded down: at most the target
        # an input longer than the target runs alone
        (100_000, 30, 0, known(45.0), 30.0, 1),
        # never more than the share: remaining / (live + free), rounded up
        (300, 30, 0, known(0.2), 30.0, 10),
        (301, 30, 0, known(0.2), 30.0, 11),
        (100, 10, 10, known(0.2), 30.0, 5),
        # the tail: fewer inputs left than slots, one each
        (29, 30, 0, known(0.2), 30.0, 1),
        (5, 1, 29, known(0.2), 30.0, 1),
        (1, 1, 0, known(0.2), 30.0, 1),
        # instant inputs: as many as the share allows, never above the runner's bound
        (100_000, 1, 0, known(0.0), 30.0, MAX_CHUNK_SIZE),
        (40, 1, 0, known(0.0), 30.0, 40),
        # nothing measured: first_unit (2), still within the share
        (100_000, 30, 0, None, 30.0, 2),
        (20, 30, 0, None, 30.0, 1),
        # nothing left
        (0, 30, 0, known(0.2), 30.0, 0),
    ],
)
def test_a_unit_is_about_the_target_and_never_more_than_its_share(
    remaining, free, live, estimate, target, size
):
    assert size_next_unit(remaining, free, live, estimate, target, rules=PLAIN) == size


@pytest.mark.parametrize(
    "remaining, free, live, queued, size",
    [
        # live units about to finish (nothing queued): the 100 left split 20 ways
        (100, 5, 15, 0, 5),
        # live units still holding 300 unstarted inputs: as much as each of them will do
        (100, 5, 15, 300, 20),
        # the tail: fewer inputs anywhere than slots, one each, however they are held
        (5, 1, 29, 0, 1),
        (5, 1, 29, 25, 1),
    ],
)
def test_the_share_counts_what_live_units_still_hold(remaining, free, live, queued, size):
    got = size_next_unit(remaining, free, live, known(0.2), 30.0, queued=queued, rules=PLAIN)
    assert got == size


@pytest.mark.parametrize(
    "estimate, size",
    [
        (None, 3),  # nothing measured: first_unit
        (known(0.2, count=1, longest=0.2), 150),  # one sample: sized by it
        (known(1.0, count=3, longest=10.0), 3),  # few samples: by the longest seen (30/10)
        (known(1.0, count=4, longest=10.0), 30),  # enough: by the mean (30/1)
    ],
)
def test_units_stay_small_until_durations_are_known(estimate, size):
    rules = SizingRules(first_unit=3, min_samples=4, min_unit_seconds=0.0)
    assert size_next_unit(100_000, 1, 0, estimate, 30.0, rules=rules) == size


@pytest.mark.parametrize(
    "remaining, free, live, mean, size",
    [
        (300, 30, 0, 0.2, 25),  # the share would be 10, 2 s of work: the floor makes it 5 s
        (10, 30, 0, 0.2, 10),  # ... but never more than what is left
        (300, 30, 0, 2.0, 10),  # 2 s inputs: the share (10 = 20 s) is above the floor
        (10, 30, 0, 2.0, 3),  # the tail: 3 inputs make the 5 s
        (10, 30, 0, 30.0, 1),  # long inputs: the tail shrinks to single inputs
        (100_000, 1, 0, 0.01, 500 if MAX_CHUNK_SIZE >= 500 else MAX_CHUNK_SIZE),
    ],
)
def test_a_unit_does_at_least_the_work_worth_a_pod(remaining, free, live, mean, size):
    rules = SizingRules(min_samples=1, min_unit_seconds=5.0)
    assert size_next_unit(remaining, free, live, known(mean), 30.0, rules=rules) == size


@pytest.mark.parametrize("chunk, remaining, size", [(1, 300, 1), (10, 300, 10), (10, 7, 7)])
def test_a_fixed_chunk_size_bypasses_the_policy(chunk, remaining, size):
    for estimate in (None, known(0.01), known(100.0)):
        assert size_next_unit(remaining, 30, 0, estimate, 30.0, chunk_size=chunk) == size


def test_a_batch_that_asks_for_less_than_the_floor_gets_its_target():
    rules = SizingRules(min_samples=1, min_unit_seconds=5.0)
    assert size_next_unit(300, 30, 0, known(0.2), 1.0, rules=rules) == 5  # 1 s, not 5 s


@pytest.mark.parametrize(
    "free, target, problem",
    [
        (0, 30.0, "free_slots is 0: size a unit only when one may start"),
        (1, 0.0, "target_seconds is 0.0: it must be a number above 0"),
        (1, float("nan"), "target_seconds is nan"),
        (1, float("inf"), "target_seconds is inf"),
    ],
)
def test_sizing_what_cannot_be_sized_says_why(free, target, problem):
    with pytest.raises(ValueError, match=problem):
        size_next_unit(10, free, 30, known(0.2), target)


@pytest.mark.parametrize(
    "free, starting, running, rules, allowed",
    [
        (30, 0, 0, SizingRules(start_at_once=4), 4),  # a batch's first units: a few
        (30, 4, 0, SizingRules(start_at_once=4), 0),  # wait for one of them to run
        (30, 3, 1, SizingRules(start_at_once=4), 1),
        (30, 0, 8, SizingRules(start_at_once=4), 8),  # as many as run: doubling
        (30, 2, 8, SizingRules(start_at_once=4), 6),
        (3, 0, 20, SizingRules(start_at_once=4), 3),  # never more than the free slots
        (30, 10, 0, SizingRules(start_at_once=None), 30),  # unpaced: every free slot
        (0, 0, 0, SizingRules(start_at_once=None), 0),
    ],
)
def test_units_start_a_few_at_a_time_then_as_many_as_run(free, starting, running, rules, allowed):
    assert units_to_create(free, starting, running, rules) == allowed


@pytest.mark.parametrize(
    "rules, problem",
    [
        (SizingRules(first_unit=0), "first_unit is 0"),
        (SizingRules(max_unit=MAX_CHUNK_SIZE + 1), f"between 1 and {MAX_CHUNK_SIZE}"),
        (SizingRules(min_samples=0), "min_samples is 0"),
        (SizingRules(min_unit_seconds=float("nan")), "min_unit_seconds is nan"),
        (SizingRules(start_at_once=0), "start_at_once is 0"),
    ],
)
def test_impossible_rules_say_why(rules, problem):
    assert any(problem in p for p in rules.problems())


def test_the_default_rules_are_possible():
    assert DEFAULT_RULES.problems() == []


# --------------------------------------------------------------------------- whole batches


@dataclass
class Unit:
    ident: int
    inputs: deque[int]
    created: float
    running_at: float
    sizes_at_creation: tuple[int, int, int, int]  # (size, remaining, queued, slots)
    measured: bool = False  # some duration was known when it was sized
    running: bool = False  # inputs[0] is running
    done: list[int] = field(default_factory=list)


@dataclass
class Story:
    """What happened to one simulated batch."""

    ends: Counter[int] = field(default_factory=Counter)  # input -> times it ended (ok or not)
    charged: Counter[int] = field(default_factory=Counter)  # input -> attempts charged
    starts: Counter[int] = field(default_factory=Counter)  # input -> times it started
    units: list[Unit] = field(default_factory=list)
    idle_while_waiting: list[tuple[float, int, int]] = field(default_factory=list)
    makespan: float = 0.0


def run_batch(
    durations: list[float],
    slots: int,
    rules: SizingRules,
    *,
    target: float = 30.0,
    crashes: set[int] = frozenset(),  # type: ignore[assignment]
    retries: int = 1,
    start_seconds: float = 0.0,
) -> Story:
    """A batch on a clock: the operator sizes a unit the moment a slot is free (as paced),
    a unit's Pod runs ``start_seconds`` after its create, then its inputs in order, and the
    operator learns each duration the moment the input ends (progress reported mid-unit).

    An input in ``crashes`` kills its unit halfway through its first attempt: it is charged
    one attempt, the unit's finished inputs keep their results, and the inputs the unit
    never started go back to the queue uncharged.
    """
    story = Story()
    queue = deque(range(len(durations)))
    live: dict[int, Unit] = {}
    estimate: DurationEstimate | None = None
    events: list[tuple[float, int, int, str]] = []  # (time, order, unit, what)
    order = 0
    now = 0.0

    def push(at: float, unit: int, what: str) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, unit, what))

    def fill() -> None:
        """Create units, one at a time, while a slot is free, inputs wait and the pacing
        allows; then note whether a slot is left empty with nothing starting to free it."""
        while queue:
            starting = sum(1 for u in live.values() if u.running_at > now)
            if units_to_create(slots - len(live), starting, len(live) - starting, rules) < 1:
                break
            remaining = len(queue)
            queued = sum(len(u.inputs) - u.running for u in live.values())
            size = size_next_unit(
                remaining,
                slots - len(live),
                len(live),
                estimate,
                target,
                queued=queued,
                rules=rules,
            )
            unit = Unit(
                ident=len(story.units),
                inputs=deque(queue.popleft() for _ in range(size)),
                created=now,
                running_at=now + start_seconds,
                sizes_at_creation=(size, remaining, queued, slots),
                measured=estimate is not None,
            )
            story.units.append(unit)
            live[unit.ident] = unit
            push(unit.running_at, unit.ident, "run")
        starting = sum(1 for u in live.values() if u.running_at > now)
        if queue and len(live) < slots and starting == 0:
            story.idle_while_waiting.append((now, len(live), len(queue)))

    def next_input(unit: Unit) -> None:
        unit.running = bool(unit.inputs)
        if not unit.inputs:
            del live[unit.ident]
            return
        i = unit.inputs[0]
        story.starts[i] += 1
        if i in crashes and story.charged[i] == 0:
            push(now + durations[i] / 2, unit.ident, "crash")
        else:
            push(now + durations[i], unit.ident, "end")

    fill()
    while events:
        now, _, ident, what = heapq.heappop(events)
        unit = story.units[ident]
        if what == "run":
            next_input(unit)
        elif what == "end":
            i = unit.inputs.popleft()
            story.ends[i] += 1
            unit.done.append(i)
            estimate = observe(estimate, durations[i])
            next_input(unit)
        else:  # the unit dies inside its current input
            i = unit.inputs.popleft()
            story.charged[i] += 1
            if story.charged[i] > retries:
                story.ends[i] += 1  # failed for good: its outcome
            else:
                unit.inputs.appendleft(i)  # runs again, in a new unit
            queue.extendleft(reversed(unit.inputs))
            unit.inputs.clear()
            del live[unit.ident]
        fill()
        story.makespan = now
    return story


def random_durations(rng: random.Random, n: int) -> list[float]:
    shape = rng.choice(["even", "lognormal", "skewed", "long"])
    if shape == "even":
        return [rng.choice([0.05, 0.2, 2.0])] * n
    if shape == "lognormal":
        return [rng.lognormvariate(0, 1.2) for _ in range(n)]
    if shape == "skewed":  # 5% at random take 20x longer
        return [4.0 if rng.random() < 0.05 else 0.2 for _ in range(n)]
    return [rng.uniform(10, 60) for _ in range(n)]


def random_rules(rng: random.Random) -> SizingRules:
    return SizingRules(
        first_unit=rng.choice([1, 2, 8]),
        min_samples=rng.choice([1, 4]),
        min_unit_seconds=rng.choice([0.0, 5.0]),
        start_at_once=rng.choice([None, 1, 4]),
    )


SEEDS = range(200)  # each a whole batch: its size, slots, durations, crashes and rules


@dataclass
class Case:
    seed: int
    durations: list[float]
    slots: int
    rules: SizingRules
    crashes: set[int]
    retries: int
    story: Story


def random_batch(
    seed: int,
    *,
    rules: SizingRules | None = None,
    crashes: bool = True,
    start_seconds: float | None = None,
) -> Case:
    rng = random.Random(seed)
    n = rng.randint(1, 400)
    durations = random_durations(rng, n)
    slots = rng.randint(1, 40)
    chosen = rules or random_rules(rng)
    crashing = {i for i in range(n) if rng.random() < 0.05} if crashes else set()
    retries = rng.choice([0, 1, 3])
    start = rng.choice([0.0, 1.5])
    story = run_batch(
        durations,
        slots,
        chosen,
        crashes=crashing,
        retries=retries,
        start_seconds=start if start_seconds is None else start_seconds,
        target=rng.choice([5.0, 30.0]),
    )
    return Case(seed, durations, slots, chosen, crashing, retries, story)


def test_every_input_ends_exactly_once_whatever_the_durations_and_crashes():
    for seed in SEEDS:
        case = random_batch(seed)
        story = case.story
        assert story.ends == Counter(range(len(case.durations))), f"seed {seed}"
        # only the input a unit died in is charged, once (its retry does not crash)
        assert story.charged == Counter(case.crashes), f"seed {seed}"
        for i in range(len(case.durations)):
            # an input runs again only after a crash inside it: nothing finished runs twice
            again = story.charged[i] == 1 and case.retries > 0
            assert story.starts[i] == 1 + again, f"seed {seed}, input {i}"


def test_no_slot_sits_idle_while_inputs_wait():
    """Unpaced, every free slot is filled at once; paced, a slot stays empty only while
    some unit is starting (its start is the modelled latency that frees the pacing)."""
    for seed in SEEDS:
        case = random_batch(seed)
        assert case.story.idle_while_waiting == [], f"seed {seed}: {case.rules}"


def test_no_unit_takes_more_than_its_share_and_the_tail_runs_single_inputs():
    for seed in SEEDS:
        rules = SizingRules(min_samples=1, min_unit_seconds=0.0, start_at_once=None)
        case = random_batch(seed, rules=rules)
        for unit in case.story.units:
            size, remaining, queued, slots = unit.sizes_at_creation
            share = math.ceil((remaining + queued) / slots)
            assert 1 <= size <= share, f"seed {seed}"
            if unit.measured and remaining + queued <= slots:  # the tail
                assert size == 1, f"seed {seed}"


def test_with_the_default_rules_long_inputs_still_end_in_single_input_units():
    """The floor of work worth a Pod never holds back inputs that are long on their own:
    once fewer inputs are left anywhere than slots, each new unit runs one."""
    tails = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        durations = [rng.uniform(DEFAULT_RULES.min_unit_seconds, 60) for _ in range(200)]
        story = run_batch(durations, rng.randint(2, 40), DEFAULT_RULES, start_seconds=1.5)
        for unit in story.units:
            size, remaining, queued, slots = unit.sizes_at_creation
            if unit.measured and remaining + queued <= slots:
                tails += 1
                assert size == 1, f"seed {seed}"
    assert tails > len(SEEDS)  # most batches end with such units


def test_greedy_units_end_within_one_unit_of_the_ideal():
    """No slot idle while inputs wait means the batch ends at most its longest unit's work
    after the perfect split of all the work (list scheduling's bound)."""
    for seed in SEEDS:
        rules = SizingRules(start_at_once=None)
        case = random_batch(seed, rules=rules, crashes=False, start_seconds=0.0)
        story = case.story
        longest_unit = max(sum(case.durations[i] for i in u.done) for u in story.units)
        ideal = sum(case.durations) / case.slots
        assert story.makespan <= ideal + longest_unit + 1e-6, f"seed {seed}"


def test_the_default_rules_run_the_bench_batch_in_few_units():
    """300 inputs of 0.2 s, 30 at once: a Pod per input is 300 Pods; the default rules,
    learning the duration from the first units, need a tenth of that."""
    story = run_batch([0.2] * 300, 30, DEFAULT_RULES, start_seconds=1.5)
    assert story.ends == Counter(range(300))
    assert len(story.units) <= 30
