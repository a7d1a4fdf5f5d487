"""Which work-sized unit design to build: a simulation of one function batch on one node.

Deterministic (seeded) and discrete-event. One batch of N inputs runs on a node of C cores
with at most P units live at once. The node is a processor-sharing CPU: everything that
wants CPU at a moment shares the cores, each getting at most what it asks for (a Pod's
start one core, an input its `cpu_share`). So thirty Pods starting at once each take
fifteen times as long as one alone on two cores, and starting Pods slows inputs that
compute. The costs are fit to what `bench/unitcosts.py` and `make bench` measured on the
local cluster's real node (`NODE`, with the date and the figures in `bench/UNITS.md`).

A Pod's life in the model:

    create --bind--> start (fixed wall + start CPU) --> runner (CPU, function Pods only)
      --> input 1 (fetch/report CPU, then its duration) --> input 2 ... --> exit
      --> the controller sees the end (end_seen) --> reacts (react) --> creates the next
    and, once it exited, its teardown CPU in the background.

Designs (`designs()`):

  plain-job       a batch/v1 Job of the same tasks: one busybox Pod per input, no runner
  pod-per-input   a function unit per input (today's default, chunk 1)
  fixed-k         k consecutive inputs per unit (today's chunk_size=k)
  sized           the operator sizes each new unit with `kinetic_operator.logic.unit_sizing`,
                  and paces their starts as it says (`units_to_create`)
  sized-unpaced   the same sizes, every free slot filled at once
  sized-small-node  the policy with the settings that suit a 2-core node (SMALL_NODE_RULES)
  pool-h          up to P long-lived Pods; each asks for its next block (sized by the
                  same policy) and waits `h` seconds for it (storage polling)
  pool-h-ahead    the same, asking for the next block when it starts the last input of one

Each design runs twice: with progress reported mid-unit (an input is visible at the
operator's next read of the unit's progress, every `poll_seconds`; the estimate of
durations grows then) and only at the unit's end (its termination message).

    python bench/unitsim.py               # prints the tables, writes bench/unitsim.md and .png
    python bench/unitsim.py --no-files    # prints them only
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kinetic_dev.operator import LOCAL_UNIT_SIZING
from kinetic_operator.logic.unit_sizing import (
    DEFAULT_RULES,
    DurationEstimate,
    SizingRules,
    observe,
    size_next_unit,
    units_to_create,
)

HERE = Path(__file__).resolve().parent
EPS = 1e-9
PROBE_EVERY = 15.0  # seconds between another namespace's probe Pods (as bench-scale does)

# --------------------------------------------------------------------------- the node


@dataclass(frozen=True)
class Node:
    """What one Pod, one input and one reaction cost (seconds; CPU in CPU-seconds)."""

    cores: float = 2.0
    background_cores: float = 0.2  # the control plane's idle load (leases, watches)
    bind_seconds: float = 0.05  # create -> the kubelet starts on it (API, scheduler, binding)
    start_wall_seconds: float = 0.05  # the part of a start that waits rather than computes
    start_cpu_seconds: float = 0.4  # a start's CPU: kubelet, containerd, runc, CNI, API writes
    end_cpu_seconds: float = 0.1  # its teardown's, after the container exited
    runner_cpu_seconds: float = 0.3  # a function Pod: Python, imports, fetch the function
    input_cpu_seconds: float = 0.02  # per input: fetch and verify it, upload its result
    end_seen_seconds: float = 0.7  # exit -> the controller sees it (kubelet status, watch)
    react_seconds: float = 0.3  # the operator: decide and send the next create
    job_react_seconds: float = 0.3  # the Job controller's
    writes_per_pod: float = 11.0  # create, binding, status patches, Events, delete
    poll_seconds: float = 2.0  # the operator reads running units' progress this often
    read_cpu_seconds: float = 0.005  # ... each read (the API server and the operator)
    status_seconds: float = 0.2  # a status write until the client's watch shows it
    submit_seconds: float = 1.0  # a function batch's upload and create (the Job's: 0.1)
    # Pods whose starts compute at once; the rest wait their turn (None: all share the cores)
    start_slots: int | None = None


NODE = Node()


# --------------------------------------------------------------------------- the clock


class Clock:
    """Timers, and CPU work shared among all who want it (processor sharing).

    ``compute(work, cap, then)`` runs ``work`` CPU-seconds at up to ``cap`` cores; while
    the demands of all running work exceed the free cores, each gets its cap scaled by
    the same factor.
    """

    def __init__(self, cores: float) -> None:
        self.cores = cores
        self.now = 0.0
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._cpu: dict[int, list[Any]] = {}  # id -> [remaining work, cap, then]
        self._seq = 0
        self.on_advance: Callable[[float], None] = lambda dt: None

    def after(self, delay: float, then: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (self.now + max(0.0, delay), self._seq, then))

    def compute(self, work: float, cap: float, then: Callable[[], None]) -> None:
        if work <= EPS or cap <= 0:
            self.after(0.0, then)
            return
        self._seq += 1
        self._cpu[self._seq] = [work, cap, then]

    def factor(self) -> float:
        demand = sum(task[1] for task in self._cpu.values())
        return 1.0 if demand <= self.cores else self.cores / demand

    def step(self) -> bool:
        """Advance to the next finished work or timer and run what is due; False when idle."""
        if not self._cpu and not self._timers:
            return False
        f = self.factor()
        dt = math.inf
        for work, cap, _ in self._cpu.values():
            dt = min(dt, work / (cap * f))
        if self._timers:
            dt = min(dt, self._timers[0][0] - self.now)
        dt = max(dt, 0.0)
        self.on_advance(dt)
        due = []
        for key, task in self._cpu.items():
            task[0] -= task[1] * f * dt
            if task[0] <= EPS:
                due.append(key)
        self.now += dt
        for key in due:
            self._cpu.pop(key)[2]()
        while self._timers and self._timers[0][0] <= self.now + EPS:
            heapq.heappop(self._timers)[2]()
        return True


class Kubelet:
    """Starts Pods on the node: after the bind and the waiting part, the start's CPU, shared
    with everything else (and, with ``start_slots``, only so many starts at a time)."""

    def __init__(self, clock: Clock, node: Node) -> None:
        self.clock, self.node = clock, node
        self.computing = 0
        self.waiting: deque[Callable[[], None]] = deque()

    def start(self, then: Callable[[], None]) -> None:
        node = self.node
        self.clock.after(node.bind_seconds + node.start_wall_seconds, lambda: self._queue(then))

    def _queue(self, then: Callable[[], None]) -> None:
        self.waiting.append(then)
        self._next()

    def _next(self) -> None:
        slots = self.node.start_slots
        while self.waiting and (slots is None or self.computing < slots):
            then = self.waiting.popleft()
            self.computing += 1
            self.clock.compute(self.node.start_cpu_seconds, 1.0, lambda t=then: self._done(t))

    def _done(self, then: Callable[[], None]) -> None:
        self.computing -= 1
        self._next()
        then()


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    durations: tuple[float, ...]
    parallel: int
    cpu_share: float = 0.0  # cores an input uses while it runs (0: it waits, like sleep)


def workloads(seed: int = 30) -> list[Workload]:
    """The bench's workloads, a skewed one and long inputs (the issue's list)."""
    rng = random.Random(seed)
    skewed = [0.2] * 300
    for i in rng.sample(range(300), 15):  # 5%, spread at random, 20x longer
        skewed[i] = 4.0
    return [
        Workload("a", "300 x 0.2 s, P=30 (make bench)", (0.2,) * 300, 30),
        Workload("b", "10,000 x 0.2 s, P=30 (bench-scale)", (0.2,) * 10_000, 30),
        Workload("c", "300, 5% at random 20x longer (0.2/4 s), P=30", tuple(skewed), 30),
        Workload("d", "200 x 2 s, P=20", (2.0,) * 200, 20),
        Workload("e", "60 x 30 s, P=30", (30.0,) * 60, 30),
        Workload(
            "f",
            "300 x 0.2 s computing (a core each), P=30",
            (0.2,) * 300,
            30,
            cpu_share=1.0,
        ),
        Workload(
            "g",
            "1,000, heavy tail (lognormal, median 1 s, 1% over 16 s), P=30",
            tuple(rng.lognormvariate(0.0, 1.2) for _ in range(1000)),
            30,
        ),
        Workload(
            "h",
            "600 rising from 0.1 to 10 s with the index (sorted by size), P=30",
            tuple(0.1 + 9.9 * i / 599 for i in range(600)),
            30,
        ),
    ]


# --------------------------------------------------------------------------- designs


@dataclass(frozen=True)
class Design:
    name: str
    kind: str = "units"  # "units" (a Pod per unit), "pool" (long-lived Pods) or "job"
    chunk: int | None = None  # a fixed unit size (None: the sizing policy)
    target_seconds: float = 30.0
    rules: SizingRules = DEFAULT_RULES
    handout_seconds: float = 0.0  # pool: from asking for a block to having it
    ahead: bool = False  # pool: ask for the next block when the last input of one starts


# The policy's settings for a node like the local cluster's (2 cores, the control plane on
# them): fewer starts at once, more work per Pod. Better there, worse on roomier nodes.
# `kinetic local up` installs the chart with these (`kinetic_dev.operator.LOCAL_UNIT_SIZING`).
SMALL_NODE_RULES = SizingRules(
    first_unit=LOCAL_UNIT_SIZING["firstInputs"],
    min_unit_seconds=float(LOCAL_UNIT_SIZING["minSeconds"]),
    start_at_once=LOCAL_UNIT_SIZING["startsAtOnce"] or None,
)


def designs(target_seconds: float = 30.0, rules: SizingRules = DEFAULT_RULES) -> list[Design]:
    sized = Design("sized", target_seconds=target_seconds, rules=rules)
    return [
        Design("plain-job", kind="job", chunk=1),
        Design("pod-per-input", chunk=1),
        *(Design(f"fixed-{k}", chunk=k) for k in (5, 10, 20)),
        sized,
        replace(sized, name="sized-unpaced", rules=replace(rules, start_at_once=None)),
        replace(sized, name="sized-small-node", rules=SMALL_NODE_RULES),
        replace(sized, name="pool-0.5", kind="pool", handout_seconds=0.5),
        replace(sized, name="pool-2", kind="pool", handout_seconds=2.0),
        replace(sized, name="pool-2-ahead", kind="pool", handout_seconds=2.0, ahead=True),
    ]


# --------------------------------------------------------------------------- one batch


@dataclass
class Outcome:
    """What one simulated batch did."""

    wall: float = 0.0  # submission -> every result visible to the client
    pods: int = 0
    writes: float = 0.0
    idle_slot_seconds: float = 0.0  # slots without a working unit while inputs waited
    first_result: float = 0.0
    lags: list[float] = field(default_factory=list)  # input end -> visible, per input
    probes: list[float] = field(default_factory=list)  # another namespace's Pod: create -> start
    charged: int = 0  # attempts charged to inputs (crashes)
    rerun: int = 0  # finished inputs whose results a crash lost (run again)
    executions: int = 0  # input runs started, all attempts
    ended: dict[int, int] = field(default_factory=dict)  # input -> times it ended well
    sizes: list[tuple[float, int, int]] = field(default_factory=list)  # (t, size, remaining)

    @property
    def p95_lag(self) -> float:
        return quantile(self.lags, 0.95)


def quantile(xs: Sequence[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass(eq=False)  # units are told apart by identity, never by their fields
class Unit:
    inputs: deque[int]
    pool: bool = False
    done: list[int] = field(default_factory=list)  # ended, not yet visible
    waiting: bool = False  # a pool Pod waiting for its block
    next_block: list[int] | None = None  # a pool Pod's block asked for ahead
    asked_ahead: bool = False
    crashed: bool = False


class Batch:
    """One batch on one node: the operator, the Pods and the client's view, on one clock."""

    def __init__(
        self,
        workload: Workload,
        design: Design,
        node: Node = NODE,
        *,
        mid_unit_progress: bool = True,
        crash_inputs: Iterable[int] = (),
        retries: int = 1,
    ) -> None:
        self.w, self.d, self.node = workload, design, node
        self.mid = mid_unit_progress and design.kind != "job"
        self.crash_inputs = set(crash_inputs)
        self.retries = retries
        self.clock = Clock(node.cores - node.background_cores)
        self.clock.on_advance = self._account
        self.kubelet = Kubelet(self.clock, node)
        self.queue: deque[int] = deque(range(len(workload.durations)))
        self.live: list[Unit] = []
        self.starting = 0
        self.estimate: DurationEstimate | None = None
        self.attempts = [0] * len(workload.durations)
        self.visible: dict[int, float] = {}
        self.end_time: dict[int, float] = {}
        self.ticks_with_news: set[int] = set()
        self.out = Outcome()
        self.job = design.kind == "job"

    # ---------------------------------------------------------------- the run

    def run(self) -> Outcome:
        submit = 0.1 if self.job else self.node.submit_seconds
        self.clock.after(submit + self._react(), self.fill)
        if self.mid:
            self.clock.after(self.node.poll_seconds, self._poll)
        self.clock.after(PROBE_EVERY, self._probe)
        while self.clock.step():
            pass
        n = len(self.w.durations)
        if len(self.visible) != n:
            raise RuntimeError(f"{self.d.name}: {n - len(self.visible)} inputs never visible")
        self.out.wall = max(self.visible.values())
        self.out.first_result = min(self.visible.values())
        self.out.lags = [self.visible[i] - self.end_time[i] for i in range(n)]
        self.out.writes = self.out.pods * self.node.writes_per_pod + len(self.ticks_with_news)
        return self.out

    def _probe(self) -> None:
        """Someone else's Pod, every PROBE_EVERY seconds: how long until it starts?"""
        created = self.clock.now

        def started() -> None:
            self.out.probes.append(self.clock.now - created)

        self.kubelet.start(started)
        if self.queue or self.live:
            self.clock.after(PROBE_EVERY, self._probe)

    def _poll(self) -> None:
        """Reading every running unit's progress costs the API server and the operator."""
        self.clock.compute(self.node.read_cpu_seconds * len(self.live), 1.0, lambda: None)
        if self.queue or self.live:
            self.clock.after(self.node.poll_seconds, self._poll)

    def _react(self) -> float:
        return self.node.job_react_seconds if self.job else self.node.react_seconds

    def _account(self, dt: float) -> None:
        if self.queue:
            working = sum(1 for u in self.live if not u.waiting)
            self.out.idle_slot_seconds += (self.w.parallel - working) * dt

    # ---------------------------------------------------------------- the operator

    def fill(self) -> None:
        """Create units while a slot is free and inputs wait (and, paced, few start)."""
        while self.queue and len(self.live) < self.w.parallel:
            if self._paced():
                return
            if self.d.kind == "pool":
                if len(self.live) >= len(self.queue):  # enough Pods to take what is left
                    return
                self._create(Unit(inputs=deque(), pool=True))
            else:
                self._create(Unit(inputs=deque(self._take(self.w.parallel - len(self.live)))))

    def _paced(self) -> bool:
        """Enough units are starting now to wait for one of them."""
        free = self.w.parallel - len(self.live)
        rules = self.d.rules if self.d.chunk is None else replace(self.d.rules, start_at_once=None)
        return units_to_create(free, self.starting, len(self.live) - self.starting, rules) < 1

    def _take(self, free_slots: int, live_units: int | None = None) -> list[int]:
        """The next unit's inputs, sized by the policy the operator runs."""
        live = len(self.live) if live_units is None else live_units
        size = size_next_unit(
            len(self.queue),
            free_slots,
            live,
            self.estimate,
            self.d.target_seconds,
            chunk_size=self.d.chunk,
            queued=sum(len(u.inputs) + len(u.next_block or ()) for u in self.live),
            rules=self.d.rules,
        )
        self.out.sizes.append((self.clock.now, size, len(self.queue)))
        return [self.queue.popleft() for _ in range(size)]

    def _create(self, unit: Unit) -> None:
        self.out.pods += 1
        self.live.append(unit)
        self.starting += 1
        self.kubelet.start(lambda: self._started(unit))

    def _started(self, unit: Unit) -> None:
        self.clock.after(self.node.end_seen_seconds, self._seen_running)
        runner = 0.0 if self.job else self.node.runner_cpu_seconds
        then = (lambda: self._ask(unit)) if unit.pool else (lambda: self._next_input(unit))
        self.clock.compute(runner, 1.0, then)

    def _seen_running(self) -> None:
        """The operator sees a Pod Running: one start fewer, so (paced) it may create more."""
        self.starting -= 1
        if self.d.chunk is None and self.d.rules.start_at_once is not None:
            self.clock.after(self._react(), self.fill)

    # ---------------------------------------------------------------- a Pod at work

    def _next_input(self, unit: Unit) -> None:
        if not unit.inputs:
            if unit.pool:
                self._ask(unit)
            else:
                self._exit(unit)
            return
        i = unit.inputs.popleft()
        if unit.pool and self.d.ahead and not unit.inputs and not unit.asked_ahead:
            unit.asked_ahead = True
            self.clock.after(self.d.handout_seconds, lambda: self._hand_ahead(unit))
        per_input = 0.0 if self.job else self.node.input_cpu_seconds
        self.clock.compute(per_input, 1.0, lambda: self._run_input(unit, i))

    def _run_input(self, unit: Unit, i: int) -> None:
        self.out.executions += 1
        seconds = self.w.durations[i]
        if i in self.crash_inputs and self.attempts[i] == 0:
            self.clock.after(seconds / 2, lambda: self._crash(unit, i))
        elif self.w.cpu_share > 0:
            work = seconds * self.w.cpu_share
            self.clock.compute(work, self.w.cpu_share, lambda: self._input_ended(unit, i))
        else:
            self.clock.after(seconds, lambda: self._input_ended(unit, i))

    def _input_ended(self, unit: Unit, i: int) -> None:
        now = self.clock.now
        self.end_time[i] = now
        self.out.ended[i] = self.out.ended.get(i, 0) + 1
        unit.done.append(i)
        if self.mid:
            tick = math.floor(now / self.node.poll_seconds) + 1
            self.clock.after(tick * self.node.poll_seconds - now, lambda: self._read(unit, tick))
        self._next_input(unit)

    def _read(self, unit: Unit, tick: int) -> None:
        """The operator reads a unit's progress: its ended inputs become visible."""
        self._publish(unit.done, self.clock.now)
        if unit.done:
            self.ticks_with_news.add(tick)
        unit.done = []

    def _publish(self, inputs: Iterable[int], seen_at: float) -> None:
        for i in inputs:
            if i in self.visible:
                continue
            self.visible[i] = seen_at + self.node.status_seconds
            self.estimate = observe(self.estimate, self.w.durations[i])

    def _crash(self, unit: Unit, i: int) -> None:
        """The unit dies inside input ``i``: it is charged; what never started goes back."""
        self.attempts[i] += 1
        self.out.charged += 1
        back = [i] if self.attempts[i] <= self.retries else []
        if not self.mid:  # nothing vouches for its finished inputs: they run again
            self.out.rerun += len(unit.done)
            for j in unit.done:
                self.out.ended[j] -= 1
            back = unit.done + back
            unit.done = []
        unit.crashed = True
        leftover = list(unit.inputs) + (unit.next_block or [])
        unit.inputs.clear()
        unit.next_block = None
        self.queue.extendleft(reversed(back + leftover))
        if i not in back:  # retries exhausted: its failure is its outcome
            self.end_time[i] = self.clock.now
            self.out.ended[i] = self.out.ended.get(i, 0) + 1
            self.visible[i] = self.clock.now + self.node.end_seen_seconds
        self._exit(unit)

    def _exit(self, unit: Unit) -> None:
        self.clock.compute(self.node.end_cpu_seconds, 1.0, lambda: None)
        self.clock.after(self.node.end_seen_seconds, lambda: self._seen_end(unit))

    def _seen_end(self, unit: Unit) -> None:
        """The controller sees the Pod gone: its inputs are visible, its slot free."""
        if not unit.crashed or self.mid:
            self._publish(unit.done, self.clock.now)
        unit.done = []
        self.live.remove(unit)
        self.clock.after(self._react(), self.fill)

    # ---------------------------------------------------------------- the pool

    def _ask(self, unit: Unit) -> None:
        """A pool Pod asks for its next block; it has it ``handout_seconds`` later."""
        if unit.next_block is not None:
            self._start_block(unit, unit.next_block)
            return
        unit.waiting = True
        if unit.asked_ahead:  # asked already; `_hand_ahead` will wake it
            return
        self.clock.after(self.d.handout_seconds, lambda: self._hand(unit))

    def _hand(self, unit: Unit) -> None:
        unit.waiting = False
        block = self._pool_block()
        if not block:
            self._exit(unit)
            return
        self._start_block(unit, block)

    def _hand_ahead(self, unit: Unit) -> None:
        block = self._pool_block()
        unit.asked_ahead = False
        if unit.crashed:
            self.queue.extendleft(reversed(block))
            return
        unit.next_block = block
        if unit.waiting:
            unit.waiting = False
            if block:
                self._start_block(unit, block)
            else:
                self._exit(unit)

    def _pool_block(self) -> list[int]:
        if not self.queue:
            return []
        return self._take(1, self.w.parallel - 1)  # the pool is P Pods, or will be

    def _start_block(self, unit: Unit, block: list[int]) -> None:
        unit.next_block = None
        unit.inputs.extend(block)
        self._next_input(unit)


