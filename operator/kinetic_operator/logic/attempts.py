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
from kinetic.model.resources import AttemptKind, AttemptRecord, MemberRecord

from kinetic_operator.logic.observed import PodView

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
    # Seconds a Pod may wait for a node before its attempt fails as Unschedulable (None: no
    # bound). Without one, a request no node can ever meet stays Pending for good.
    unschedulable_seconds: float | None = None


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
class End:
    """How one attempt (or one gang member's Pod) ended."""

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
    current = max(reserved, max(pods, default=0))
    if current == 0:
        return _before_any_attempt(cancel, pod_name)
    seen = _see(pods, known or {}, current, pod_name, now, limits)
    decided = _success_wins(seen) or _cancelled_unit(seen, cancel, limits, now)
    if decided is not None:
        return decided
    end = seen.end
    if end is None:
        return _on_its_way(seen, creating)
    if end.outcome == "failure":
        return _after_failure(seen, end, limits, pod_name)
    return _after_disruption(seen, end, limits, pod_name)


@dataclass(frozen=True)
class _Seen:
    """Every attempt of a unit as seen now: what each rule of `plan_unit` reads."""

    pods: Mapping[int, PodView]
    current: int
    records: tuple[AttemptRecord, ...]
    ends: Mapping[int, End]

    @property
    def pod(self) -> PodView | None:
        return self.pods.get(self.current)

    @property
    def end(self) -> End | None:
        return self.ends.get(self.current)

    @property
    def failures(self) -> int:
        return sum(1 for e in self.ends.values() if e.outcome == "failure")

    @property
    def disruptions(self) -> int:
        return sum(1 for e in self.ends.values() if e.outcome == "disruption")

    def live_except(self, attempt: int | None) -> tuple[str, ...]:
        """The live Pods of every attempt but ``attempt``, oldest first."""
        return tuple(p.name for k, p in sorted(self.pods.items()) if p.live and k != attempt)

    @property
    def strays(self) -> tuple[str, ...]:
        """Live Pods of older attempts: only the newest attempt may run."""
        return self.live_except(self.current)

    @property
    def all_live(self) -> tuple[str, ...]:
        """The strays, then the current attempt's Pod if it is live."""
        pod = self.pod
        return self.strays + ((pod.name,) if pod is not None and pod.live else ())

    def plan(
        self,
        outcome: UnitOutcome,
        reason: str,
        message: str,
        *,
        attempt: int | None = None,
        records: tuple[AttemptRecord, ...] | None = None,
        create: int | None = None,
        stop: tuple[str, ...] = (),
        last: PodView | None = None,
        cause: AttemptCause | None = None,
    ) -> UnitPlan:
        """A plan with these attempts' records and counts (``attempt``: the current one)."""
        return UnitPlan(
            outcome,
            self.current if attempt is None else attempt,
            reason,
            message,
            records=self.records if records is None else records,
            create=create,
            stop=stop,
            failures=self.failures,
            disruptions=self.disruptions,
            last=last,
            cause=cause,
        )


def _before_any_attempt(cancel: bool, pod_name: Callable[[int], str]) -> UnitPlan:
    """No attempt reserved yet: attempt 1 starts, unless the unit is cancelled first."""
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


def _see(
    pods: Mapping[int, PodView],
    known: Mapping[int, AttemptRecord],
    current: int,
    pod_name: Callable[[int], str],
    now: datetime,
    limits: Limits,
) -> _Seen:
    """How each attempt up to ``current`` ended (if it did), and its record."""
    records: list[AttemptRecord] = []
    ends: dict[int, End] = {}
    for k in range(1, current + 1):
        end = _ended(pods.get(k), known.get(k), is_current=k == current, now=now, limits=limits)
        if end is not None:
            ends[k] = end
        records.append(_record(k, pods.get(k), end, known.get(k), pod_name, now))
    return _Seen(pods, current, tuple(records), ends)


