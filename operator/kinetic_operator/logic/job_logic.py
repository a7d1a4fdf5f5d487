"""What to do about one KineticJob: pure decisions, no API calls.

`decide()` takes everything the operator knows about a KineticJob — its
validated spec (or why it is invalid), the status it wrote last time, the
Pods of its attempts as seen by the watch, and the time — and returns the
actions to take and the status to write. Called again with the same inputs
it returns the same answer, which is what makes the operator
level-triggered and safe to run at-least-once.

The rules, in the order they apply:

* Terminal phases (SUCCEEDED, FAILED, CANCELLED) are sticky: nothing is ever
  launched again; a Pod still running is only stopped.
* An invalid spec fails the job at once, naming the field, and creates nothing;
  so does a storage URI outside the namespace's prefix (`kinetic.model.layout`).
* Policy on every generation: the spec the operator accepts is recorded as
  ``status.acceptedSpecSHA256`` (all but ``cancel``). A later change is
  judged whole against the policy in force, like a new job, before another
  Pod starts; refused, the job ends FAILED with reason ``PolicyDenied``.
  A KineticJob's spec stays mutable (a change the policy allows runs from
  the next attempt on, as before): the operator keeps no copy of an
  accepted job spec to go on running, so refusing a change and carrying on
  is not possible, and failing every edit would be a bigger change than
  judging it. (A KineticBatch is the other way round: its accepted spec is
  kept, and only maxConcurrent and the cancel fields may change.)
* A function job's result goes to its own storage prefix (namespace and UID);
  the hash the runner reported for it is recorded as ``resultSHA256``.
* Each attempt is its own Pod `<name>-<n>`; how attempts end, retry and
  get cancelled is the shared attempt planner's (`kinetic_operator.logic.attempts`).
* The attempt number is written to the status before its Pod is created, so
  a reconcile that raced with another, or an operator that died in between,
  never creates a Pod the status does not know of.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from kinetic.model import digest, layout, limits
from kinetic.model.catalog import Catalog, UnknownAccelerator, resolve
from kinetic.model.data import volume_problems
from kinetic.model.gang import job_hosts_problems
from kinetic.model.limits import DEFAULT_MAX_DISRUPTIONS
from kinetic.model.names import fmt_time, job_pod_name, parse_time
from kinetic.model.resources import (
    Condition,
    KineticJobSpec,
    KineticJobStatus,
    Phase,
    debug_problem,
)
from pydantic import ValidationError

from kinetic_operator.logic.attempts import (
    AttemptCause,
    Limits,
    UnitPlan,
    plan_unit,
    stopped_members,
)
from kinetic_operator.logic.conditions import READINESS, readiness
from kinetic_operator.logic.gangs import Gang, ranks_to_create
from kinetic_operator.logic.observed import PodView

__all__ = ["fmt_time", "parse_time"]

MAX_TEXT = 4096
R_INVALID_SPEC = "InvalidSpec"
R_POLICY_DENIED = "PolicyDenied"
_STICKY = (R_INVALID_SPEC, R_POLICY_DENIED)  # reasons that say more than "Failed"

# ----------------------------------------------------------------------- inputs & outputs


@dataclass(frozen=True)
class InvalidSpec:
    """Why a KineticJob's spec cannot run, naming the field: 'spec.container.command: ...'.

    ``reason`` is the Failed condition's and the Event's: ``InvalidSpec``, or
    ``PolicyDenied`` for a change after acceptance that the policy refuses.
    """

    message: str
    reason: str = R_INVALID_SPEC


@dataclass(frozen=True)
class Bounds:
    """Operator-wide limits: free retries for disruptions, attempt records kept."""

    max_disruptions: int = DEFAULT_MAX_DISRUPTIONS
    history: int = 10
    unschedulable_seconds: float | None = None  # see `attempts.Limits`


@dataclass(frozen=True)
class CreatePod:
    """Create the Pod of attempt `attempt` (AlreadyExists means done); `cause` says why.

    A gang's attempt names its ``ranks`` to create, and where rank 0 is not
    reached by DNS, rank 0's Pod IP (``coordinator``) once it has one.
    """

    attempt: int
    cause: AttemptCause | None = None
    ranks: tuple[int, ...] = ()
    coordinator: str | None = None


@dataclass(frozen=True)
class DeletePod:
    """Stop an attempt's Pod (NotFound means done)."""

    pod: str


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the KineticJob, for `kubectl describe`."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = CreatePod | DeletePod | Event


