"""A simulated cluster for whole batches run by repeated `decide_batch` calls.

`World` plays the API server, the kubelets, the watch and the operator's memory,
and applies each decision the way the handler layer must (see
tests/unit/operator/test_batch_simulation.py for the invariants it checks). The
unit-Pod simulation builds on it, so it lives here rather than in either test.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kinetic.model.grid import Grid
from kinetic.model.names import input_pod_name
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import KineticBatchSpec, KineticBatchStatus, Phase
from kinetic_operator.handlers.batches import BatchMemory, _prune, observe_units
from kinetic_operator.logic.batch_logic import (
    CreatePods,
    Event,
    Recorded,
    StopPods,
    WriteManifest,
    compact_status,
    decide_batch,
    unit_inputs,
)
from kinetic_operator.logic.observed import PodView

SHA = "a" * 64
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
BATCH = "g"
KNOWN_EVENTS = {
    "Launching",
    "Adopted",
    "SubmissionFailed",
    "InputsFailed",
    "FailFast",
    "Cancelling",
    "Succeeded",
    "Failed",
    "Cancelled",
}


def make_spec(n: int, **extra: Any) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {"function": {"payloadURI": "gs://b/f.pkl", "sha256": SHA}},
            "inputs": {"count": n, "uriPrefix": "gs://b/inputs"},
            **extra,
        }
    )


def complete(recorded: Recorded) -> dict[int, str]:
    """Input -> outcome, from a complete record."""
    out = dict.fromkeys(recorded.succeeded, "succeeded")
    out |= dict.fromkeys(recorded.failed, "failed")
    out |= dict.fromkeys(recorded.cancelled, "cancelled")
    return out


def outcomes(status: KineticBatchStatus | None) -> dict[int, str]:
    """Input -> outcome, as recorded in a status."""
    if status is None:
        return {}
    out: dict[int, str] = {}
    for name in ("succeeded", "failed", "cancelled"):
        for i in IndexSet.parse(getattr(status, f"{name}_indexes")):
            assert i not in out, f"input {i} recorded twice: {status}"
            out[i] = name
    return out


@dataclass
class SimPod:
    """A Pod as the API server holds it."""

    name: str
    unit: int
    attempt: int
    inputs: tuple[int, ...]
    phase: str = "Pending"
    reason: str | None = None
    exit_code: int | None = None
    message: str | None = None

    @property
    def live(self) -> bool:
        return self.phase in ("Pending", "Running")

    def view(self) -> PodView:
        terminated = {"Succeeded": "Completed", "Failed": "Error"}.get(self.phase)
        return PodView(
            name=self.name,
            attempt=self.attempt,
            index=self.unit,
            chunk=len(self.inputs),
            phase=self.phase,
            reason=self.reason,
            exit_code=self.exit_code,
            terminated_reason=terminated if self.reason is None else None,
            termination_message=self.message,
        )


@dataclass(repr=False)
class World:
    spec: KineticBatchSpec
    rng: random.Random
    doomed: set[int] = field(default_factory=set)  # every attempt fails
    flaky: set[int] = field(default_factory=set)  # an attempt fails half the time
    max_disruptions: int = 2
    lag: float = 0.5  # chance that a pending watch event is not delivered yet
    cap: int | None = None  # cut the status's ranges at this many characters, as the handler
    # the API server
    status: KineticBatchStatus | None = None
    rv: int = 0
    pods: dict[str, SimPod] = field(default_factory=dict)
    # the watch: what the operator's index holds, and events not delivered yet
    index: dict[str, PodView] = field(default_factory=dict)
    undelivered: set[str] = field(default_factory=set)
    final: dict[str, PodView] = field(default_factory=dict)  # last state of deleted Pods
    # storage: the outcomes the manifest holds (written on WriteManifest, debounced)
    manifest: Recorded = field(default_factory=Recorded)
    # the operator's memory
    mem: BatchMemory = field(default_factory=BatchMemory)
    extra: Recorded | None = None  # every outcome, when the status's ranges may be cut
    last: Recorded = field(default_factory=Recorded)  # the latest complete record
    snapshots: list[tuple[int, KineticBatchStatus | None]] = field(default_factory=list)
    clock: datetime = T0
    # what happened, for the invariants
    recorded: dict[int, str] = field(default_factory=dict)
    created: Counter = field(default_factory=Counter)
    disrupted: Counter = field(default_factory=Counter)
    succeeded_for_real: set[int] = field(default_factory=set)
    failed_for_real: set[int] = field(default_factory=set)
    events: list[Event] = field(default_factory=list)
    conflicts: int = 0
    crashes: int = 0
    peak_live: int = 0
    ended_before_cancel: bool = False

    def __post_init__(self) -> None:
        self.total = self.spec.inputs.count or 0
        self.chunk = self.spec.chunk_size

    def __repr__(self) -> str:  # short: pytest prints it on every failure
        s = self.status
        return (
            f"World(total={self.total}, chunk={self.chunk}, max={self.spec.max_concurrent}, "
            f"retries={self.spec.retries}, phase={s.phase if s else None}, "
            f"live={sorted(p.name for p in self.live())}, crashes={self.crashes})"
        )

    # ------------------------------------------------------------------ the operator

    def reconcile(self, mode: str = "normal", max_launches: int | None = None) -> str:
        """One reconcile: decide, write the status conditionally, then act."""
        if mode == "stale" and self.snapshots:
            rv, status = self.rng.choice(self.snapshots)
        else:
            rv, status = self.rv, self.status
        self.clock += timedelta(seconds=1)
        d = decide_batch(
            self.spec,
            status,
            observe_units(list(self.index.values()), self.mem),
            self.clock,
            batch=BATCH,
            max_launches=max_launches,
            max_disruptions=self.max_disruptions,
            extra=self.extra,
        )
        new = d.status if self.cap is None else compact_status(d.status, self.cap)
        changed = status is None or new.wire() != status.wire()
        if d.write_status or changed:
            if rv != self.rv:  # the conditional PATCH answers 409: nothing below happens
                self.conflicts += 1
                return "conflict"
            if new.truncated and d.recorded.terminal - self.manifest.terminal:
                self.manifest = d.recorded  # as the handler: outcomes stored before cut
            self._write(new, d.recorded)
        elif rv != self.rv and (d.creates or d.stops):
            self.conflicts += 1  # acting on a cached copy: the handler reads afresh first
            return "conflict"
        self.mem.outcomes.recorded = d.recorded
        if self.cap is not None:
            self.extra = d.recorded  # the complete outcomes stay in memory
        if mode == "crash":  # died after the status write: actions and memory lost
            self.restart()
            return "crash"
        for action in d.actions:
            if isinstance(action, CreatePods):
                for unit, attempt in action.units:
                    self._create(unit, attempt)
            elif isinstance(action, StopPods):
                for name in action.pods:
                    self._delete(name)
            elif isinstance(action, WriteManifest):
                assert self.status is not None
                if action.urgent or action.blocking or self.rng.random() < 0.5:  # debounced
                    self.manifest = d.recorded
                if self.status.manifest_uri is None:
                    done = self.status.model_copy(update={"manifest_uri": "gs://b/m"})
                    self._write(done, d.recorded)
            elif isinstance(action, Event):
                self.events.append(action)
        _prune(self.mem, Grid.fixed(self.chunk), self.total)
        return "ok"

    def restart(self) -> None:
        """A new operator process: empty memory; Kopf lists every Pod before it reconciles."""
        self.crashes += 1
        self.mem = BatchMemory()
        truncated = self.status is not None and self.status.truncated
        self.extra = self.manifest if truncated else None  # what the handler loads
        self.index = {name: pod.view() for name, pod in self.pods.items()}
        self.undelivered.clear()
        self.final.clear()

    def _write(self, new: KineticBatchStatus, recorded: Recorded) -> None:
        now = complete(recorded)
        assert set(outcomes(new).items()) <= set(now.items()), "the status says otherwise"
        for i, outcome in self.recorded.items():
            assert now.get(i) == outcome, f"input {i} was recorded {outcome}, now {now.get(i)}"
        for i, outcome in now.items():
            self.recorded.setdefault(i, outcome)
        if self.status is not None:
            self._check_no_reserve_after_stop(self.status, new, recorded)
        self.last = recorded
        self.snapshots = [*self.snapshots[-4:], (self.rv, self.status)]
        self.status = new
        self.rv += 1

    def _check_no_reserve_after_stop(
        self, old: KineticBatchStatus, new: KineticBatchStatus, recorded: Recorded
    ) -> None:
        stopped = self.spec.cancel or (self.spec.fail_fast and bool(old.failed_indexes))
        if stopped:
            before, after = IndexSet.parse(old.active_indexes), IndexSet.parse(new.active_indexes)
            if (new.truncated or old.truncated) and self.last is not None:  # complete sets
                before, after = before | self.last.active, recorded.active
            grown = after - before
            assert not grown, f"inputs {grown} reserved after the batch stopped launching"

    def _create(self, unit: int, attempt: int) -> None:
        self.mem.pods.creating[unit] = attempt  # as the handler does before it calls the API
        name = input_pod_name(BATCH, unit, attempt)
        self.mem.pods.creating_names[unit] = name  # ... and after it, the name it got
        if name in self.pods:
            return  # AlreadyExists
        assert self.status is not None
        inputs = tuple(unit_inputs(unit, self.chunk, self.total))
        reserved = IndexSet.parse(self.status.active_indexes)
        if self.status.truncated and self.extra is not None:
            reserved = reserved | self.extra.active  # the part the cut status leaves out
        assert reserved & IndexSet(inputs), f"Pod {name} created for a unit not reserved"
        self.pods[name] = SimPod(name, unit, attempt, inputs)
        self.created[unit] += 1
        self.undelivered.add(name)

    def _delete(self, name: str) -> None:
        pod = self.pods.pop(name, None)
        if pod is not None:
            self.final[name] = pod.view()
            self.undelivered.add(name)

    # ------------------------------------------------------------------ the cluster

    def deliver(self, everything: bool = False) -> None:
        """The watch delivers pending events (some of them, when it lags)."""
        for name in sorted(self.undelivered):
            if not everything and self.rng.random() < self.lag:
                continue
            self.undelivered.discard(name)
            if name in self.pods:
                view = self.pods[name].view()
                self.index[name] = view
            else:
                view = self.final.pop(name)
                self.index.pop(name, None)
                gone = self.mem.pods.gone.setdefault(view.index, {})  # type: ignore[arg-type]
                gone[view.attempt] = replace(view, gone=True)
            if self.mem.pods.creating.get(view.index) == view.attempt:  # type: ignore[arg-type]
                del self.mem.pods.creating[view.index]  # type: ignore[arg-type]
                self.mem.pods.creating_names.pop(view.index, None)  # type: ignore[arg-type]

    def live(self) -> list[SimPod]:
        return [p for p in self.pods.values() if p.live]

    def advance(self) -> None:
        """A kubelet moves one live Pod along: Pending -> Running -> an ending."""
        live = self.live()
        if not live:
            return
        pod = self.rng.choice(live)
        if pod.phase == "Pending":
            pod.phase = "Running"
        else:
            self._finish(pod)
        self.undelivered.add(pod.name)

    def _finish(self, pod: SimPod) -> None:
        ok, bad = [], []
        for i in pod.inputs:
            # a chunk's runner skips an input whose result is already recorded
            good = i in self.succeeded_for_real or (
                i not in self.doomed and (i not in self.flaky or self.rng.random() < 0.5)
            )
            (ok if good else bad).append(i)
        self.succeeded_for_real.update(ok)
        self.failed_for_real.update(bad)
        if len(pod.inputs) > 1:
            pod.message = json.dumps({"succeeded": str(IndexSet(ok)), "failed": str(IndexSet(bad))})
        else:
            pod.message = f"out-{pod.inputs[0]}" if ok else "Traceback: ValueError: boom"
        pod.phase, pod.exit_code = ("Succeeded", 0) if not bad else ("Failed", 1)

    def disrupt(self) -> None:
        """Someone deletes a running Pod by hand, or the node evicts it."""
        live = self.live()
        if not live:
            return
        pod = self.rng.choice(live)
        self.disrupted[pod.unit] += 1
        if self.rng.random() < 0.5:
            self._delete(pod.name)
        else:
            pod.phase, pod.reason = "Failed", "Evicted"
            self.undelivered.add(pod.name)

    def expire(self) -> None:
        """Finished Pods past their TTL go, once the manifest records every input of theirs."""
        done = complete(self.manifest)
        for pod in list(self.pods.values()):
            if not pod.live and all(i in done for i in pod.inputs) and self.rng.random() < 0.5:
                self._delete(pod.name)

    def cancel_one(self) -> None:
        if not self.total:
            return
        i = self.rng.randrange(self.total)
        asked = IndexSet.parse(self.spec.cancel_indexes) | IndexSet([i])
        self.spec = self.spec.model_copy(update={"cancel_indexes": str(asked)})

    # ------------------------------------------------------------------ invariants

    def check_live(self) -> None:
        """Never more live Pods than maxConcurrent, never two live Pods for one unit."""
        live = self.live()
        self.peak_live = max(self.peak_live, len(live))
        limit = self.spec.max_concurrent
        if limit is not None:
            assert len(live) <= limit, f"{len(live)} live Pods, maxConcurrent {limit}"
        per_unit = Counter(p.unit for p in live)
        assert all(n == 1 for n in per_unit.values()), f"two live Pods for one unit: {per_unit}"

    def check(self) -> None:
        self.check_live()
        for unit, n in self.created.items():
            bound = self.spec.retries + self.disrupted[unit] + 1
            assert n <= bound, f"unit {unit} ran {n} attempts; at most {bound} allowed"
        s = self.status
        if s is not None:
            active = IndexSet.parse(s.active_indexes)
            assert not (active & IndexSet(outcomes(s))), s
            c = s.counts
            assert c.pending + c.running + c.succeeded + c.failed + c.cancelled == s.total

    def finished(self) -> bool:
        return (
            self.status is not None
            and Phase(self.status.phase).terminal
            and not self.live()
            and not self.undelivered
        )

    def run(self, *, chaos: float = 1.0, limit: int = 6000, cancel_rate: float = 0.0) -> None:
        for _ in range(limit):
            r = self.rng.random()
            if r < 0.03 * chaos:
                self.reconcile("crash")
            elif r < 0.07 * chaos:
                self.reconcile("stale")
            elif r < 0.10 * chaos:
                self.disrupt()
            elif r < 0.14 * chaos:
                self.expire()
            elif r < 0.14 * chaos + cancel_rate:
                self.cancel_one()
            elif r < 0.45:
                self.advance()
            elif r < 0.65:
                self.deliver(everything=self.rng.random() < 0.2)
            else:
                self.reconcile(max_launches=self.rng.choice([None, None, 2]))
            self.check()
            if self.finished():
                self.final_checks()
                return
        raise AssertionError(f"the batch did not end: {self.status}")

    def final_checks(self) -> None:
        s = self.status
        assert s is not None
        got = complete(self.last)
        assert set(got) == set(range(self.total)), "an input never ended"
        assert s.active_indexes == ""
        spec = self.spec
        asked = IndexSet.parse(spec.cancel_indexes)
        fail_fast = spec.fail_fast and bool(self.last.failed)
        for i, outcome in got.items():
            unit = i - i % self.chunk
            if outcome == "succeeded":
                assert i in self.succeeded_for_real, f"input {i} recorded succeeded, never did"
            elif outcome == "failed":
                too_many = self.disrupted[unit] > self.max_disruptions
                assert i in self.failed_for_real or too_many, f"input {i} failed, never did"
            else:
                assert i in asked or spec.cancel or fail_fast, f"input {i} cancelled unasked"
        if spec.cancel and not self.ended_before_cancel:
            assert s.phase == Phase.CANCELLED  # what the user asked for, whatever else ended
        elif self.last.failed:
            assert s.phase == Phase.FAILED
        elif self.last.cancelled:
            assert s.phase == Phase.CANCELLED
        else:
            assert s.phase == Phase.SUCCEEDED
        reasons = Counter(e.reason for e in self.events)
        assert set(reasons) <= KNOWN_EVENTS, reasons
        assert reasons["Succeeded"] + reasons["Failed"] + reasons["Cancelled"] <= 1, reasons
        assert reasons["Launching"] <= 1 and reasons["InputsFailed"] <= len(self.last.failed)


def world(seed: int, **extra: Any) -> World:
    rng = random.Random(seed)
    n = extra.pop("n", rng.randrange(0, 30))
    doomed = {i for i in range(n) if rng.random() < 0.08}
    flaky = {i for i in range(n) if rng.random() < 0.2} - doomed
    spec = make_spec(n, **extra)
    return World(spec=spec, rng=rng, doomed=doomed, flaky=flaky)
