"""The attempt planner: from what is known of one unit's attempt Pods to what happens next.

A *unit* is what one Pod runs: a KineticJob, one input of a KineticBatch,
or a chunk of consecutive inputs. Its attempts are Pods numbered from 1.
`plan_unit` is a pure function of the Pods seen (and tombstones of Pods
seen and then deleted), the attempt the owner has committed to, and the
retry limits; both reconcilers call it, so retries, disruptions and
cancellation mean the same thing for a single job and for every input.

The rules:

* An attempt ends as a **success** (the Pod succeeded), a **failure** (the
  container failed: non-zero exit, OOMKilled, its deadline) which spends
  one of ``retries``, or a **disruption** (the Pod was deleted, evicted or
  lost its node before it ended) which is retried for free up to
  ``max_disruptions`` times.
* A success anywhere wins: the unit succeeded, and any other live attempt
  is stopped.
* Only the newest attempt may run; older live Pods are stopped.
* With ``cancel``, the live attempt is stopped and the unit ends cancelled
  (unless it had already succeeded).
* The committed attempt whose Pod was never seen is created (again: names
  are deterministic, so a create that already happened is a no-op) — unless
  this process created it and the watch has simply not delivered it yet
  (``creating``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from kinetic.model.limits import DEFAULT_MAX_DISRUPTIONS
from kinetic.model.names import fmt_time, parse_time
from kinetic.model.resources import AttemptRecord

from kinetic_operator.observed import PodView

UnitOutcome = Literal["pending", "running", "succeeded", "failed", "cancelled"]
AttemptCause = Literal["first", "retry", "disruption"]
"""Why an attempt is started: the first, after a failure (a retry), after a disruption."""

_DISRUPTION_REASONS = {
    "EvictionByEvictionAPI": "Evicted",
    "PreemptionByScheduler": "Preempted",
    "DeletionByTaintManager": "NodeLost",
    "DeletionByPodGC": "NodeLost",
    "TerminationByKubelet": "Evicted",
}
_DISRUPTED_PHASE_REASONS = {"Evicted", "NodeLost", "Preempting", "Terminated", "Shutdown"}
MAX_TEXT = 4096
# A container that cannot start for a reason of its spec (an image that exists nowhere, a
# name that is not one) ends its attempt as a failure: it would wait forever otherwise.
# Reasons a registry blip may cause are given IMAGE_PULL_GRACE first (the kubelet retries
# a pull after 10 s, 20 s, 40 s...).
START_FAILURES_AT_ONCE = frozenset({"InvalidImageName", "ErrImageNeverPull"})
START_FAILURES_AFTER_GRACE = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError"}
)
IMAGE_PULL_GRACE = 30.0


@dataclass(frozen=True)
class Limits:
    """How many failures (``retries``) and disruptions a unit may absorb."""

    retries: int = 0
    max_disruptions: int = DEFAULT_MAX_DISRUPTIONS


@dataclass(frozen=True)
class UnitPlan:
    """What a unit does next, and how it stands.

    ``attempt`` is the current attempt after this plan (the one ``create``
    names, when set). ``stop`` lists Pods to delete. ``records`` is every
    attempt so far, oldest first; ``last`` is the Pod that ended the unit.
    """

    outcome: UnitOutcome
    attempt: int
    reason: str
    message: str
    records: tuple[AttemptRecord, ...] = ()
    create: int | None = None
    stop: tuple[str, ...] = ()
    failures: int = 0
    disruptions: int = 0
    last: PodView | None = None
    cause: AttemptCause | None = None  # why ``create`` is needed (for metrics)

    @property
    def terminal(self) -> bool:
        return self.outcome in ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class _End:
    outcome: Literal["success", "failure", "disruption"]
    reason: str
    message: str | None
    exit_code: int | None = None


def plan_unit(
    pods: Mapping[int, PodView],
    *,
    reserved: int,
    creating: bool,
    limits: Limits,
    cancel: bool,
    pod_name: Callable[[int], str],
    now: datetime,
    known: Mapping[int, AttemptRecord] | None = None,
) -> UnitPlan:
    """The next step for one unit; see the module docstring for the rules.

    ``pods`` maps attempt number to the last sight of its Pod (``gone`` for
    a tombstone). ``reserved`` is the highest attempt the owner has written
    down (0: none yet). ``known`` are attempt records already written (a
    KineticJob's status), used for attempts whose Pod is no longer there.
    """
    known = known or {}
    current = max(reserved, max(pods, default=0))
    if current == 0:
        if cancel:
            return UnitPlan("cancelled", 0, "Cancelled", "Cancelled before it started.")
        return UnitPlan(
            "pending",
            1,
            "Starting",
            "Attempt 1 is starting.",
            create=1,
            records=(_pending(1, pod_name),),
            cause="first",
        )

    records: list[AttemptRecord] = []
    ends: dict[int, _End] = {}
    for k in range(1, current + 1):
        end = _ended(pods.get(k), known.get(k), is_current=k == current, now=now)
        if end is not None:
            ends[k] = end
        records.append(_record(k, pods.get(k), end, known.get(k), pod_name, now))
    failures = sum(1 for e in ends.values() if e.outcome == "failure")
    disruptions = sum(1 for e in ends.values() if e.outcome == "disruption")
    live = {k: p for k, p in pods.items() if p.live}

    def plan(outcome: UnitOutcome, reason: str, message: str, **kw: object) -> UnitPlan:
        return UnitPlan(
            outcome,
            kw.pop("attempt", current),  # type: ignore[arg-type]
            reason,
            message,
            records=tuple(records),
            failures=failures,
            disruptions=disruptions,
            **kw,  # type: ignore[arg-type]
        )

    won = next((k for k, e in ends.items() if e.outcome == "success"), None)
    if won is not None:
        stray = tuple(p.name for k, p in sorted(live.items()) if k != won)
        return plan(
            "succeeded", "Succeeded", f"Succeeded on attempt {won}.", stop=stray, last=pods.get(won)
        )

    strays = tuple(p.name for k, p in sorted(live.items()) if k != current)
    end = ends.get(current)
    pod = pods.get(current)
    if cancel:
        stop = strays + ((pod.name,) if pod is not None and pod.live else ())
        if end is not None and end.outcome == "failure" and failures > limits.retries:
            pass  # it had already failed for good: that stands
        else:
            records[-1] = _cancelled(records[-1], now)
            return plan(
                "cancelled",
                "Cancelled",
                f"Cancelled during attempt {current}.",
                stop=stop,
                last=pod,
            )
    if end is None:
        if pod is None or pod.gone:
            if creating:
                return plan(
                    "pending", "Creating", f"Attempt {current} is being created.", stop=strays
                )
            return plan(
                "pending",
                "Starting",
                f"Attempt {current} is starting.",
                create=current,
                stop=strays,
                cause="first" if current == 1 else None,  # else: the cause was not kept
            )
        if pod.phase == "Running":
            return plan(
                "running",
                "Running",
                f"Attempt {current} is running in pod {pod.name}.",
                stop=strays,
            )
        return plan("pending", "Starting", _waiting_message(current, pod), stop=strays)

    what = _describe(end)
    if end.outcome == "failure":
        if failures > limits.retries:
            used = f"after {limits.retries} retries" if limits.retries else "with no retries"
            return plan(
                "failed",
                end.reason,
                f"Failed on attempt {current} {used}: {what}.",
                stop=strays + ((pod.name,) if pod is not None and pod.live else ()),
                last=pod,
            )
        why = f"Attempt {current} failed ({what}); retry {failures} of {limits.retries}"
    else:
        if disruptions > limits.max_disruptions:
            return plan(
                "failed",
                "TooManyDisruptions",
                f"Failed on attempt {current}: disrupted {disruptions} times (the operator "
                f"allows {limits.max_disruptions}); last: {what}.",
                stop=strays,
                last=pod,
            )
        why = f"Attempt {current} was disrupted ({what}); retried without using a retry"
    nxt = current + 1
    records.append(_pending(nxt, pod_name))
    return plan(
        "pending",
        "Retrying",
        f"{why}; attempt {nxt} is starting.",
        attempt=nxt,
        create=nxt,
        stop=strays + ((pod.name,) if pod is not None and pod.live else ()),
        last=pod,
        cause="retry" if end.outcome == "failure" else "disruption",
    )


def _ended(
    pod: PodView | None, known: AttemptRecord | None, *, is_current: bool, now: datetime
) -> _End | None:
    """How an attempt ended, or None while it is still on its way (or not created yet)."""
    if known is not None and known.outcome in ("success", "failure") and (pod is None or pod.gone):
        return _End(known.outcome, known.reason or "Unknown", known.message, known.exit_code)
    if pod is None:
        if known is not None and known.outcome == "disruption":
            return _End("disruption", known.reason or "Unknown", known.message, known.exit_code)
        if is_current:
            return None
        return _End("disruption", "PodLost", "its Pod was deleted before it was seen to end")
    if pod.phase == "Succeeded":
        return _End("success", "Completed", pod.termination_message, pod.exit_code)
    disrupted = _disruption(pod)
    if pod.phase == "Failed":
        if pod.reason == "DeadlineExceeded":
            return _End("failure", "DeadlineExceeded", "exceeded its deadline", pod.exit_code)
        if disrupted == "PodDeleted" and _ended_before_deletion(pod):
            disrupted = None  # it had failed on its own; the deletion came later
        if disrupted is not None:
            return _End("disruption", disrupted, pod.message or f"pod {pod.name}: {disrupted}")
        return _End(
            "failure",
            pod.terminated_reason or pod.reason or "Error",
            pod.termination_message or pod.message,
            pod.exit_code,
        )
    if pod.gone or disrupted is not None:
        reason = disrupted or "PodDeleted"
        return _End("disruption", reason, pod.message or f"pod {pod.name} was deleted")
    return _cannot_start(pod, now)


def _cannot_start(pod: PodView, now: datetime) -> _End | None:
    """A Pod whose container cannot be started: its image or its configuration is wrong."""
    reason = pod.waiting_reason
    if reason is None or pod.phase != "Pending":
        return None
    since = pod.start_time or pod.created
    waited = (now - parse_time(since)).total_seconds() if since else 0.0
    if reason in START_FAILURES_AT_ONCE or (
        reason in START_FAILURES_AFTER_GRACE and waited >= IMAGE_PULL_GRACE
    ):
        return _End(
            "failure", reason, pod.waiting_message or f"its container could not start ({reason})"
        )
    return None


def _ended_before_deletion(pod: PodView) -> bool:
    """A failed Pod deleted afterwards (by hand, or by cleanup) failed on its own.

    Times are to the second: a container killed by the deletion ends in the
    same second or later, so only a strictly earlier end is taken as its own.
    A tombstone with no deletion time was last seen failed before it went.
    """
    if pod.deleted_at is None:
        return pod.gone
    if pod.finished_at is None:
        return False
    return parse_time(pod.finished_at) < parse_time(pod.deleted_at)


def _disruption(pod: PodView) -> str | None:
    if pod.reason in _DISRUPTED_PHASE_REASONS:
        return "Evicted" if pod.reason in ("Terminated", "Shutdown") else pod.reason
    if pod.disruption is not None:
        return _DISRUPTION_REASONS.get(pod.disruption, pod.disruption)
    if pod.deleting or pod.gone:
        return "PodDeleted"
    return None


def _record(
    k: int,
    pod: PodView | None,
    end: _End | None,
    known: AttemptRecord | None,
    pod_name: Callable[[int], str],
    now: datetime,
) -> AttemptRecord:
    if pod is None and known is not None:
        return known
    outcome = (
        end.outcome
        if end is not None
        else ("running" if pod and pod.phase == "Running" else "pending")
    )
    end_time = None
    if end is not None:
        end_time = (pod.finished_at if pod else None) or (known.end_time if known else None)
        end_time = end_time or fmt_time(now)
    return AttemptRecord(
        attempt=k,
        pod=pod.name if pod is not None else pod_name(k),
        outcome=outcome,
        reason=end.reason if end else None,
        exit_code=end.exit_code if end else None,
        message=_clip(end.message) if end else None,
        start_time=pod.start_time if pod else (known.start_time if known else None),
        end_time=end_time,
    )


def _pending(k: int, pod_name: Callable[[int], str]) -> AttemptRecord:
    return AttemptRecord(attempt=k, pod=pod_name(k), outcome="pending")


def _cancelled(rec: AttemptRecord, now: datetime) -> AttemptRecord:
    if rec.outcome in ("success", "failure", "disruption"):
        return rec
    return rec.model_copy(
        update={
            "outcome": "cancelled",
            "reason": "Cancelled",
            "end_time": rec.end_time or fmt_time(now),
        }
    )


def _waiting_message(attempt: int, pod: PodView) -> str:
    if pod.unschedulable:
        return f"Attempt {attempt} cannot be scheduled yet: {pod.unschedulable}"
    if pod.waiting_reason:
        detail = f": {pod.waiting_message}" if pod.waiting_message else ""
        return f"Attempt {attempt} is starting ({pod.waiting_reason}{detail})."
    return f"Attempt {attempt} is starting in pod {pod.name}."


def _describe(end: _End) -> str:
    bits = [end.reason]
    if end.exit_code is not None:
        bits.append(f"exit code {end.exit_code}")
    text = ", ".join(bits)
    lines = (end.message or "").strip().splitlines()
    return f"{text}: {lines[-1].strip()}" if lines else text


def _clip(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