@dataclass(frozen=True)
class Decision:
    """The actions to take and the status to write."""

    actions: tuple[Action, ...]
    status: KineticJobStatus

    @property
    def creates(self) -> bool:
        return any(isinstance(a, CreatePod) for a in self.actions)


# ----------------------------------------------------------------------- validation


def validate_spec(
    name: str,
    raw: Any,
    catalog: Catalog,
    *,
    storage_root: str | None,
    max_disruptions: int,
    namespace: str = "default",
) -> KineticJobSpec | InvalidSpec:
    """Parse and check a spec; every problem is reported with its field path.

    The CRD schema already rejects most mistakes at admission; this catches
    what a schema cannot express (one-of, the catalog, name length) and
    anything created before the CRD was current.
    """
    too_big = limits.check_job_spec(raw)  # first: a hostile value is judged before parsing
    if too_big:
        return InvalidSpec("; ".join(too_big))
    try:
        spec = KineticJobSpec.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        return InvalidSpec(_format_errors(exc))
    if (spec.function is None) == (spec.container is None):
        return InvalidSpec("spec: exactly one of spec.function or spec.container must be set")
    if (debug := debug_problem(spec, "spec")) is not None:
        return InvalidSpec(debug)
    try:
        resolve(catalog, spec.accelerator, spec.spot)
    except UnknownAccelerator as exc:
        return InvalidSpec(str(exc))
    if spec.function is not None:
        if not storage_root:
            return InvalidSpec(
                "spec.function: the operator has no storage root for results "
                "(set KINETIC_STORAGE_ROOT on the operator)"
            )
        refused = foreign_uris(storage_root, namespace, spec, "spec")
        if refused:
            return InvalidSpec(refused[0])
    if spec.volumes:
        refused = volume_problems(storage_root, namespace, spec.volumes, "spec")
        if refused:
            return InvalidSpec(refused[0])
    if spec.output_dir:
        why = layout.outside_own_storage(storage_root, namespace, spec.output_dir, "spec.outputDir")
        if why is not None:
            return InvalidSpec(why)
    hosts = job_hosts_problems(spec, catalog)
    return InvalidSpec(hosts[0]) if hosts else spec


def recorded_instance(view: PodView, status: KineticJobStatus) -> bool:
    """Whether ``view`` is the Pod the status recorded for its attempt (or rank), or none is
    recorded yet: a Pod made again under a recorded name (by someone who copied its seal)
    has another UID, and is not the attempt's, after a restart as before it."""
    rec = next((r for r in status.attempts if r.attempt == view.attempt), None)
    if rec is None or view.uid is None:
        return True
    if view.rank is None:
        return rec.pod_uid in (None, view.uid)
    member = next((m for m in rec.members or () if m.rank == view.rank), None)
    return member is None or member.pod_uid in (None, view.uid)


def spec_sha256(spec: KineticJobSpec) -> str:
    """The digest of what a job runs: its spec but ``cancel``, as canonical JSON.

    Recorded in ``status.acceptedSpecSHA256`` once the operator accepts a
    spec, so a later change (anything but a cancel) is seen, and judged
    against the policy in force before another Pod starts.
    """
    doc = {k: v for k, v in spec.wire().items() if k != "cancel"}
    return digest.json_sha256(doc)


