"""Whole sized batches (``chunkSize: auto``) run by repeated `decide_batch` calls against a
simulated cluster, the world of `test_batch_simulation` with unit Pods that run their
inputs one after another and mark each begin and end in their log.

Around the operator's decisions, at random: Pods start, begin and end inputs (some
inputs always raise, some now and then), are killed mid-input (OOM: a failure of that
input), evicted or deleted by hand (a disruption); the operator crashes after its
status write (losing its memory, and with it the marks of Pods already deleted); the
watch and the log reads lag; users cancel single inputs or the whole batch, which the
units learn from the stop order.

After every step: never more live Pods than maxConcurrent, never two live Pods for one
unit, never an input recorded twice or recorded otherwise than it ended. At the end:
every input ended once, as it really did, within its retries and disruptions; units
were sized from measured durations (fewer Pods than inputs).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from kinetic.model.grid import Grid
from kinetic.model.names import input_pod_name
from kinetic.model.progress import Mark, StopOrder
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import KineticBatchStatus, Phase
from kinetic_operator.handlers.batch_units import PodProgress, grid_of, sizing_of
from kinetic_operator.handlers.batches import _prune, observe_units
from kinetic_operator.logic.batch_logic import (
    CreatePods,
    Event,
    StopPods,
    WriteManifest,
    WriteStop,
    decide_batch,
)
from kinetic_operator.logic.observed import PodView
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.batch_world import BATCH, SimPod, World, complete, make_spec

SETTINGS = OperatorSettings(storage_root="gs://b", unit_target_seconds=4.0)
MS = 1_700_000_000_000


@dataclass
class UnitPod(SimPod):
    """A unit Pod: its inputs, the one it runs now, and what its log says so far."""

    todo: list[int] = field(default_factory=list)
    now: int | None = None
    log: list[Mark] = field(default_factory=list)
    failed_any: bool = False
    oom: bool = False

    def view(self) -> PodView:
        view = super().view()
        if self.oom:
            return PodView(
                name=self.name, attempt=self.attempt, index=self.unit, phase="Failed",
                exit_code=137, terminated_reason="OOMKilled",
            )  # fmt: skip
        return view


@dataclass(repr=False)
class SizedWorld(World):
    order: StopOrder | None = None  # the stop object in storage
    began: Counter = field(default_factory=Counter)
    clock_ms: int = MS
    settings: OperatorSettings = field(default_factory=lambda: SETTINGS)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.chunk = 1  # only `World._prune`'s fallback reads it; grids come from the status

    # ------------------------------------------------------------------ the operator

    def reconcile(self, mode: str = "normal", max_launches: int | None = None) -> str:
        rv, status = self.rv, self.status
        if mode == "stale" and self.snapshots:
            rv, status = self.rng.choice(self.snapshots)
        self.read_logs()
        self.clock += timedelta(seconds=1)
        units = observe_units(list(self.index.values()), self.mem)
        d = decide_batch(
            self.spec,
            status,
            units,
            self.clock,
            batch=BATCH,
            max_launches=max_launches,
            max_disruptions=self.max_disruptions,
            sizing=sizing_of(self.spec, status or _empty(), self.settings),
            marks=self.mem.units.marks(),
            unread=self.mem.units.unread(units),
        )
        new = d.status
        if d.write_status or status is None or new.wire() != status.wire():
            if rv != self.rv:
                self.conflicts += 1
                return "conflict"
            self._write(new, d.recorded)
        elif rv != self.rv and (d.creates or d.stops):
            self.conflicts += 1
            return "conflict"
        self.mem.outcomes.recorded = d.recorded
        if mode == "crash":
            self.restart()
            return "crash"
        for action in d.actions:
            if isinstance(action, CreatePods):
                for unit, attempt in action.units:
                    self._create_unit(unit, attempt, d.recorded.terminal)
            elif isinstance(action, StopPods):
                for name in action.pods:
                    self._delete(name)
            elif isinstance(action, WriteStop):
                self.order = action.order
            elif isinstance(action, WriteManifest):
                self.manifest = d.recorded
                if self.status is not None and self.status.manifest_uri is None:
                    done = self.status.model_copy(update={"manifest_uri": "gs://b/m"})
                    self._write(done, d.recorded)
            elif isinstance(action, Event):
                self.events.append(action)
        _prune(self.mem, grid_of(self.spec, self.status or _empty()), self.total)
        return "ok"

    def read_logs(self) -> None:
        """The handler reads each existing Pod's log (lagging: not every time)."""
        for name, pod in self.pods.items():
            assert isinstance(pod, UnitPod)
            if self.rng.random() < self.lag:
                continue
            self.mem.units.pods[name] = PodProgress(marks=list(pod.log), final=not pod.live)

    def restart(self) -> None:
        super().restart()  # a new BatchMemory: the marks of deleted Pods are gone

    def _create_unit(self, unit: int, attempt: int, settled: IndexSet) -> None:
        self.mem.pods.creating[unit] = attempt
        name = input_pod_name(BATCH, unit, attempt)
        self.mem.pods.creating_names[unit] = name
        if name in self.pods:
            return
        assert self.status is not None
        grid = Grid.parse(self.status.unit_grid)
        inputs = grid.inputs_of(unit, self.total)
        reserved = IndexSet.parse(self.status.active_indexes)
        assert reserved & inputs, f"Pod {name} created for a unit not reserved"
        todo = list(inputs - settled)
        self.pods[name] = UnitPod(name, unit, attempt, tuple(inputs), todo=todo)
        self.created[unit] += 1
        self.undelivered.add(name)

    # ------------------------------------------------------------------ the cluster

    def advance(self) -> None:
        """A unit's Pod moves along: it starts, begins its next input, or ends the one it
        runs; with nothing left, it exits."""
        live = self.live()
        if not live:
            return
        pod = self.rng.choice(live)
        assert isinstance(pod, UnitPod)
        self.clock_ms += 300
        if pod.phase == "Pending":
            pod.phase = "Running"
        elif pod.now is not None:
            self._end_input(pod)
        else:
            self._next_input(pod)
        self.undelivered.add(pod.name)

    def _next_input(self, pod: UnitPod) -> None:
        while pod.todo:
            i = pod.todo.pop(0)
            why = self.order.skips(i) if self.order is not None else None
            if why is None:
                pod.log.append(Mark(i, "begin", at_ms=self.clock_ms))
                pod.now = i
                self.began[i] += 1
                return
            pod.log.append(Mark(i, "skipped", why=why))
            if self.order is not None and self.order.everything:
                for rest in pod.todo:
                    pod.log.append(Mark(rest, "skipped", why=why))
                pod.todo.clear()
        pod.phase, pod.exit_code = ("Failed", 1) if pod.failed_any else ("Succeeded", 0)

    def _end_input(self, pod: UnitPod) -> None:
        i = pod.now
        assert i is not None
        good = i not in self.doomed and (i not in self.flaky or self.rng.random() < 0.5)
        (self.succeeded_for_real if good else self.failed_for_real).add(i)
        pod.failed_any |= not good
        seconds = self.rng.choice([0.05, 0.2, 0.3])
        sha = "a" * 64 if good else None
        pod.log.append(Mark(i, "end", at_ms=self.clock_ms, ok=good, seconds=seconds, sha256=sha))
        pod.now = None

    def disrupt(self) -> None:
        """A Pod is deleted, evicted, or killed for its memory in the input it runs."""
        live = [p for p in self.live() if p.phase == "Running"]
        if not live:
            return
        pod = self.rng.choice(live)
        assert isinstance(pod, UnitPod)
        self.disrupted[pod.unit] += 1
        r = self.rng.random()
        if r < 0.35:
            self._delete(pod.name)
        elif r < 0.7:
            pod.phase, pod.reason = "Failed", "Evicted"
            self.undelivered.add(pod.name)
        else:
            if pod.now is not None:
                self.failed_for_real.add(pod.now)  # the OOM is that input's own failure
            pod.oom, pod.phase = True, "Failed"
            self.undelivered.add(pod.name)

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        self.check_live()
        bound = self.spec.retries + self.max_disruptions + 2 + self.crashes
        for i, n in self.began.items():
            assert n <= bound, f"input {i} began {n} times; at most {bound}"

    def final_checks(self) -> None:
        s = self.status
        assert s is not None
        got = complete(self.last)
        assert set(got) == set(range(self.total)), "an input never ended"
        asked = IndexSet.parse(self.spec.cancel_indexes)
        fail_fast = self.spec.fail_fast and bool(self.last.failed)
        for i, outcome in got.items():
            if outcome == "succeeded":
                assert i in self.succeeded_for_real, f"input {i} recorded succeeded, never did"
            elif outcome == "failed":
                assert i in self.failed_for_real or self.disrupted, f"input {i} failed, never did"
            else:
                assert i in asked or self.spec.cancel or fail_fast, f"{i} cancelled unasked"
        reasons = Counter(e.reason for e in self.events)
        assert reasons["Succeeded"] + reasons["Failed"] + reasons["Cancelled"] <= 1, reasons