def simulate(
    workload: Workload,
    design: Design,
    node: Node = NODE,
    **kwargs: Any,
) -> Outcome:
    return Batch(workload, design, node, **kwargs).run()


# --------------------------------------------------------------------------- calibration


def start_latencies(at_once: int, node: Node = NODE) -> list[float]:
    """Create -> container start of ``at_once`` plain Pods created together (no batch)."""
    clock = Clock(node.cores - node.background_cores)
    kubelet = Kubelet(clock, node)
    out: list[float] = []
    for _ in range(at_once):
        kubelet.start(lambda: out.append(clock.now))
    while clock.step():
        pass
    return out


# Measured on the local cluster's node (2 cores, kube-apiserver 1.20.2, containerd's CRI):
# `make bench N=300 P=30` (bench/README.md, 2026-11-27 17:38 and 12:18) and
# `bench/unitcosts.py pods` (2026-11-28; see UNITS.md for each run and the machine's load).
MEASURED_BATCHES = {  # design -> wall seconds of 300 x 0.2 s at P=30, per run
    "plain-job": [84.9, 73.5, 79.8],
    "pod-per-input": [139.0, 134.3, 152.5],
    "fixed-10": [17.9, 18.8, 20.8],
}
MEASURED_STARTS = {  # Pods created at once -> median create -> container start, per wave
    1: [0.27, 0.57, 0.58, 0.79, 0.53, 1.18, 0.79, 0.30, 0.20, 0.21, 0.34, 0.38],
    10: [2.40, 3.08, 1.51, 1.63],
    30: [8.56, 7.58, 3.93, 6.58],
}