def changed_after_acceptance(status: KineticJobStatus, spec: KineticJobSpec) -> bool:
    """Whether ``spec`` differs from the one the operator accepted (a cancel aside).

    A job accepted before this record existed (no ``acceptedSpecSHA256``) has
    nothing to compare with: its spec is taken as the accepted one.
    """
    accepted = status.accepted_spec_sha256
    return accepted is not None and accepted != spec_sha256(spec)


def policy_denied(violations: list[str], generation: int | None) -> InvalidSpec:
    """The failure of a job whose spec changed after acceptance into one the policy refuses."""
    at = f" (generation {generation})" if generation is not None else ""
    return InvalidSpec(
        f"The spec changed after the job was accepted{at}, and the policy in force refuses "
        f"it: {'; '.join(violations)}. No Pod of the changed spec was started and the job "
        "is stopped: submit a new job whose spec the policy allows.",
        reason=R_POLICY_DENIED,
    )


def foreign_uris(root: str, namespace: str, spec: KineticJobSpec, at: str) -> list[str]:
    """Why each storage URI of ``spec`` the runner would read or write is refused, if any.

    ``outputDir`` is judged by `validate_spec` with the data volumes' rule
    (`layout.outside_own_storage`): the user's code writes it with the Pod's
    own credentials, so only storage the namespace does not own is refused.
    """
    fn = spec.function
    if fn is None:
        return []
    named = {"payloadURI": fn.payload_uri, "resultURI": fn.result_uri, "inputURI": fn.input_uri}
    found = (
        layout.outside_namespace(root, namespace, uri, f"{at}.function.{key}")
        for key, uri in named.items()
        if uri
    )
    return [why for why in found if why is not None]


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        path = "spec"
        for loc in err["loc"]:
            path += f"[{loc}]" if isinstance(loc, int) else f".{loc}"
        parts.append(f"{path}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


# ----------------------------------------------------------------------- the decision

_PHASES = {
    "pending": Phase.PENDING,
    "running": Phase.RUNNING,
    "succeeded": Phase.SUCCEEDED,
    "failed": Phase.FAILED,
    "cancelled": Phase.CANCELLED,
}


@dataclass
class _Work:
    """The status being written and the actions collected on the way."""

    status: KineticJobStatus
    name: str
    now: datetime
    actions: list[Action] = field(default_factory=list)
    reason: str | None = None  # the True condition's reason, when not the phase's name
    gang: Gang | None = None
    dns: bool = True

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.actions.append(Event(type_, reason, message))

    def stop(self, pods: Iterable[str]) -> None:
        """Delete these attempts' Pods: a gang's attempt is all of its live members."""
        for pod in pods:
            members = self._members(pod)
            self.actions.extend(DeletePod(m) for m in members if DeletePod(m) not in self.actions)

    def create(self, attempt: int, cause: AttemptCause | None) -> None:
        """Create an attempt: its one Pod, or the ranks of its gang that may start now
        (`gangs.ranks_to_create`)."""
        if self.gang is None:
            self.actions.append(CreatePod(attempt, cause))
            return
        pod = job_pod_name(self.name, attempt)
        todo = ranks_to_create(self.gang, attempt, pod, self.gang.hosts, dns=self.dns)
        if todo is not None:
            self.actions.append(CreatePod(attempt, cause, todo.ranks, todo.coordinator))

    def _members(self, pod: str) -> tuple[str, ...]:
        """A gang's attempt view stands for its live members; any other Pod for itself."""
        members = self.gang.members_named(pod) if self.gang is not None else None
        return (pod,) if members is None else members


def decide(
    *,
    name: str,
    spec: KineticJobSpec | InvalidSpec,
    status: KineticJobStatus,
    pods: Mapping[int, PodView],
    now: datetime,
    creating: bool = False,
    generation: int | None = None,
    bounds: Bounds = Bounds(),
    result_uri: str | None = None,
    gang: Gang | None = None,
    dns: bool = True,
) -> Decision:
    """The next step for KineticJob `name`; see the module docstring for the rules.

    ``pods`` maps attempt number to the last sight of its Pod; ``creating``
    says this process created the current attempt's Pod and the watch has
    not shown it yet. A multi-host job's ``pods`` are one view per attempt
    and ``gang`` holds the members behind them (`kinetic_operator.logic.gangs`);
    ``dns`` says whether members reach rank 0 by name (else by its Pod IP,
    so the other ranks wait for it).
    """
    w = _Work(status.model_copy(deep=True), name, now, gang=gang, dns=dns)
    st = w.status
    st.observed_generation = generation

    if Phase(st.phase).terminal:
        w.stop(p.name for p in pods.values() if p.live)
    elif isinstance(spec, InvalidSpec):
        _finish(w, Phase.FAILED, spec.message)
        w.reason = spec.reason
        w.event("Warning", spec.reason, spec.message)
        w.stop(p.name for p in pods.values() if p.live)
        for rec in st.attempts:
            if rec.outcome in ("pending", "running"):
                rec.outcome, rec.reason = "cancelled", spec.reason
                rec.end_time = rec.end_time or fmt_time(now)
                rec.members = stopped_members(rec)
    else:
        st.accepted_spec_sha256 = spec_sha256(spec)
        if result_uri is not None:
            st.result_uri = result_uri
        plan = plan_unit(
            pods,
            reserved=st.attempt,
            creating=creating,
            limits=Limits(spec.retries, bounds.max_disruptions, bounds.unschedulable_seconds),
            cancel=spec.cancel,
            pod_name=lambda k: job_pod_name(name, k),
            now=now,
            known={r.attempt: r for r in st.attempts},
        )
        _apply(w, spec, plan, bounds)
        _complete_gang(w, plan)
    if gang is not None:  # an ended job still stops what is left of its gangs
        w.actions.extend(DeletePod(m) for m in gang.teardown if DeletePod(m) not in w.actions)

    _set_conditions(w)
    return Decision(tuple(w.actions), st)


def _apply(w: _Work, spec: KineticJobSpec, plan: UnitPlan, bounds: Bounds) -> None:
    """Write the plan into the status, and say what changed as Events."""
    st, before = w.status, w.status.attempt
    st.attempt = plan.attempt
    st.failures, st.disruptions = plan.failures, plan.disruptions
    st.attempts = list(plan.records[-bounds.history :])
    phase = _PHASES[plan.outcome]
    if plan.create is not None:
        _start_attempt(w, plan, plan.create, before)
    w.stop(plan.stop)
    if phase.terminal:
        _end_job(w, spec, plan, phase)
    else:
        st.phase, st.message = phase, plan.message


def _start_attempt(w: _Work, plan: UnitPlan, create: int, before: int) -> None:
    """Create attempt ``create``'s Pod; the first start, or why the last attempt ended, is an
    Event."""
    w.status.start_time = w.status.start_time or fmt_time(w.now)
    w.create(create, plan.cause)
    pod = job_pod_name(w.name, create)
    if before == 0:
        w.event("Normal", "Started", f"Started attempt 1 as Pod {pod}.")
    elif create > before:
        ended = plan.records[-2] if len(plan.records) > 1 else None
        disrupted = ended is not None and ended.outcome == "disruption"
        w.event("Warning", "AttemptDisrupted" if disrupted else "AttemptFailed", plan.message)


def _complete_gang(w: _Work, plan: UnitPlan) -> None:
    """A gang's own steps: delete the members of attempts that have a verdict, and create
    the ranks of the current attempt still missing once rank 0 can be reached."""
    gang = w.gang
    if gang is None:
        return
    if not plan.terminal and plan.create is None and plan.attempt in gang.members:
        w.create(plan.attempt, None)


def _end_job(w: _Work, spec: KineticJobSpec, plan: UnitPlan, phase: Phase) -> None:
    """The job ended: keep its result (a container's output, or a function's result hash)."""
    st = w.status
    if phase is Phase.SUCCEEDED and spec.container is not None and plan.last is not None:
        st.result = _clip(plan.last.termination_message)
    if spec.function is not None:
        stored = reported_result(plan)
        st.result_sha256 = stored.sha256 if stored is not None else None
        st.result_bytes = stored.size if stored is not None else None
    _finish(w, phase, plan.message)
    kind: Literal["Normal", "Warning"] = "Warning" if phase is Phase.FAILED else "Normal"
    w.event(kind, phase.value.title(), plan.message)


def reported_result(plan: UnitPlan) -> digest.Reported | None:
    """The result hash and size the runner reported: the successful attempt's, else the last
    failure's.

    A unit that succeeded takes only a successful attempt's hash: the stored
    result is that attempt's, and a failed attempt's hash would make the
    client refuse it. None until that attempt's report is known.
    """
    wanted = ("success",) if plan.outcome == "succeeded" else ("success", "failure")
    ended = [r for r in plan.records if r.outcome in wanted]
    ended.sort(key=lambda r: (r.outcome == "success", r.attempt))
    for rec in reversed(ended):
        found = digest.reported_result(rec.message)
        if found is not None:
            return found
    return None


def _finish(w: _Work, phase: Phase, message: str) -> None:
    w.status.phase, w.status.message = phase, message
    w.status.completion_time = w.status.completion_time or fmt_time(w.now)


_CONDITIONS = {"Running": Phase.RUNNING, "Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED}


def _set_conditions(w: _Work) -> None:
    """Running, Complete and Failed, then Ready, Reconciling and Stalled (kstatus);
    lastTransitionTime moves only when a status flips."""
    st = w.status
    phase = Phase(st.phase)
    existing = {c.type: c for c in st.conditions}
    out = [
        _phase_condition(w, phase, type_, when, existing.get(type_))
        for type_, when in _CONDITIONS.items()
    ]
    reason = phase.value.title()
    out += readiness(st.conditions, phase, reason, st.message, fmt_time(w.now))
    # Conditions others own (ReconcileFailed) stay: this decision knows nothing of them.
    out += [c for c in st.conditions if c.type not in _CONDITIONS and c.type not in READINESS]
    st.conditions = out


def _phase_condition(
    w: _Work, phase: Phase, type_: str, when: Phase, old: Condition | None
) -> Condition:
    """Condition ``type_``: True while the job is in phase ``when``."""
    value: Literal["True", "False"] = "True" if phase is when else "False"
    changed = old is None or old.status != value
    reason = _true_reason(w, phase, old, changed) if value == "True" else phase.value.title()
    return Condition(
        type=type_,
        status=value,
        reason=reason,
        message=w.status.message if value == "True" else None,
        last_transition_time=(
            fmt_time(w.now) if changed or old is None else old.last_transition_time
        ),
    )


def _true_reason(w: _Work, phase: Phase, old: Condition | None, changed: bool) -> str:
    """The reason of the True condition: the decision's own, else a sticky one kept, else the
    phase's name. InvalidSpec (or PolicyDenied) says more than Failed; it stays once set,
    as the job stays failed."""
    kept = old.reason if old is not None and not changed else None
    return w.reason or (kept if kept in _STICKY else phase.value.title())


# ----------------------------------------------------------------------- helpers


def _clip(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def rejected(status: KineticJobStatus, message: str, now: datetime) -> KineticJobStatus:
    """The status of a job whose attempt Kubernetes refused to create (HTTP 422/403)."""
    w = _Work(status.model_copy(deep=True), "", now)
    for rec in w.status.attempts:
        if rec.attempt == w.status.attempt and rec.outcome in ("pending", "running"):
            rec.outcome, rec.reason, rec.message = "failure", "Rejected", _clip(message)
            rec.members = stopped_members(rec)
    _finish(w, Phase.FAILED, message)
    _set_conditions(w)
    return w.status