def _empty() -> KineticBatchStatus:
    return KineticBatchStatus.model_validate({})


def sized(seed: int, **extra: Any) -> SizedWorld:
    rng = random.Random(seed)
    n = extra.pop("n", rng.randrange(1, 60))
    doomed = {i for i in range(n) if rng.random() < 0.05}
    flaky = {i for i in range(n) if rng.random() < 0.15} - doomed
    spec = make_spec(n, chunkSize="auto", **extra)
    return SizedWorld(spec=spec, rng=rng, doomed=doomed, flaky=flaky)


# =========================================================================== the runs


@pytest.mark.parametrize("seed", range(60))
def test_random_sized_batches_end_with_every_input_once(seed: int) -> None:
    rng = random.Random(seed)
    w = sized(seed, maxConcurrent=rng.choice([1, 3, 8, None]), retries=rng.randrange(3))
    w.run(limit=20000)
    assert w.status is not None and w.status.progress.endswith(f"/{w.total}")


@pytest.mark.parametrize("seed", range(30))
def test_random_sized_batches_with_cancels(seed: int) -> None:
    w = sized(100 + seed, n=40, maxConcurrent=3, retries=1)
    w.run(limit=20000, cancel_rate=0.01)


@pytest.mark.parametrize("seed", range(20))
def test_a_sized_batch_cancelled_while_it_runs_stops_its_units(seed: int) -> None:
    w = sized(200 + seed, n=50, maxConcurrent=3)
    for _ in range(20 + seed * 5):
        w.reconcile()
        w.advance()
        w.deliver()
        w.check()
    w.ended_before_cancel = w.status is not None and Phase(w.status.phase).terminal
    w.spec = w.spec.model_copy(update={"cancel": True})
    w.run(limit=20000)
    if not w.ended_before_cancel:  # running inputs are stopped with their Pods
        assert w.status is not None and w.status.phase == Phase.CANCELLED


