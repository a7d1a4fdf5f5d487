"""What to do about one KineticJob: pure decisions, no API calls.

`decide()` takes everything the operator knows about a KineticJob — its
validated spec (or why it is invalid), the status it wrote last time, the
Jobs and Pods of its attempts as seen by the watches, and the time — and
returns the actions to take and the status to write. Called again with the
same inputs it returns the same answer, which is what makes the operator
level-triggered and safe to run at-least-once.

The rules, in the order they apply:

* Terminal phases (SUCCEEDED, FAILED, CANCELLED) are sticky: nothing is ever
  launched again; a Job still running is only stopped.
* An invalid spec fails the job at once, naming the field, and creates nothing.
* Each attempt is its own Job `<name>-<n>`. The current attempt ends as a
  success, an application failure (non-zero exit, OOMKilled,
  DeadlineExceeded) that spends one of `spec.retries`, or a disruption (pod
  or Job deleted from outside, evicted, node lost) that is retried for free
  up to `max_disruptions`.
* `spec.cancel` stops the current attempt and ends CANCELLED, unless the
  attempt had already succeeded.
* Only the current attempt may have live pods; older attempts still running
  (e.g. a replacement pod the Job controller made) are stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from kinetic.resources import (
    AttemptRecord,
    Condition,
    KineticJobSpec,
    KineticJobStatus,
    Phase,
)
from pydantic import ValidationError

from kinetic_operator.catalog import Catalog, UnknownAccelerator, resolve
from kinetic_operator.observed import JobView, PodView
from kinetic_operator.podspec import attempt_job_name

MAX_NAME = 63  # Job names become label values (job-name), which are capped at 63.
MAX_TEXT = 4096
# How long a finished Job may wait for its pod to show up in our watch before
# the operator settles without it (the pod's exit code and message).
POD_GRACE_SECONDS = 30.0

# ----------------------------------------------------------------------- inputs & outputs


@dataclass(frozen=True)
class InvalidSpec:
    """Why a KineticJob's spec cannot run, naming the field: 'spec.container.command: ...'."""

    message: str


@dataclass(frozen=True)
class Bounds:
    """Operator-wide limits: free retries for disruptions, attempt records kept."""

    max_disruptions: int = 3
    history: int = 10


@dataclass(frozen=True)
class CreateAttempt:
    """Create the Job of attempt `attempt` (AlreadyExists means done)."""

    attempt: int


@dataclass(frozen=True)
class DeleteAttempt:
    """Delete an attempt's Job and, through it, its pods (NotFound means done)."""

    job: str


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the KineticJob, for `kubectl describe`."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = CreateAttempt | DeleteAttempt | Event


@dataclass(frozen=True)
class Decision:
    """The actions to take, the status to write, and whether to look again later.

    `recheck_after` is set only while waiting for a watch to catch up (a
    finished Job whose pod we have not seen yet), so that a pod deleted
    before we saw it cannot leave the job waiting forever.
    """

    actions: tuple[Action, ...]
    status: KineticJobStatus
    recheck_after: float | None = None


# ----------------------------------------------------------------------- validation