def _success_wins(seen: _Seen) -> UnitPlan | None:
    """A success anywhere: the unit succeeded, and any other live attempt is stopped."""
    won = next((k for k, e in seen.ends.items() if e.outcome == "success"), None)
    if won is None:
        return None
    return seen.plan(
        "succeeded",
        "Succeeded",
        f"Succeeded on attempt {won}.",
        stop=seen.live_except(won),
        last=seen.pods.get(won),
    )


def _cancelled_unit(seen: _Seen, cancel: bool, limits: Limits, now: datetime) -> UnitPlan | None:
    """With ``cancel``, the live attempt is stopped and the unit ends cancelled.

    A unit that had already failed for good is not cancelled: that failure stands.
    """
    if not cancel or _failed_for_good(seen, seen.end, limits):
        return None
    records = (*seen.records[:-1], _cancelled(seen.records[-1], now))
    return seen.plan(
        "cancelled",
        "Cancelled",
        f"Cancelled during attempt {seen.current}.",
        records=records,
        stop=seen.all_live,
        last=seen.pod,
    )


def _failed_for_good(seen: _Seen, end: End | None, limits: Limits) -> bool:
    """The current attempt failed, and the failures have spent every retry."""
    return end is not None and end.outcome == "failure" and seen.failures > limits.retries


def _on_its_way(seen: _Seen, creating: bool) -> UnitPlan:
    """The current attempt has not ended: it is being created, starting or running."""
    pod = seen.pod
    if pod is None or pod.gone:
        return _to_create(seen, creating)
    if pod.phase == "Running":
        message = f"Attempt {seen.current} is running in pod {pod.name}."
        return seen.plan("running", "Running", message, stop=seen.strays)
    return seen.plan("pending", "Starting", _waiting_message(seen.current, pod), stop=seen.strays)


def _to_create(seen: _Seen, creating: bool) -> UnitPlan:
    """The committed attempt's Pod was never seen: create it, unless this process just did.

    Names are deterministic, so a create that already happened is a no-op.
    """
    current = seen.current
    if creating:
        message = f"Attempt {current} is being created."
        return seen.plan("pending", "Creating", message, stop=seen.strays)
    return seen.plan(
        "pending",
        "Starting",
        f"Attempt {current} is starting.",
        create=current,
        stop=seen.strays,
        cause="first" if current == 1 else None,  # else: the cause was not kept
    )


def _after_failure(
    seen: _Seen, end: End, limits: Limits, pod_name: Callable[[int], str]
) -> UnitPlan:
    """A failure spends a retry; with none left the unit fails."""
    current, what = seen.current, _describe(end)
    if _failed_for_good(seen, end, limits):
        used = f"after {limits.retries} retries" if limits.retries else "with no retries"
        return seen.plan(
            "failed",
            end.reason,
            f"Failed on attempt {current} {used}: {what}.",
            stop=seen.all_live,
            last=seen.pod,
        )
    why = f"Attempt {current} failed ({what}); retry {seen.failures} of {limits.retries}"
    return _retry(seen, why, "retry", pod_name, limits)


def _after_disruption(
    seen: _Seen, end: End, limits: Limits, pod_name: Callable[[int], str]
) -> UnitPlan:
    """A disruption is retried for free, up to ``max_disruptions`` times."""
    why = f"Attempt {seen.current} was disrupted ({_describe(end)}); retried without using a retry"
    return _retry(seen, why, "disruption", pod_name, limits)


def _too_many_disruptions(seen: _Seen, limits: Limits) -> UnitPlan | None:
    """Past ``max_disruptions`` the unit fails, whatever ended its last attempt: the bound
    holds on every path that would start another attempt."""
    if seen.disruptions <= limits.max_disruptions:
        return None
    last = next(
        (e for k, e in sorted(seen.ends.items(), reverse=True) if e.outcome == "disruption")
    )
    return seen.plan(
        "failed",
        "TooManyDisruptions",
        f"Failed on attempt {seen.current}: disrupted {seen.disruptions} times (the operator "
        f"allows {limits.max_disruptions}); last: {_describe(last)}.",
        stop=seen.all_live,
        last=seen.pod,
    )