@pytest.mark.parametrize("seed", range(20))
def test_fail_fast_stops_sized_units(seed: int) -> None:
    w = sized(300 + seed, n=40, maxConcurrent=2, failFast=True)
    w.doomed |= {seed % 10}
    w.run(limit=20000)
    assert w.status is not None and w.status.phase == Phase.FAILED


def test_fail_fast_tells_running_units_to_begin_nothing_more() -> None:
    """failFast without cancelRunningOnFail lets running inputs end; the units skip the rest."""
    told, skipped = 0, 0
    for seed in range(20):
        w = sized(400 + seed, n=40, maxConcurrent=2, failFast=True)
        w.doomed = {0}
        w.flaky.clear()
        w.run(chaos=0.3, limit=20000)
        told += w.order is not None and w.order.everything
        skipped += any(m.event == "skipped" for p in w.pods.values() for m in p.log)  # type: ignore[attr-defined]
        assert w.status is not None and w.status.phase == Phase.FAILED
    assert told >= 15 and skipped >= 5, (told, skipped)


def test_calm_sized_batches_run_in_far_fewer_pods_than_inputs() -> None:
    """Without faults, measured durations grow the units: 200 inputs of about 0.2 s each,
    a target of 4 s, run in a few dozen Pods at most."""
    w = sized(7, n=200, maxConcurrent=4)
    w.doomed.clear()
    w.flaky.clear()
    w.run(chaos=0.0, limit=50000)
    assert w.status is not None and w.status.phase == Phase.SUCCEEDED
    pods = sum(w.created.values())
    assert pods < 60, f"{pods} Pods for 200 inputs"
    assert Grid.parse(w.status.unit_grid).text().count(",") >= 1  # units of several sizes


def test_the_sized_chaos_really_happens() -> None:
    totals: Counter = Counter()
    for seed in range(20):
        w = sized(seed, n=30, maxConcurrent=3, retries=1)
        w.run(limit=20000)
        reruns = sum(1 for n in w.began.values() if n > 1)
        totals.update(crashes=w.crashes, disruptions=sum(w.disrupted.values()), reruns=reruns)
    assert totals["crashes"] > 10 and totals["disruptions"] > 10 and totals["reruns"] > 10


@pytest.mark.parametrize("at_once", [1, 2, 5])
def test_units_created_but_not_yet_seen_on_the_watch_count_as_starting(at_once: int) -> None:
    """The operator reconciles again before the watch shows the Pods it just created: those
    are starting too, so no more start than the chart's ``startsAtOnce`` until some run."""
    w = sized(3, n=200, maxConcurrent=30)
    w.settings = SETTINGS.model_copy(update={"unit_starts_at_once": at_once})
    for _ in range(4):
        w.reconcile()  # nothing delivered: the index shows none of the new Pods
    assert len(w.pods) == at_once
    w.deliver(everything=True)
    for pod in w.pods.values():
        pod.phase = "Running"
        w.undelivered.add(pod.name)
    w.deliver(everything=True)
    w.reconcile()  # as many may start as run now
    assert len(w.pods) == 2 * at_once


def test_a_unit_that_ended_its_inputs_keeps_its_slot_until_its_pod_exits() -> None:
    """Its marks say every input ended while its Pod still runs (the runner on its way
    out): the Pod is left to exit, not deleted, and no unit takes its slot before."""
    w = sized(0, n=8, maxConcurrent=1)
    w.doomed.clear()
    w.flaky.clear()
    w.lag = 0.0
    w.reconcile()
    w.deliver(everything=True)
    (pod,) = w.pods.values()
    assert isinstance(pod, UnitPod) and len(pod.todo) == 8  # one unit: ceil(8 / 1)
    while pod.todo or pod.now is not None or pod.phase == "Pending":
        if pod.phase == "Pending":
            pod.phase = "Running"
        elif pod.now is not None:
            w._end_input(pod)
        else:
            i = pod.todo.pop(0)
            pod.log.append(Mark(i, "begin", at_ms=MS))
            pod.now = i
    w.undelivered.add(pod.name)
    w.deliver(everything=True)
    assert w.reconcile() == "ok"
    assert w.status is not None and w.status.succeeded_indexes == "0-7"
    assert pod.name in w.pods and pod.live  # neither deleted nor replaced
    assert len(w.pods) == 1