def calibration(node: Node = NODE) -> str:
    """The model beside what was measured: a batch's wall time, and Pod starts at once."""
    a = workloads()[0]
    by_name = {d.name: d for d in designs()}
    rows = []
    for name, walls in MEASURED_BATCHES.items():
        model = simulate(a, by_name[name], node).wall
        measured = ", ".join(f"{w:.1f}" for w in walls)
        rows.append([f"300 x 0.2 s, P=30: {name}", f"{model:.1f}", measured])
    for k, medians in MEASURED_STARTS.items():
        model = statistics.median(start_latencies(k, node))
        measured = ", ".join(f"{m:.2f}" for m in medians)
        rows.append(
            [f"{k} Pod{'s' * (k > 1)} at once: median create -> start", f"{model:.2f}", measured]
        )
    return markdown(["", "model s", "measured s (runs)"], rows)


# --------------------------------------------------------------------------- the report


HEADER = [
    "design",
    "wall s",
    "× per-input",
    "× job",
    "Pods",
    "writes/input",
    "idle slot-s",
    "first result s (mid / end)",
    "p95 lag s (mid / end)",
    "probe start s",
]


@dataclass
class Row:
    workload: Workload
    design: Design
    mid: Outcome  # progress reported mid-unit
    end: Outcome  # ... and only when the unit ends

    def cells(self, per_input: float, job: float) -> list[str]:
        n = len(self.workload.durations)
        m, e = self.mid, self.end
        probe = statistics.median(m.probes) if m.probes else float("nan")
        return [
            self.design.name,
            f"{m.wall:.1f}",
            f"{m.wall / per_input:.2f}",
            f"{m.wall / job:.2f}",
            f"{m.pods}",
            f"{m.writes / n:.2f}",
            f"{m.idle_slot_seconds:.0f}",
            f"{m.first_result:.1f} / {e.first_result:.1f}",
            f"{m.p95_lag:.1f} / {e.p95_lag:.1f}",
            f"{probe:.1f}",
        ]