def _retry(
    seen: _Seen,
    why: str,
    cause: AttemptCause,
    pod_name: Callable[[int], str],
    limits: Limits,
) -> UnitPlan:
    """The next attempt starts, and the ended one's Pod is stopped if still live."""
    too_many = _too_many_disruptions(seen, limits)
    if too_many is not None:
        return too_many
    nxt = seen.current + 1
    return seen.plan(
        "pending",
        "Retrying",
        f"{why}; attempt {nxt} is starting.",
        attempt=nxt,
        records=(*seen.records, _pending(nxt, pod_name)),
        create=nxt,
        stop=seen.all_live,
        last=seen.pod,
        cause=cause,
    )


def _ended(
    pod: PodView | None,
    known: AttemptRecord | None,
    *,
    is_current: bool,
    now: datetime,
    limits: Limits = Limits(),
) -> End | None:
    """How an attempt ended, or None while it is still on its way (or not created yet)."""
    recorded = _recorded_end(known)
    if recorded is not None:
        return recorded
    if pod is None:
        return _unseen_end(known, is_current=is_current)
    return pod_end(pod, now, limits.unschedulable_seconds)


ENDED = ("success", "failure", "disruption")


def _recorded_end(known: AttemptRecord | None) -> End | None:
    """An end already recorded stands, whatever its Pod shows later.

    Once an attempt is judged (a container that could not start, a failure,
    a disruption), the operator stops its Pod; that Pod then reads as deleted,
    and judging it again would turn the failure into a free disruption, so a
    unit could retry for ever. The record is the verdict.
    """
    if known is None:
        return None
    outcome = known.outcome
    if outcome == "success" or outcome == "failure" or outcome == "disruption":
        return End(outcome, known.reason or "Unknown", known.message, known.exit_code)
    return None


def _unseen_end(known: AttemptRecord | None, *, is_current: bool) -> End | None:
    """An attempt with no Pod seen: a disruption its record tells of, else a lost Pod
    (unless it is the current attempt, whose Pod may be on its way)."""
    if known is not None and known.outcome == "disruption":
        return End("disruption", known.reason or "Unknown", known.message, known.exit_code)
    if is_current:
        return None
    return End("disruption", "PodLost", "its Pod was deleted before it was seen to end")


def pod_end(pod: PodView, now: datetime, unschedulable_seconds: float | None = None) -> End | None:
    """How the attempt of a Pod seen ended: it succeeded, failed, was disrupted, its
    container cannot start, or no node would take it in time; None while it is on its way."""
    if pod.phase == "Succeeded":
        return End("success", "Completed", pod.termination_message, pod.exit_code)
    disrupted = _disruption(pod)
    if pod.phase == "Failed":
        return _failed_end(pod, disrupted)
    if pod.gone or disrupted is not None:
        reason = disrupted or "PodDeleted"
        return End("disruption", reason, pod.message or f"pod {pod.name} was deleted")
    return _cannot_start(pod, now) or _unschedulable(pod, now, unschedulable_seconds)


def _failed_end(pod: PodView, disrupted: str | None) -> End:
    """A Failed Pod: its deadline, a disruption that ended it, or its container's failure."""
    if pod.reason == "DeadlineExceeded":
        return End("failure", "DeadlineExceeded", "exceeded its deadline", pod.exit_code)
    if disrupted == "PodDeleted" and _ended_before_deletion(pod):
        disrupted = None  # it had failed on its own; the deletion came later
    if disrupted is not None:
        return End("disruption", disrupted, pod.message or f"pod {pod.name}: {disrupted}")
    return End(
        "failure",
        pod.terminated_reason or pod.reason or "Error",
        pod.termination_message or pod.message,
        pod.exit_code,
    )


