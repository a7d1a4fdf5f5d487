"""The webhook's room for reviews: how many, how many bytes, and who waits or is turned away."""

from __future__ import annotations

import asyncio

import pytest
from kinetic.model.limits import MAX_REVIEW_BYTES
from kinetic_operator.review_gate import (
    SMALL_REVIEWS_BYTES,
    Busy,
    GateLimits,
    InFlight,
    ReviewGate,
    gate_limits,
    has_room,
)

MiB = 1 << 20
LIMITS = GateLimits(reviews=3, budget_bytes=4 * MiB, waiting=2, wait_seconds=0.2)


@pytest.mark.parametrize(
    ("held", "size", "room"),
    [
        (InFlight(), 4 * MiB, True),  # the largest review alone always fits
        (InFlight(), 40 * MiB, True),  # alone, whatever it declares (the size cap is elsewhere)
        (InFlight(reviews=1, bytes=3 * MiB), MiB, True),  # exactly the budget
        (InFlight(reviews=1, bytes=3 * MiB), MiB + 1, False),  # one byte over
        (InFlight(reviews=2, bytes=2 * 1024), 1024, True),
        (InFlight(reviews=3, bytes=3 * 1024), 1024, False),  # every slot taken
        (InFlight(reviews=1, bytes=4 * MiB), 1, False),  # a full budget takes nothing more
    ],
)
def test_room_is_a_slot_and_the_bytes_beside_what_is_held(
    held: InFlight, size: int, room: bool
) -> None:
    assert has_room(held, LIMITS, size) is room


def test_the_default_budget_holds_one_largest_review_and_small_ones_beside_it() -> None:
    limits = gate_limits(MAX_REVIEW_BYTES, reviews=4, wait_seconds=2)
    largest = InFlight(reviews=1, bytes=MAX_REVIEW_BYTES)
    assert has_room(largest, limits, 64 * 1024)  # an ordinary review gets in beside it
    assert not has_room(largest, limits, MAX_REVIEW_BYTES)  # a second largest waits
    assert limits.budget_bytes == MAX_REVIEW_BYTES + SMALL_REVIEWS_BYTES


@pytest.mark.asyncio
async def test_a_review_waits_for_room_and_gets_it_when_another_leaves() -> None:
    gate = ReviewGate(GateLimits(reviews=1, budget_bytes=MiB, waiting=4, wait_seconds=5))
    order: list[str] = []

    async def review(name: str, hold: float) -> None:
        async with gate.held_for(1024):
            order.append(f"{name} in")
            await asyncio.sleep(hold)
            order.append(f"{name} out")

    first = asyncio.create_task(review("a", 0.05))
    await asyncio.sleep(0)
    await asyncio.gather(first, review("b", 0))
    assert order == ["a in", "a out", "b in", "b out"]
    assert gate.held == InFlight()  # everything given back


@pytest.mark.asyncio
async def test_a_review_that_waits_too_long_is_turned_away_saying_what_is_in_flight() -> None:
    gate = ReviewGate(LIMITS)
    release = asyncio.Event()

    async def hold() -> None:
        async with gate.held_for(4 * MiB):
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    with pytest.raises(Busy) as busy:
        async with gate.held_for(1024):
            pytest.fail("got in past a full budget")
    message = str(busy.value)
    assert "judging 1 reviews (4.0 MiB)" in message and "try again" in message
    assert gate.held == InFlight(reviews=1, bytes=4 * MiB, waiting=0)
    release.set()
    await holder
    assert gate.held == InFlight()


@pytest.mark.asyncio
async def test_only_so_many_wait_the_rest_are_turned_away_at_once() -> None:
    gate = ReviewGate(GateLimits(reviews=1, budget_bytes=MiB, waiting=2, wait_seconds=5))
    release = asyncio.Event()
    turned_away: list[float] = []

    async def review() -> None:
        start = asyncio.get_running_loop().time()
        try:
            async with gate.held_for(1024):
                await release.wait()
        except Busy:
            turned_away.append(asyncio.get_running_loop().time() - start)

    tasks = [asyncio.create_task(review()) for _ in range(5)]
    await asyncio.sleep(0.05)
    # One judged, two waiting, two turned away without waiting for the 5 s.
    assert gate.held == InFlight(reviews=1, bytes=1024, waiting=2)
    assert len(turned_away) == 2 and max(turned_away) < 1
    release.set()
    await asyncio.gather(*tasks)
    assert gate.held == InFlight()


@pytest.mark.asyncio
async def test_room_is_given_back_when_a_review_fails() -> None:
    gate = ReviewGate(LIMITS)
    with pytest.raises(RuntimeError):
        async with gate.held_for(MiB):
            raise RuntimeError("the handler failed")
    assert gate.held == InFlight()