def table(workload: Workload, chosen: Sequence[Design], node: Node = NODE) -> list[Row]:
    return [
        Row(
            workload,
            d,
            simulate(workload, d, node),
            simulate(workload, d, node, mid_unit_progress=False),
        )
        for d in chosen
    ]


def table_text(rows: list[Row]) -> str:
    walls = {r.design.name: r.mid.wall for r in rows}
    per_input, job = walls["pod-per-input"], walls["plain-job"]
    return markdown(HEADER, (r.cells(per_input, job) for r in rows))


def crash_inputs(n: int, share: float, seed: int) -> list[int]:
    """Inputs whose first attempt kills its unit halfway (an OOM, a segfault)."""
    rng = random.Random(seed)
    return sorted(rng.sample(range(n), max(1, round(n * share))))


CRASH_HEADER = [
    "design",
    "wall s (mid / end)",
    "charged",
    "finished inputs lost (mid / end)",
    "inputs run (mid / end)",
]


def crash_text(workload: Workload, chosen: Sequence[Design], seed: int, node: Node = NODE) -> str:
    """Each design with 2% of inputs killing their unit once (retries 1)."""
    crashes = crash_inputs(len(workload.durations), 0.02, seed)
    rows = []
    for d in chosen:
        mid = simulate(workload, d, node, crash_inputs=crashes)
        end = simulate(workload, d, node, crash_inputs=crashes, mid_unit_progress=False)
        rows.append(
            [
                d.name,
                f"{mid.wall:.1f} / {end.wall:.1f}",
                f"{mid.charged}",
                f"{mid.rerun} / {end.rerun}",
                f"{mid.executions} / {end.executions}",
            ]
        )
    return markdown(CRASH_HEADER, rows)


