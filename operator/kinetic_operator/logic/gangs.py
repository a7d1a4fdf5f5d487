"""A multi-host unit's Pods seen as one attempt each: pure, no API calls.

The attempt planner (`kinetic_operator.logic.attempts`) reasons about one Pod per
attempt. A gang is N Pods per attempt, so this module stands between the
two: it groups the member Pods of each attempt, turns them into
`gang_verdicts.Member` observations, asks `gang_outcome` for the
attempt's verdict, and hands the planner one *view* per attempt that says
the same thing a single Pod would:

* rank 0 succeeded: a Succeeded view carrying rank 0's termination message
  (its result);
* a member failed first: a Failed view with that member's reason and exit
  code, so the planner charges one retry;
* a member was lost first (deleted, evicted, preempted, node lost): a view
  the planner reads as a disruption;
* a member waited for a node past the deadline: a Failed view with reason
  ``GangUnschedulable`` (it spends a retry like any failure, so a gang that
  can never be placed ends instead of holding nodes forever);
* otherwise a live view, Running once every member runs.

Besides the views, a `Gang` answers the questions the planner cannot: which
member Pods to delete now (`teardown`, `members_of`), and which ranks of the
current attempt still need their Pods (`missing`). Members of a single-host
unit pass through unchanged, so single-host jobs do not change at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kinetic.model import gang as model
from kinetic.model.catalog import Catalog
from kinetic.model.names import gang_pod_name, parse_time
from kinetic.model.resources import AttemptRecord, KineticJobSpec, MemberRecord

from kinetic_operator.logic.attempts import End, pod_end
from kinetic_operator.logic.gang_verdicts import (
    Member,
    Outcome,
    Verdict,
    gang_outcome,
    members_to_delete,
)
from kinetic_operator.logic.gang_verdicts import Phase as MemberPhase
from kinetic_operator.logic.observed import PodView

UNSCHEDULABLE = "GangUnschedulable"
MAX_REASON = 256


@dataclass(frozen=True)
class Gang:
    """The members of every attempt of one multi-host unit, and their verdicts."""

    hosts: int
    members: Mapping[int, Mapping[int, PodView]]  # attempt -> rank -> last sight
    observed: Mapping[int, list[Member]]  # attempt -> every rank as the gang model sees it
    verdicts: Mapping[int, Verdict]
    creating: frozenset[str] = field(default_factory=frozenset)  # Pods created, not yet seen
    stopping: frozenset[str] = field(default_factory=frozenset)  # deleted, not yet seen so

    def _stoppable(self, pod: PodView) -> bool:
        """Live, and not deleted already by this process (the watch has yet to say so)."""
        return pod.live and pod.name not in self.stopping

    def members_of(self, attempt: int) -> tuple[str, ...]:
        """The live member Pods of ``attempt``: what stopping that attempt deletes."""
        ranks = self.members.get(attempt, {})
        return tuple(p.name for _, p in sorted(ranks.items()) if self._stoppable(p))

    def members_named(self, view: str) -> tuple[str, ...] | None:
        """The live member Pods of the attempt whose view is named ``view`` (what stopping
        it deletes), or None when no attempt of this gang has that name. The one answer to
        "the members of this attempt", for a KineticJob's attempts and a KineticBatch's."""
        for attempt, ranks in self.members.items():
            if ranks and attempt_name(ranks) == view:
                return self.members_of(attempt)
        return None

    @property
    def teardown(self) -> tuple[str, ...]:
        """Live members of attempts that have a verdict: they cannot finish without their
        peers, or their work is done (rank 0 succeeded), or they hold nodes for nothing."""
        out: list[str] = []
        for attempt, verdict in sorted(self.verdicts.items()):
            ranks = self.members.get(attempt, {})
            seen = self.observed.get(attempt, [])
            for rank in members_to_delete(seen, self.hosts, verdict):
                pod = ranks.get(rank)
                if pod is not None and self._stoppable(pod):
                    out.append(pod.name)
        return tuple(out)

    def missing(self, attempt: int, attempt_pod: str) -> tuple[int, ...]:
        """Ranks of a running ``attempt`` with no Pod yet (never seen, not being created)."""
        if self.verdicts.get(attempt, Verdict(Outcome.RUNNING)).outcome is not Outcome.RUNNING:
            return ()
        ranks = self.members.get(attempt, {})
        return tuple(
            r
            for r in range(self.hosts)
            if r not in ranks and gang_pod_name(attempt_pod, r) not in self.creating
        )

    def coordinator_ip(self, attempt: int) -> str | None:
        """Rank 0's Pod IP in ``attempt``, once the cluster gave it one."""
        rank0 = self.members.get(attempt, {}).get(model.COORDINATOR_RANK)
        return rank0.pod_ip if rank0 is not None and rank0.live else None