def _cannot_start(pod: PodView, now: datetime) -> End | None:
    """A Pod whose container cannot be started: its image or its configuration is wrong."""
    reason = pod.waiting_reason
    if reason is None or pod.phase != "Pending":
        return None
    since = pod.start_time or pod.created
    waited = (now - parse_time(since)).total_seconds() if since else 0.0
    if reason in START_FAILURES_AT_ONCE or (
        reason in START_FAILURES_AFTER_GRACE and waited >= IMAGE_PULL_GRACE
    ):
        return End(
            "failure", reason, pod.waiting_message or f"its container could not start ({reason})"
        )
    return None


def _unschedulable(pod: PodView, now: datetime, bound: float | None) -> End | None:
    """A Pod no node has taken for ``bound`` seconds: its attempt fails as Unschedulable,
    with the scheduler's words, instead of waiting for ever (a retry may find room later)."""
    if bound is None or pod.unschedulable is None or pod.phase != "Pending" or not pod.created:
        return None
    waited = (now - parse_time(pod.created)).total_seconds()
    if waited < bound:
        return None
    return End(
        "failure",
        "Unschedulable",
        f"no node could run it for {waited:.0f}s (the operator waits {bound:.0f}s): "
        f"{pod.unschedulable}",
    )


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
    end: End | None,
    known: AttemptRecord | None,
    pod_name: Callable[[int], str],
    now: datetime,
) -> AttemptRecord:
    """Attempt ``k`` as the status and the manifest record it. A recorded end stands (a
    gang's members may still move on: a member stopped after the verdict says so)."""
    kept = _kept(known, pod)
    if kept is not None:
        return kept
    return AttemptRecord(
        attempt=k,
        pod=pod.name if pod is not None else pod_name(k),
        pod_uid=pod.uid if pod is not None and pod.members is None else None,
        outcome=_record_outcome(pod, end),
        reason=end.reason if end else None,
        exit_code=end.exit_code if end else None,
        message=_clip(end.message) if end else None,
        start_time=pod.start_time if pod else (known.start_time if known else None),
        end_time=_end_time(pod, end, known, now),
        members=list(pod.members) if pod is not None and pod.members is not None else None,
    )


def _kept(known: AttemptRecord | None, pod: PodView | None) -> AttemptRecord | None:
    """The record that stands as it is (its end recorded, or its Pod gone), with a gang's
    members as they stand now; None when the attempt must be recorded again."""
    if known is None or (pod is not None and known.outcome not in ENDED):
        return None
    if pod is not None and pod.members is not None:
        return known.model_copy(update={"members": list(pod.members)})
    return known


def _record_outcome(pod: PodView | None, end: End | None) -> AttemptKind:
    """How it ended; until then, running or pending."""
    if end is not None:
        return end.outcome
    return "running" if pod and pod.phase == "Running" else "pending"


def _end_time(
    pod: PodView | None, end: End | None, known: AttemptRecord | None, now: datetime
) -> str | None:
    """When an ended attempt ended: its Pod's finish, else the record's, else now."""
    if end is None:
        return None
    end_time = (pod.finished_at if pod else None) or (known.end_time if known else None)
    return end_time or fmt_time(now)


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
            "members": stopped_members(rec),
        }
    )


def stopped_members(rec: AttemptRecord) -> list[MemberRecord] | None:
    """A gang attempt's members once it is stopped from outside (cancelled, or its job
    failed): those still pending or running are stopped with it."""
    if rec.members is None:
        return None
    live = ("pending", "running")
    return [
        m.model_copy(update={"outcome": "stopped"}) if m.outcome in live else m for m in rec.members
    ]


def _waiting_message(attempt: int, pod: PodView) -> str:
    if pod.unschedulable:
        return f"Attempt {attempt} cannot be scheduled yet: {pod.unschedulable}"
    if pod.waiting_reason:
        detail = f": {pod.waiting_message}" if pod.waiting_message else ""
        return f"Attempt {attempt} is starting ({pod.waiting_reason}{detail})."
    return f"Attempt {attempt} is starting in pod {pod.name}."


def _describe(end: End) -> str:
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