def target_text(chosen: Sequence[Workload], targets: Sequence[float]) -> str:
    """The sized design's wall time and Pods for each target_unit_seconds."""
    header = ["workload", *(f"target {t:g} s: wall s (Pods)" for t in targets)]
    rows = []
    for w in chosen:
        cells = [f"({w.key})"]
        for t in targets:
            o = simulate(w, Design("sized", target_seconds=t))
            cells.append(f"{o.wall:.1f} ({o.pods})")
        rows.append(cells)
    return markdown(header, rows)


OTHER_NODES = {
    "this node": NODE,
    "starts in turn (2 at a time)": replace(NODE, start_slots=2),
    "8 cores": replace(NODE, cores=8.0),
    "8 cores, Pods start in 3 s": replace(NODE, cores=8.0, start_wall_seconds=2.5),
}


def nodes_text(chosen: Sequence[Workload], names: Sequence[str]) -> str:
    """Wall times of a few designs on other nodes: does the verdict hold?"""
    by_name = {d.name: d for d in designs()}
    header = ["node", "workload", *names]
    rows = []
    for label, node in OTHER_NODES.items():
        for w in chosen:
            walls = [f"{simulate(w, by_name[n], node).wall:.1f}" for n in names]
            rows.append([label, f"({w.key})", *walls])
    return markdown(header, rows)