@dataclass(frozen=True)
class Ranks:
    """Gang members to create now for one attempt; ``coordinator`` is rank 0's Pod IP for
    the others where there is no DNS (None: by DNS, or rank 0 itself)."""

    ranks: tuple[int, ...]
    coordinator: str | None = None


def ranks_to_create(
    gang: Gang | None, attempt: int, attempt_pod: str, hosts: int, *, dns: bool
) -> Ranks | None:
    """Which members of ``attempt`` to create now; None when there is nothing to create.

    With DNS every missing rank at once. Without, rank 0 first; the others
    once rank 0 has a Pod IP to give them. A member seen, or being created,
    is not created again.
    """
    if hosts <= 1:
        return None
    missing = gang.missing(attempt, attempt_pod) if gang is not None else tuple(range(hosts))
    if not missing:
        return None
    if dns:
        return Ranks(missing)
    if 0 in missing:
        return Ranks((0,))
    ip = gang.coordinator_ip(attempt) if gang is not None else None
    return Ranks(missing, ip) if ip else None


def hosts_of_spec(spec: object, catalog: Catalog, pods: Iterable[PodView]) -> int:
    """The hosts a unit runs on: its spec's (`gang.effective_hosts`); for a spec that
    cannot run, as many as its Pods show, so its live members can still be stopped."""
    if isinstance(spec, KineticJobSpec):
        return model.effective_hosts(spec.hosts, catalog, spec.accelerator)
    return max((p.rank + 1 for p in pods if p.rank is not None), default=1)


def see(
    pods: Iterable[PodView],
    hosts: int,
    now: datetime,
    deadline: timedelta = model.DEFAULT_SCHEDULING_DEADLINE,
    creating: Iterable[str] = (),
    settled: Mapping[int, AttemptRecord] | None = None,
    refused: Mapping[int, PodView] | None = None,
    stopping: Iterable[str] = (),
) -> tuple[dict[int, PodView], Gang | None]:
    """One view per attempt for the planner, and the gang behind them (None on one host).

    ``pods`` are the unit's Pods as last seen, tombstones included; a Pod
    seen alive wins over an older tombstone of the same name. ``settled``
    are attempts whose end the owner has recorded: their verdict stands.
    The operator deletes the rest of a gang the moment it has a verdict, so
    a member it deleted would otherwise read as lost, often within the same
    second as the failure it was deleted for, and turn a failure into a
    free disruption. ``refused`` are attempts a member of which Kubernetes
    refused to create: they failed as that view says, and their members
    already created are torn down. ``stopping`` are members this process
    has deleted and the watch has not shown so yet: not deleted again.
    """
    latest = _latest(pods)
    if hosts <= 1:
        return {p.attempt: p for p in latest.values() if p.rank is None}, None
    members: dict[int, dict[int, PodView]] = {}
    for pod in latest.values():
        if pod.rank is not None and 0 <= pod.rank < hosts:
            members.setdefault(pod.attempt, {})[pod.rank] = pod
    observed: dict[int, list[Member]] = {}
    verdicts: dict[int, Verdict] = {}
    views: dict[int, PodView] = {}
    for attempt, ranks in members.items():
        observed[attempt] = seen = _observed(ranks, hosts, now)
        record = (settled or {}).get(attempt)
        if record is not None and record.outcome in _SETTLED:
            verdicts[attempt] = verdict = _SETTLED[record.outcome]
            views[attempt] = _settled_view(attempt_name(ranks), ranks, seen, record)
            continue
        verdicts[attempt] = verdict = gang_outcome(seen, hosts, now, deadline)
        views[attempt] = _view(attempt_name(ranks), ranks, seen, verdict, now)
    for attempt, view in (refused or {}).items():
        verdicts[attempt] = Verdict(Outcome.FAILED, (), view.termination_message or "")
        views[attempt] = view
    gang = Gang(hosts, members, observed, verdicts, frozenset(creating), frozenset(stopping))
    return views, gang


