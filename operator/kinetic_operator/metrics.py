"""Prometheus metrics of the operator, served on the container port named ``metrics``.

What a platform team alerts on: how many jobs and batches are in each
phase, how many inputs were launched, retried, disrupted, and how they
ended, how long reconciles take, which API errors the operator meets, and
how much work waits in its queue. prometheus-client serves them, plus its
own process metrics (resident memory, CPU, open files).

Counts are taken where the fact becomes true, never from a decision alone
(decisions are remade after a write conflict): a Pod counts as launched
when the API server created it, an input as succeeded or failed when the
status that says so was written. Counters start at zero with each operator
process, as Prometheus expects of counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "KIND_BATCH",
    "KIND_JOB",
    "api_error",
    "attempt_created",
    "inputs_ended",
    "phases_collector",
    "reconcile_timer",
    "serve",
    "slot_refilled",
    "watch_queue",
]

KIND_JOB = "KineticJob"
KIND_BATCH = "KineticBatch"

INPUTS_LAUNCHED = Counter(
    "kinetic_inputs_launched_total",
    "Inputs whose first attempt's Pod was created.",
    ["kind"],
)
INPUTS_RETRIED = Counter(
    "kinetic_inputs_retried_total",
    "Attempts started because the previous one failed (each uses a retry).",
    ["kind"],
)
INPUTS_DISRUPTED = Counter(
    "kinetic_inputs_disrupted_total",
    "Attempts started because the previous one's Pod was deleted, evicted or lost "
    "(re-run without using a retry).",
    ["kind"],
)
INPUTS_SUCCEEDED = Counter(
    "kinetic_inputs_succeeded_total", "Inputs recorded as succeeded.", ["kind"]
)
INPUTS_FAILED = Counter(
    "kinetic_inputs_failed_total", "Inputs recorded as failed (retries spent).", ["kind"]
)
RECONCILE_SECONDS = Histogram(
    "kinetic_reconcile_duration_seconds",
    "Time one reconcile of a job or batch took, API calls included.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
API_ERRORS = Counter(
    "kinetic_api_errors_total",
    "Kubernetes API requests of the operator answered with an error, by HTTP code "
    "('none' when no answer came).",
    ["code"],
)
QUEUE_DEPTH = Gauge(
    "kinetic_work_queue_depth",
    "Jobs and batches with a reconcile running, queued or waiting to retry.",
)
SLOT_REFILL_SECONDS = Histogram(
    "kinetic_slot_refill_seconds",
    "From a batch Pod's end (its container's finish time) to the creation of the Pod that "
    "takes its slot: how long a slot a batch could use stays empty.",
    ["kind"],
    buckets=(0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 120),
)
LEADER = Gauge(
    "kinetic_leader",
    "1 while this replica holds the leader Lease and reconciles; 0 while it stands by "
    "(serving admission only).",
)
LEADER_TRANSITIONS = Counter(
    "kinetic_leader_transitions_total",
    "Times this replica became the leader (the Lease's own count is leaseTransitions).",
)

_CAUSE_COUNTERS = {"retry": INPUTS_RETRIED, "disruption": INPUTS_DISRUPTED}


def attempt_created(kind: str, cause: str | None, inputs: int = 1) -> None:
    """A Pod the API server just created: ``inputs`` inputs started for ``cause``."""
    if cause == "first":
        INPUTS_LAUNCHED.labels(kind).inc(inputs)
    elif cause in _CAUSE_COUNTERS:
        _CAUSE_COUNTERS[cause].labels(kind).inc(inputs)


def slot_refilled(kind: str, waited: Iterable[float]) -> None:
    """Pods just created in slots that Pods ended in ``waited`` seconds ago."""
    for seconds in waited:
        SLOT_REFILL_SECONDS.labels(kind).observe(max(0.0, seconds))


def inputs_ended(kind: str, *, succeeded: int = 0, failed: int = 0) -> None:
    """A status write just recorded these many more inputs as ended."""
    if succeeded > 0:
        INPUTS_SUCCEEDED.labels(kind).inc(succeeded)
    if failed > 0:
        INPUTS_FAILED.labels(kind).inc(failed)


def leading(now: bool) -> None:
    """This replica began (True) or stopped (False) leading."""
    if now:
        LEADER_TRANSITIONS.inc()
    LEADER.set(1 if now else 0)


def api_error(code: int | None) -> None:
    """The API server answered ``code`` (>= 400), or did not answer (None)."""
    API_ERRORS.labels("none" if code is None else str(code)).inc()


@contextmanager
def reconcile_timer(kind: str) -> Iterator[None]:
    """Time the block as one reconcile of ``kind``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - start)


def watch_queue(depth: Callable[[], int]) -> None:
    """Report ``depth()`` as the work queue depth at every scrape."""
    QUEUE_DEPTH.set_function(depth)


class _Phases(Collector):
    """``kinetic_objects{kind,phase}``: the jobs and batches the operator holds, by phase."""

    def __init__(self, sources: Mapping[str, Callable[[], Iterable[str]]]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kinetic_objects",
            "KineticJobs and KineticBatches the operator is tracking, by phase.",
            labels=["kind", "phase"],
        )
        for kind, phases in self.sources.items():
            counts: dict[str, int] = {}
            for phase in phases():
                counts[phase] = counts.get(phase, 0) + 1
            for phase, n in sorted(counts.items()):
                family.add_metric([kind, phase], n)
        yield family


_phases: _Phases | None = None


def phases_collector(sources: Mapping[str, Callable[[], Iterable[str]]]) -> None:
    """Register (once per process; later calls replace the sources) the phase gauge."""
    global _phases  # noqa: PLW0603 - one collector per process registry, like the counters
    if _phases is None:
        _phases = _Phases(sources)
        REGISTRY.register(_phases)
    else:
        _phases.sources = sources


def phase_of(body: Mapping[str, Any] | None) -> str | None:
    """The phase a stored object reports (``PENDING`` before its first status)."""
    if body is None:
        return None
    return str(((body.get("status") or {}).get("phase")) or "PENDING")


def serve(port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - a Pod's own port
    """Serve /metrics on ``port`` from a daemon thread."""
    start_http_server(port, addr=addr)
