"""One reconcile at a time per object, coalesced, with retries on errors.

Events about a KineticJob arrive on three watches (the KineticJob, its Jobs,
its Pods) and Kopf handles each watch concurrently. Reconciling the same
KineticJob twice at once could double an action, so all triggers for one key
go through a `Serializer`: if a reconcile is running, the trigger only marks
the key dirty and the running loop goes round once more — a burst of events
costs one or two reconciles, not one each.

A reconcile that raises (API server down, a timeout) is retried in-process
with capped exponential backoff. Nothing is persisted for that: the truth is
in the objects' status, and Kopf re-lists everything when it restarts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

log = logging.getLogger("kinetic.operator")

Work = Callable[[], Awaitable[None]]


@dataclass
class _Key:
    work: Work
    busy: bool = False
    dirty: bool = False
    failures: int = 0
    retry: asyncio.TimerHandle | None = None


class Serializer:
    """Runs `work` for a key, never twice at once, retrying failures with backoff."""

    def __init__(self, *, first_delay: float = 1.0, max_delay: float = 60.0) -> None:
        self.first_delay = first_delay
        self.max_delay = max_delay
        self._keys: dict[Hashable, _Key] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # strong refs until retries finish
        self._timers: set[asyncio.TimerHandle] = set()

    def __len__(self) -> int:
        """Keys with a reconcile running or a retry pending (0 when idle)."""
        return len(self._keys)

    def delay(self, failures: int) -> float:
        """Backoff before retry number `failures`: 1s, 2s, 4s, ... capped."""
        return min(self.max_delay, self.first_delay * 2 ** max(0, failures - 1))

    async def run(self, key: Hashable, work: Work) -> None:
        """Reconcile `key` now, or make the reconcile in progress go round once more."""
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key(work)
        state.work = work  # the newest closure sees the newest world
        state.dirty = True
        if state.busy:
            return
        state.busy = True
        try:
            while state.dirty:
                state.dirty = False
                try:
                    await state.work()
                except Exception:  # noqa: BLE001 — a reconcile must never take the operator down
                    state.failures += 1
                    delay = self.delay(state.failures)
                    log.exception("Reconciling %s failed; retrying in %.0fs", key, delay)
                    self._schedule(key, state, delay)
                else:
                    state.failures = 0
                    if state.retry is not None:
                        state.retry.cancel()
                        state.retry = None
        finally:
            state.busy = False
            if state.retry is None and self._keys.get(key) is state:
                del self._keys[key]

    def _schedule(self, key: Hashable, state: _Key, delay: float) -> None:
        if state.retry is not None:
            state.retry.cancel()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            state.retry = None
            task = loop.create_task(self.run(key, state.work))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        state.retry = loop.call_later(delay, fire)

    def later(self, key: Hashable, work: Work, delay: float) -> None:
        """Run `work` for `key` once after `delay` seconds (a one-off look, not a poll)."""
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            task = loop.create_task(self.run(key, work))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    def cancel_all(self) -> None:
        """Drop pending retries and looks (at shutdown)."""
        for state in self._keys.values():
            if state.retry is not None:
                state.retry.cancel()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self._keys.clear()