_SETTLED = {
    "success": Verdict(Outcome.SUCCEEDED),
    "failure": Verdict(Outcome.FAILED),
    "disruption": Verdict(Outcome.DISRUPTED),
}


def _settled_view(
    name: str, ranks: Mapping[int, PodView], observed: list[Member], record: AttemptRecord
) -> PodView:
    """An attempt whose end is recorded, as the record tells it; members live when it ended
    are shown as stopped."""
    before = {m.rank: m.outcome for m in record.members or ()}
    kept = ("succeeded", "failed", "gone")
    members = tuple(
        MemberRecord(
            rank=m.rank,
            pod=ranks[m.rank].name if m.rank in ranks else gang_pod_name(name, m.rank),
            pod_uid=ranks[m.rank].uid if m.rank in ranks else None,
            outcome=before[m.rank] if before.get(m.rank) in kept else "stopped",
            exit_code=ranks[m.rank].exit_code if m.rank in ranks else None,
            reason=_clip(m.reason) if before.get(m.rank) in kept else None,
        )
        for m in observed
    )
    base = ranks.get(model.COORDINATOR_RANK) or next(iter(ranks.values()))
    whole = _Attempt(name, members, base)
    common: dict[str, Any] = {"reason": None, "deleted_at": None, "exit_code": record.exit_code}
    if record.outcome == "success":
        message = base.termination_message or record.message
        return whole.of(base, phase="Succeeded", termination_message=message, **common)
    if record.outcome == "failure":
        return _failed_view(whole, base, record.reason, record.message, record.exit_code)
    return whole.of(
        base,
        phase="Failed",
        disruption=record.reason or "PodDeleted",
        message=record.message,
        **common,
    )


def attempt_name(ranks: Mapping[int, PodView]) -> str:
    """The attempt's own name (``<job>-a<a>``), as its members' labels give it."""
    pod = next(iter(ranks.values()))
    return pod.attempt_pod or pod.name


def _latest(pods: Iterable[PodView]) -> dict[str, PodView]:
    """By name: the live sight over a tombstone."""
    out: dict[str, PodView] = {}
    for pod in pods:
        if pod.name not in out or out[pod.name].gone:
            out[pod.name] = pod
    return out


# --------------------------------------------------------------------------- members


def _observed(ranks: Mapping[int, PodView], hosts: int, now: datetime) -> list[Member]:
    """Every rank as a `Member`, by rank. A rank with no Pod yet (rank 0 is created first
    where there is no DNS) waits since the gang began, so the scheduling deadline covers it;
    a member seen and then deleted is a tombstone among ``ranks``, so it is lost, not this."""
    began = _earliest(p.created for p in ranks.values())
    return [
        _member(r, ranks[r], now)
        if r in ranks
        else Member(r, MemberPhase.PENDING, "its Pod is not created yet", began)
        for r in range(hosts)
    ]


def _member(rank: int, pod: PodView, now: datetime) -> Member:
    """One member Pod as the gang model sees it."""
    end = pod_end(pod, now)
    if end is not None:
        when = _time(pod.finished_at or pod.deleted_at)
        phase = {
            "success": MemberPhase.SUCCEEDED,
            "failure": MemberPhase.FAILED,
            "disruption": MemberPhase.GONE,
        }[end.outcome]
        return Member(rank, phase, _said(end), when)
    if pod.start_time is None:  # not placed on a node yet
        return Member(rank, MemberPhase.PENDING, pod.unschedulable or "", _time(pod.created))
    return Member(rank, MemberPhase.RUNNING)


def _said(end: End) -> str:
    lines = (end.message or "").strip().splitlines()
    detail = f" (exit code {end.exit_code})" if end.exit_code is not None else ""
    return f"{end.reason}{detail}" + (f": {lines[-1].strip()}" if lines else "")


# --------------------------------------------------------------------------- the view