def validate_spec(
    name: str, raw: Any, catalog: Catalog, *, storage_root: str | None, max_disruptions: int
) -> KineticJobSpec | InvalidSpec:
    """Parse and check a spec; every problem is reported with its field path.

    The CRD schema already rejects most mistakes at admission; this catches
    what a schema cannot express (one-of, the catalog, name length) and
    anything created before the CRD was current.
    """
    try:
        spec = KineticJobSpec.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        return InvalidSpec(_format_errors(exc))
    if (spec.function is None) == (spec.container is None):
        return InvalidSpec("spec: exactly one of spec.function or spec.container must be set")
    try:
        resolve(catalog, spec.accelerator, spec.spot)
    except UnknownAccelerator as exc:
        return InvalidSpec(str(exc))
    if spec.function is not None and not spec.function.result_uri and not storage_root:
        return InvalidSpec(
            "spec.function.resultURI: required, because the operator has no storage root "
            "(set KINETIC_STORAGE_ROOT on the operator or resultURI on the job)"
        )
    longest = attempt_job_name(name, spec.retries + max_disruptions + 1)
    if len(longest) > MAX_NAME:
        return InvalidSpec(
            f"metadata.name: too long; attempt Jobs are named <name>-<attempt> and {longest!r} "
            f"would exceed {MAX_NAME} characters"
        )
    return spec


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        path = "spec"
        for loc in err["loc"]:
            path += f"[{loc}]" if isinstance(loc, int) else f".{loc}"
        parts.append(f"{path}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


# ----------------------------------------------------------------------- assessing an attempt


@dataclass(frozen=True)
class Missing:
    """The attempt's Job was never seen: create it (again; it is idempotent)."""


@dataclass(frozen=True)
class Waiting:
    """Created, not running yet: unscheduled, pulling, starting; or catching up."""

    pod: PodView | None
    message: str
    recheck_after: float | None = None


@dataclass(frozen=True)
class Running:
    pod: PodView


@dataclass(frozen=True)
class Ended:
    """The attempt is over: success, failure (spends a retry) or disruption (does not)."""

    outcome: Literal["success", "failure", "disruption"]
    reason: str
    pod: PodView | None = None
    exit_code: int | None = None
    message: str | None = None


Assessment = Missing | Waiting | Running | Ended

_DISRUPTION_REASONS = {
    "EvictionByEvictionAPI": "Evicted",
    "PreemptionByScheduler": "Preempted",
    "DeletionByTaintManager": "NodeLost",
    "DeletionByPodGC": "NodeLost",
    "TerminationByKubelet": "Evicted",
}


def assess(
    record: AttemptRecord,
    job: JobView | None,
    pods: Sequence[PodView],
    spec: KineticJobSpec,
    now: datetime,
) -> Assessment:
    """How the current attempt stands, from its Job and pods.

    A pod that disappears, or starts terminating, without anyone cancelling
    is a disruption — unless the attempt's deadline has passed, in which case
    the Job controller is killing it and it is an application failure.
    """
    if job is None:
        if record.pod is None:
            return Missing()
        return Ended("disruption", "JobDeleted", message=f"Job {record.job} was deleted")

    pods = sorted(pods, key=lambda p: (p.created or "", p.name))
    winner = next((p for p in pods if p.phase == "Succeeded"), None)
    if job.finished and not pods and record.pod is None and job.failed_reason != "DeadlineExceeded":
        # The Job's watch ran ahead of the pod's: its pod ran and ended before
        # we saw it. Wait briefly for it; it has the exit code and message.
        waited = (now - parse_time(job.finished_time)).total_seconds() if job.finished_time else 0
        if waited < POD_GRACE_SECONDS:
            return Waiting(
                None, f"Attempt {record.attempt} is finishing.", POD_GRACE_SECONDS - waited
            )
    if winner is None and job.complete and any(not p.terminal for p in pods):
        # The Job's watch ran ahead of the pod's: wait for the pod's final
        # status, which carries the exit code and the termination message.
        running = next((p for p in pods if p.phase == "Running"), None)
        return (
            Running(running)
            if running
            else Waiting(pods[-1], f"Attempt {record.attempt} is finishing.")
        )
    if job.complete or winner is not None:
        return Ended(
            "success",
            "Completed",
            pod=winner,
            exit_code=winner.exit_code if winner else 0,
            message=winner.termination_message if winner else None,
        )

    current = next((p for p in pods if p.name == record.pod), None) or (pods[-1] if pods else None)
    if _deadline_exceeded(job, current, spec, now):
        return Ended(
            "failure",
            "DeadlineExceeded",
            pod=current,
            exit_code=current.exit_code if current else None,
            message=f"exceeded spec.deadlineSeconds ({spec.deadline_seconds}s)",
        )
    if job.deleting:
        return Ended("disruption", "JobDeleted", pod=current, message=f"Job {job.name} was deleted")
    if record.pod is not None and all(p.name != record.pod for p in pods):
        return Ended("disruption", "PodDeleted", message=f"pod {record.pod} was deleted")

    if current is not None:
        disruption = _disruption(current)
        if disruption is not None:
            return Ended(
                "disruption",
                disruption,
                pod=current,
                exit_code=current.exit_code,
                message=current.message or f"pod {current.name}: {disruption}",
            )
        if current.phase == "Failed":
            return Ended(
                "failure",
                current.terminated_reason or current.reason or "Error",
                pod=current,
                exit_code=current.exit_code,
                message=current.termination_message or current.message,
            )
        if current.phase == "Running":
            return Running(current)

    if job.failed_reason is not None:
        # The Job failed without a pod to tell why (it never started, or was removed).
        return Ended("failure", job.failed_reason, pod=current, message=job.failed_message)
    return Waiting(current, _waiting_message(record.attempt, current))


def _deadline_exceeded(
    job: JobView, pod: PodView | None, spec: KineticJobSpec, now: datetime
) -> bool:
    if job.failed_reason == "DeadlineExceeded" or (
        pod is not None and pod.reason == "DeadlineExceeded"
    ):
        return True
    # The Job controller deletes the pod first and records why a moment later;
    # a pod dying after the deadline is the deadline, not a disruption.
    if spec.deadline_seconds is None or job.start_time is None or pod is None:
        return False
    if not (pod.deleting or pod.phase == "Failed"):
        return False
    return (now - parse_time(job.start_time)).total_seconds() >= spec.deadline_seconds


def _disruption(pod: PodView) -> str | None:
    if pod.reason in ("Evicted", "NodeLost", "Preempting", "Terminated", "Shutdown"):
        return "Evicted" if pod.reason in ("Terminated", "Shutdown") else pod.reason
    if pod.disruption is not None:
        return _DISRUPTION_REASONS.get(pod.disruption, pod.disruption)
    if pod.deleting:
        return "PodDeleted"
    return None


def _waiting_message(attempt: int, pod: PodView | None) -> str:
    if pod is None:
        return f"Attempt {attempt} is waiting for its pod to be created."
    if pod.unschedulable:
        return f"Attempt {attempt} cannot be scheduled yet: {pod.unschedulable}"
    if pod.waiting_reason:
        detail = f": {pod.waiting_message}" if pod.waiting_message else ""
        return f"Attempt {attempt} is starting ({pod.waiting_reason}{detail})."
    return f"Attempt {attempt} is starting in pod {pod.name}."


# ----------------------------------------------------------------------- the decision


@dataclass
class _Work:
    """The status being written and the actions collected on the way."""

    status: KineticJobStatus
    name: str
    now: datetime
    actions: list[Action] = field(default_factory=list)
    recheck_after: float | None = None

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.actions.append(Event(type_, reason, message))

    def record(self, attempt: int) -> AttemptRecord:
        for rec in self.status.attempts:
            if rec.attempt == attempt:
                return rec
        rec = AttemptRecord(attempt=attempt, job=attempt_job_name(self.name, attempt))
        self.status.attempts.append(rec)
        self.status.attempts.sort(key=lambda r: r.attempt)
        return rec


def decide(
    *,
    name: str,
    spec: KineticJobSpec | InvalidSpec,
    status: KineticJobStatus,
    jobs: Iterable[JobView],
    pods: Iterable[PodView],
    now: datetime,
    generation: int | None = None,
    bounds: Bounds = Bounds(),
    result_uri: str | None = None,
) -> Decision:
    """The next step for KineticJob `name`; see the module docstring for the rules."""
    w = _Work(status.model_copy(deep=True), name, now)
    st = w.status
    st.observed_generation = generation
    jobs_by_attempt = {j.attempt: j for j in jobs}
    pods_by_attempt: dict[int, list[PodView]] = {}
    for pod in pods:
        pods_by_attempt.setdefault(pod.attempt, []).append(pod)

    if Phase(st.phase).terminal:
        pass
    elif isinstance(spec, InvalidSpec):
        _finish(w, Phase.FAILED, spec.message, reason="InvalidSpec")
        w.event("Warning", "InvalidSpec", spec.message)
    else:
        _advance(w, spec, jobs_by_attempt, pods_by_attempt, bounds, result_uri)

    _stop_strays(w, jobs_by_attempt, pods_by_attempt)
    st.attempts = st.attempts[-bounds.history :]
    _set_conditions(w)
    return Decision(tuple(w.actions), st, w.recheck_after)


def _advance(
    w: _Work,
    spec: KineticJobSpec,
    jobs: dict[int, JobView],
    pods: dict[int, list[PodView]],
    bounds: Bounds,
    result_uri: str | None,
) -> None:
    st = w.status
    if result_uri is not None:
        st.result_uri = result_uri
    # A Job newer than the status knows (status lost or rewritten): adopt it.
    if jobs and max(jobs) > st.attempt:
        st.attempt = max(jobs)

    if st.attempt == 0:
        if spec.cancel:
            _finish(w, Phase.CANCELLED, "Cancelled before it started.", reason="Cancelled")
            w.event("Normal", "Cancelled", "Cancelled before any attempt started.")
            return
        _start(w, 1)
        w.event("Normal", "Started", f"Started attempt 1 as Job {attempt_job_name(w.name, 1)}.")
        return

    rec = w.record(st.attempt)
    state = assess(rec, jobs.get(st.attempt), pods.get(st.attempt, []), spec, w.now)

    if isinstance(state, Ended) and state.outcome == "success":
        if rec.pod and state.pod is not None and rec.pod != state.pod.name:
            # The Job controller replaced a pod that vanished and the replacement
            # finished before we looked: still a disruption, and the count says so.
            st.disruptions += 1
            w.event(
                "Warning",
                "AttemptDisrupted",
                f"Attempt {st.attempt}: pod {rec.pod} was deleted; "
                f"its Job's replacement pod {state.pod.name} finished the attempt.",
            )
        _end_attempt(rec, state, w.now)
        st.result = _clip(state.message) if spec.container is not None else None
        done = f"Succeeded on attempt {st.attempt}."
        _finish(w, Phase.SUCCEEDED, done, reason="Succeeded")
        w.event("Normal", "Succeeded", done)
        return

    if spec.cancel:
        _cancel(w, rec, state)
        return

    match state:
        case Missing():
            # Created but not seen yet (or lost before it ran): creating is idempotent.
            w.actions.append(CreateAttempt(st.attempt))
            _set_phase(w, Phase.PENDING, f"Attempt {st.attempt} is being created.")
        case Waiting(pod=pod, message=message, recheck_after=recheck):
            if pod is not None:
                rec.pod = pod.name
            w.recheck_after = recheck
            if not (recheck and st.phase == Phase.RUNNING):  # catching up: keep RUNNING
                _set_phase(w, Phase.PENDING, message)
        case Running(pod=pod):
            rec.pod, rec.start_time = pod.name, pod.start_time or rec.start_time
            _set_phase(w, Phase.RUNNING, f"Attempt {st.attempt} is running in pod {pod.name}.")
        case Ended(outcome="failure"):
            _end_attempt(rec, state, w.now)
            st.failures += 1
            what = _describe(state)
            if st.failures <= spec.retries:
                w.event("Warning", "AttemptFailed", f"Attempt {st.attempt} failed: {what}.")
                _retry(
                    w,
                    f"Attempt {rec.attempt} failed ({what}); retry {st.failures} of {spec.retries}",
                )
            else:
                used = f"after {spec.retries} retries" if spec.retries else "with no retries"
                msg = f"Failed on attempt {st.attempt} {used}: {what}."
                _finish(w, Phase.FAILED, msg, reason=state.reason)
                w.event("Warning", "Failed", msg)
        case Ended(outcome="disruption"):
            _end_attempt(rec, state, w.now)
            st.disruptions += 1
            what = _describe(state)
            if st.disruptions <= bounds.max_disruptions:
                w.event(
                    "Warning", "AttemptDisrupted", f"Attempt {st.attempt} was disrupted: {what}."
                )
                _retry(
                    w,
                    f"Attempt {rec.attempt} was disrupted ({what}); retried without using a retry",
                )
            else:
                msg = (
                    f"Failed on attempt {st.attempt}: disrupted {st.disruptions} times "
                    f"(the operator allows {bounds.max_disruptions}); last: {what}."
                )
                _finish(w, Phase.FAILED, msg, reason="TooManyDisruptions")
                w.event("Warning", "Failed", msg)


def _start(w: _Work, attempt: int) -> None:
    st = w.status
    st.attempt = attempt
    w.record(attempt)
    if st.start_time is None:
        st.start_time = fmt_time(w.now)
    w.actions.append(CreateAttempt(attempt))
    _set_phase(w, Phase.PENDING, f"Attempt {attempt} is starting.")


def _retry(w: _Work, why: str) -> None:
    nxt = w.status.attempt + 1
    _start(w, nxt)
    w.status.message = f"{why}; attempt {nxt} is starting."
    w.event(
        "Normal",
        "Retrying",
        f"{why}; started attempt {nxt} as Job {attempt_job_name(w.name, nxt)}.",
    )


def _cancel(w: _Work, rec: AttemptRecord, state: Assessment) -> None:
    w.actions.append(DeleteAttempt(rec.job))
    if isinstance(state, Ended):
        _end_attempt(rec, state, w.now)
    else:
        rec.outcome, rec.reason = "cancelled", "Cancelled"
        rec.end_time = rec.end_time or fmt_time(w.now)
        if isinstance(state, Running | Waiting) and state.pod is not None:
            rec.pod = state.pod.name
    msg = f"Cancelled during attempt {rec.attempt} (spec.cancel is true)."
    _finish(w, Phase.CANCELLED, msg, reason="Cancelled")
    w.event("Normal", "Cancelled", msg)


def _end_attempt(rec: AttemptRecord, state: Ended, now: datetime) -> None:
    pod = state.pod
    if pod is not None:
        rec.pod = pod.name
        rec.start_time = pod.start_time or rec.start_time
    rec.end_time = (pod.finished_at if pod else None) or rec.end_time or fmt_time(now)
    rec.exit_code = state.exit_code
    rec.reason = state.reason
    rec.message = _clip(state.message)
    rec.outcome = state.outcome


def _describe(state: Ended) -> str:
    bits = [state.reason]
    if state.exit_code is not None:
        bits.append(f"exit code {state.exit_code}")
    text = ", ".join(bits)
    lines = (state.message or "").strip().splitlines()
    return f"{text}: {lines[-1].strip()}" if lines else text


def _set_phase(w: _Work, phase: Phase, message: str) -> None:
    w.status.phase = phase
    w.status.message = message


def _finish(w: _Work, phase: Phase, message: str, *, reason: str) -> None:
    _set_phase(w, phase, message)
    w.status.completion_time = w.status.completion_time or fmt_time(w.now)
    rec = next((r for r in w.status.attempts if r.attempt == w.status.attempt), None)
    if rec is not None and rec.outcome == "running" and phase is not Phase.SUCCEEDED:
        rec.outcome = "cancelled" if phase is Phase.CANCELLED else "failure"
        rec.reason = rec.reason or reason
        rec.end_time = rec.end_time or fmt_time(w.now)


def _stop_strays(w: _Work, jobs: dict[int, JobView], pods: dict[int, list[PodView]]) -> None:
    """Only the current attempt of a live job may run; stop anything else still running."""
    terminal = Phase(w.status.phase).terminal
    already = {a.job for a in w.actions if isinstance(a, DeleteAttempt)}
    for attempt, job in sorted(jobs.items()):
        if attempt == w.status.attempt and not terminal:
            continue
        if job.name in already or job.finished or job.deleting:
            continue
        its_pods = pods.get(attempt, [])
        if any(p.live for p in its_pods) or not its_pods:
            w.actions.append(DeleteAttempt(job.name))


_CONDITIONS = {"Running": Phase.RUNNING, "Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED}


def _set_conditions(w: _Work) -> None:
    """Running, Complete and Failed; lastTransitionTime moves only when status flips."""
    st = w.status
    phase = Phase(st.phase)
    existing = {c.type: c for c in st.conditions}
    out: list[Condition] = []
    for type_, when in _CONDITIONS.items():
        value: Literal["True", "False"] = "True" if phase is when else "False"
        old = existing.get(type_)
        changed = old is None or old.status != value
        out.append(
            Condition(
                type=type_,
                status=value,
                reason=phase.value.title(),
                message=st.message if value == "True" else None,
                last_transition_time=fmt_time(w.now) if changed else old.last_transition_time,
            )
        )
    st.conditions = out


# ----------------------------------------------------------------------- helpers


def fmt_time(t: datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second, as Kubernetes writes times."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _clip(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def rejected(status: KineticJobStatus, message: str, now: datetime) -> KineticJobStatus:
    """The status of a job whose attempt Kubernetes refused to create (HTTP 422/403)."""
    w = _Work(status.model_copy(deep=True), "", now)
    _finish(w, Phase.FAILED, message, reason="Rejected")
    _set_conditions(w)
    return w.status
