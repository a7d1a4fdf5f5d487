"""How much of the webhook's work is in flight at once, and what happens to the rest.

The webhook's port can be reached by more than the API server (any Pod,
unless the NetworkPolicy or client certificates close it), and one review
costs memory in proportion to its body: decoded, 3 MiB of ``[{},{},…]``
became 79 MiB of Python objects, measured. Eight such bodies at once once
took a replica past its memory limit. So a review is judged only once it
fits in two bounds:

* ``reviews``: how many are read, decoded and judged at once;
* ``budget_bytes``: the bytes of their bodies together. A review counts its
  declared length (the API server always sends one), or the largest review
  allowed when it declares none. A review alone always fits: one review of
  the largest size allowed can always be judged.

A review that does not fit waits, up to ``wait_seconds``, and only
``waiting`` may wait at once (a waiting review holds its connection, not its
body: the body stays in the socket until it is read). One that cannot get in
is turned away with `Busy`, which the webhook answers as "busy, try again"
(`webhook.busy_denial`). Nothing here reads a body; `has_room` is the whole
rule, and `ReviewGate` only keeps the counts and wakes the waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

# Room kept beside one review of the largest size, so that while such a review is judged
# the API server's ordinary reviews (a few KiB each) still get in.
SMALL_REVIEWS_BYTES = 1 << 20
# A waiting review holds its connection and what the socket buffers of its body
# (aiohttp stops reading at 128 KiB, TLS buffers some more): 64 of them hold a few MiB.
MAX_WAITING = 64


@dataclass(frozen=True)
class GateLimits:
    """The bounds of the webhook's work in flight (see the module's note)."""

    reviews: int
    budget_bytes: int
    waiting: int = MAX_WAITING
    wait_seconds: float = 2.0


def gate_limits(max_review_bytes: int, reviews: int, wait_seconds: float) -> GateLimits:
    """The gate for a webhook that reads reviews of at most ``max_review_bytes``: room for one
    of that size and the ordinary small ones beside it."""
    return GateLimits(
        reviews=reviews,
        budget_bytes=max_review_bytes + SMALL_REVIEWS_BYTES,
        wait_seconds=wait_seconds,
    )


@dataclass
class InFlight:
    """What the webhook holds right now."""

    reviews: int = 0
    bytes: int = 0
    waiting: int = 0


def has_room(held: InFlight, limits: GateLimits, size: int) -> bool:
    """Whether a review of ``size`` bytes may be judged now, beside what is ``held``."""
    if held.reviews >= limits.reviews:
        return False
    return held.reviews == 0 or held.bytes + size <= limits.budget_bytes


class Busy(Exception):
    """No room for a review within the wait; the message says what is in flight."""


class ReviewGate:
    """The counts of `InFlight`, and the waiting for room (see the module's note)."""

    def __init__(self, limits: GateLimits) -> None:
        self.limits = limits
        self.held = InFlight()
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def held_for(self, size: int) -> AsyncIterator[None]:
        """Hold room for a review of ``size`` bytes while it is judged; raises `Busy`."""
        await self._enter(size)
        try:
            yield
        finally:
            await self._leave(size)

    async def _enter(self, size: int) -> None:
        if not has_room(self.held, self.limits, size):
            await self._wait_for_room(size)
        self.held.reviews += 1
        self.held.bytes += size

    async def _wait_for_room(self, size: int) -> None:
        if self.held.waiting >= self.limits.waiting:
            raise Busy(self._busy_message())
        self.held.waiting += 1
        try:
            async with self._changed:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: has_room(self.held, self.limits, size)),
                    timeout=self.limits.wait_seconds,
                )
        except TimeoutError:
            raise Busy(self._busy_message()) from None
        finally:
            self.held.waiting -= 1

    async def _leave(self, size: int) -> None:
        self.held.reviews -= 1
        self.held.bytes -= size
        async with self._changed:
            self._changed.notify_all()

    def _busy_message(self) -> str:
        held, limits = self.held, self.limits
        return (
            f"the Kinetic admission webhook is judging {held.reviews} reviews "
            f"({held.bytes / 2**20:.1f} MiB) with {held.waiting} more waiting, its limit "
            f"({limits.reviews} at once, {limits.budget_bytes / 2**20:.1f} MiB); try again in "
            "a few seconds"
        )