def _view(
    name: str,
    ranks: Mapping[int, PodView],
    observed: list[Member],
    verdict: Verdict,
    now: datetime,
) -> PodView:
    """The attempt as one Pod would show it (see the module docstring)."""
    by_rank = {m.rank: m for m in observed}
    first = ranks.get(verdict.ranks[0]) if verdict.ranks else None
    base = ranks.get(model.COORDINATOR_RANK) or first or next(iter(ranks.values()))
    whole = _Attempt(name, _records(name, ranks, by_rank, verdict), base)
    match verdict.outcome:
        case Outcome.SUCCEEDED:
            return whole.of(base, phase="Succeeded")
        case Outcome.FAILED:
            return _failed(whole, first or base, now, verdict.message)
        case Outcome.DISRUPTED:
            return _lost(whole, first or base, now, verdict.message)
        case Outcome.UNSCHEDULABLE:
            return _failed_view(whole, base, UNSCHEDULABLE, verdict.message, None)
    return _live(whole, base, ranks, observed)


@dataclass(frozen=True)
class _Attempt:
    """What every view of a gang's attempt shares: its name and its members' records."""

    name: str
    members: tuple[MemberRecord, ...]
    start: PodView  # rank 0, or the first member seen: when the attempt began

    def of(self, pod: PodView, **changes: Any) -> PodView:
        """``pod`` standing for the whole attempt, with ``changes``; its start is the
        attempt's, whichever member's view it is, so a record never moves once written."""
        return replace(
            pod,
            **{
                "name": self.name,
                "rank": None,
                "members": self.members,
                "deleting": False,
                "gone": False,
                "start_time": self.start.start_time,
                "created": self.start.created,
                **changes,
            },
        )


def _failed(whole: _Attempt, pod: PodView, now: datetime, said: str) -> PodView:
    """The member that failed first, as a Failed Pod: its reason and exit code."""
    end = pod_end(pod, now) or End("failure", "Error", None)
    return _failed_view(whole, pod, end.reason, said, end.exit_code)


def _failed_view(
    whole: _Attempt, pod: PodView, reason: str | None, message: str | None, exit_code: int | None
) -> PodView:
    """The attempt as one Failed Pod, ended for ``reason``: what the planner reads as a
    failure (not a disruption), whether a member failed, the gang was never placed, or the
    failure was recorded already."""
    return whole.of(
        pod,
        phase="Failed",
        reason=None,
        disruption=None,
        deleted_at=None,
        terminated_reason=reason,
        termination_message=message,
        exit_code=exit_code,
    )


def _lost(whole: _Attempt, pod: PodView, now: datetime, said: str) -> PodView:
    """The member lost first, as a Pod the planner reads as disrupted."""
    end = pod_end(pod, now)
    reason = end.reason if end is not None and end.outcome == "disruption" else "PodDeleted"
    return whole.of(
        pod,
        phase="Failed",
        reason=None,
        disruption=reason,
        deleted_at=None,
        finished_at=pod.finished_at or pod.deleted_at,
        message=said,
    )


def _live(
    whole: _Attempt, base: PodView, ranks: Mapping[int, PodView], observed: list[Member]
) -> PodView:
    """A gang on its way: Running once every member runs, else the first waiting member's
    reason (so the job's message says which rank waits, and why)."""
    waiting = [m for m in observed if m.phase is not MemberPhase.RUNNING]
    if not waiting:
        return whole.of(base, phase="Running")
    pod = ranks.get(waiting[0].rank, base)
    return whole.of(pod, phase="Pending")


def _records(
    name: str, ranks: Mapping[int, PodView], by_rank: Mapping[int, Member], verdict: Verdict
) -> tuple[MemberRecord, ...]:
    """Every member's outcome, for the status and the manifest."""
    stopped = verdict.outcome is not Outcome.RUNNING
    out = []
    for rank in sorted(by_rank):
        pod, member = ranks.get(rank), by_rank[rank]
        outcome = member.phase.value
        if stopped and member.phase in (MemberPhase.PENDING, MemberPhase.RUNNING):
            outcome = "stopped"
        out.append(
            MemberRecord(
                rank=rank,
                pod=pod.name if pod is not None else gang_pod_name(name, rank),
                pod_uid=pod.uid if pod is not None else None,
                outcome=outcome,
                exit_code=pod.exit_code if pod is not None else None,
                reason=_clip(member.reason),
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------- helpers


def _time(stamp: str | None) -> datetime | None:
    try:
        return parse_time(stamp) if stamp else None
    except ValueError:
        return None


def _earliest(stamps: Iterable[str | None]) -> datetime | None:
    times = [t for t in (_time(s) for s in stamps) if t is not None]
    return min(times) if times else None


def _clip(text: str) -> str | None:
    if not text:
        return None
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"