CANDIDATE_RULES = {
    "the defaults": DEFAULT_RULES,
    "no pacing": replace(DEFAULT_RULES, start_at_once=None),
    "start 4 at once": replace(DEFAULT_RULES, start_at_once=4),
    "first_unit 4": replace(DEFAULT_RULES, first_unit=4),
    "min_unit_seconds 5": replace(DEFAULT_RULES, min_unit_seconds=5.0),
    "min_unit_seconds 0": replace(DEFAULT_RULES, min_unit_seconds=0.0),
    "SMALL_NODE_RULES": SMALL_NODE_RULES,
}


def settings_text(chosen: Sequence[Workload]) -> str:
    """Each candidate's wall time over the best fixed chunk size of the same workload and
    node, for every workload on every node of OTHER_NODES: the mean, the worst, and the
    mean on this node alone."""
    fixed = [d for d in designs() if d.name.startswith(("fixed-", "pod-per-input"))]
    best = {
        (label, w.key): min(simulate(w, d, node).wall for d in fixed)
        for label, node in OTHER_NODES.items()
        for w in chosen
    }
    rows = []
    for name, rules in CANDIDATE_RULES.items():
        design = Design(name, rules=rules)
        ratios = {
            (label, w.key): simulate(w, design, node).wall / best[(label, w.key)]
            for label, node in OTHER_NODES.items()
            for w in chosen
        }
        here = [r for (label, _), r in ratios.items() if label == "this node"]
        worst_at = max(ratios, key=lambda k: ratios[k])
        first = simulate(chosen[0], design).first_result
        rows.append(
            [
                name,
                f"{statistics.fmean(ratios.values()):.2f}",
                f"{ratios[worst_at]:.2f} ({worst_at[1]}, {worst_at[0]})",
                f"{statistics.fmean(here):.2f}",
                f"{first:.1f}",
            ]
        )
    header = [
        "settings",
        "mean × best fixed",
        "worst (where)",
        "mean on this node",
        f"first result s, ({chosen[0].key}) on this node",
    ]
    return markdown(header, rows)


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def plot(results: dict[str, list[Row]], path: Path) -> None:
    """Wall time of each design per workload, against the best fixed chunk size."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    keys = list(results)
    fig, axes = plt.subplots(2, math.ceil(len(keys) / 2), figsize=(18, 9), sharey=True)
    colours = {"job": "#999999", "fixed": "#e6a23c", "sized": "#2f7ed8", "pool": "#67c23a"}
    for ax, key in zip(axes.flat, keys, strict=False):
        rows = results[key]
        names = [r.design.name for r in rows]
        walls = [r.mid.wall for r in rows]
        family = [
            "job"
            if n in ("plain-job", "pod-per-input")
            else "fixed"
            if n.startswith("fixed")
            else "pool"
            if n.startswith("pool")
            else "sized"
            for n in names
        ]
        ax.barh(names, walls, color=[colours[f] for f in family])
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.invert_yaxis()
        title = textwrap.fill(f"({key}) {rows[0].workload.title}", 44)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("wall s (log)")
        for y, w in enumerate(walls):
            ax.text(w, y, f" {w:.0f}", va="center", fontsize=7)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(
        "One function batch on the local cluster's 2-core node (simulated, fit to measurements)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=30, help="workloads' and crashes' seed")
    parser.add_argument("--target", type=float, default=30.0, help="target_unit_seconds")
    parser.add_argument("--only", action="append", help="workload keys (a-h) to run")
    parser.add_argument("--no-files", action="store_true", help="print only; write nothing")
    args = parser.parse_args(argv)
    chosen = designs(args.target)
    by_name = {d.name: d for d in chosen}
    every = workloads(args.seed)
    selected = [w for w in every if not args.only or w.key in args.only]
    sections = ["## The model beside the measurements\n\n" + calibration()]
    results: dict[str, list[Row]] = {}
    for w in selected:
        results[w.key] = rows = table(w, chosen)
        sections.append(f"## ({w.key}) {w.title}\n\n" + table_text(rows))
    crash_names = ("pod-per-input", "fixed-10", "sized", "sized-small-node", "pool-0.5")
    crash_designs = [by_name[n] for n in crash_names]
    for w in selected:
        if w.key in ("a", "d", "g"):
            text = crash_text(w, crash_designs, args.seed)
            sections.append(
                f"## Units that die: ({w.key}), 2% of inputs kill their unit once\n\n{text}"
            )
    compared = [
        "pod-per-input",
        "fixed-10",
        "fixed-20",
        "sized",
        "sized-unpaced",
        "sized-small-node",
        "pool-0.5",
        "pool-2",
    ]
    sections.append(
        "## Other nodes: wall s of some designs\n\n"
        + nodes_text([w for w in selected if w.key in "abdh"], compared)
    )
    sections.append(
        "## Settings over four nodes: wall time / the best fixed chunk size\n\n"
        + settings_text(selected)
    )
    sections.append(
        "## target_unit_seconds, for the sized design\n\n"
        + target_text(selected, (10.0, 30.0, 60.0, 120.0))
    )
    text = "\n\n".join(sections) + "\n"
    print(text)
    if not args.no_files:
        (HERE / "unitsim.md").write_text(PREAMBLE + text)
        plot(results, HERE / "unitsim.png")
        print(f"wrote {HERE / 'unitsim.md'} and {HERE / 'unitsim.png'}")
    return 0


PREAMBLE = """# Work-sized units: the simulation's tables

Written by `python bench/unitsim.py` (do not edit by hand); `bench/UNITS.md` reads them.
Wall time runs from submission to the last result visible to the client. *mid*: each input's
outcome is reported while its unit runs (the operator reads progress every 2 s); *end*: only
when the unit ends. *idle slot-s*: slot-seconds with no unit working while inputs waited.
*probe start*: median create -> start of another namespace's Pod, one every 15 s. A pool
Pod's *end* is the end of the Pod: the first moment its termination message vouches for
anything. Deterministic: the same seed writes the same page.

"""


if __name__ == "__main__":
    sys.exit(main())
