"""A gang's hosts seen from the laptop: checking ``hosts=`` before any upload, and how many
members (and which Pod of each rank) a recorded attempt had, to read their logs."""

from __future__ import annotations

from typing import Any

from kinetic.model import catalog, gang


def check_hosts(hosts: object, accelerator: str) -> None:
    """Refuse a ``hosts=`` the operator would refuse, now rather than after an upload.

    The built-in catalog says how many hosts a multi-host TPU slice has; an
    accelerator only the cluster's own catalog knows is left to the operator,
    which checks it again against that catalog (and the policy's maxHostsPerJob).
    """
    problems = gang.hosts_problems(hosts, accelerator, catalog.default_catalog(), None, "hosts")
    if problems:
        raise ValueError("; ".join(problems))


def hosts_of(spec: dict[str, Any], attempt: dict[str, Any] | None) -> int:
    """Pods per attempt of a job with this spec: what it asks (``hosts``, else its
    accelerator's host count in the built-in catalog), or more when ``attempt`` recorded
    more members (an accelerator only the cluster's own catalog knows counts as 1 here)."""
    asked = gang.effective_hosts(
        spec.get("hosts"), catalog.default_catalog(), spec.get("accelerator")
    )
    return max(asked, recorded_hosts(attempt))


def recorded_hosts(attempt: dict[str, Any] | None) -> int:
    """Hosts of a recorded attempt: one past its highest member rank, 1 with no members."""
    members = (attempt or {}).get("members") or []
    return max((int(m.get("rank", 0)) + 1 for m in members), default=1)


def member_pod(attempt: dict[str, Any], rank: int, hosts: int) -> str:
    """The Pod that ran rank ``rank`` of a recorded attempt (its log is archived under that
    name): the member's own record, else the gang's naming rule over ``hosts``."""
    for member in attempt.get("members") or []:
        if member.get("rank") == rank and member.get("pod"):
            return str(member["pod"])
    return gang.member_pod_names(str(attempt["pod"]), max(hosts, rank + 1))[rank]


def rank_problem(job_id: str, rank: object, hosts: int) -> str | None:
    """Why job ``job_id`` (on ``hosts`` hosts) has no log of rank ``rank``, or None."""
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < hosts:
        return None
    if hosts == 1:
        return (
            f"rank={rank!r}: job {job_id} runs on 1 host, so its only rank is 0: "
            "leave rank out (or pass 0)"
        )
    return (
        f"rank={rank!r}: job {job_id} runs on {hosts} hosts, ranks 0 to {hosts - 1}: "
        f"pass a rank in that range (0, the coordinator, is the default)"
    )
