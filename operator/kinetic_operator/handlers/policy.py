"""Keeps the ``kinetic-policy`` ConfigMap's policy in memory, read live.

The operator polls the one ConfigMap by name (GET every
``KINETIC_POLICY_POLL_SECONDS``) instead of watching ConfigMaps: a watch
by Kopf would be cluster-wide (Kopf watches every resource in the
namespaces it serves) and need a cluster-wide ConfigMap permission; a GET
of one name needs only a Role in the operator's namespace with that
resourceName. The parsed policy lives in Kopf's memo, where the webhook and
the reconcilers read it.

A ConfigMap that does not parse keeps the last good policy: the operator
logs the error and posts a Warning Event ``InvalidPolicy`` on the
ConfigMap (`kubectl describe configmap kinetic-policy` shows it), once per
version of the ConfigMap. A missing ConfigMap means no policy. Until the
first good read the policy is unknown (`policy.UnreadPolicy`): the operator
accepts nothing new meanwhile, and each object waiting says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from kinetic_operator.failures import describe
from kinetic_operator.kube import Kube
from kinetic_operator.logic.policy import (
    Policy,
    UnreadPolicy,
    policy_after_error,
    policy_after_read,
)
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import OperatorState, operator_state

log = logging.getLogger("kinetic.operator")


@dataclass
class PolicyHolder:
    """The policy in force, and what the last read of its ConfigMap said."""

    policy: Policy = field(default_factory=UnreadPolicy)
    version: str | None = None  # resourceVersion last judged ("" when missing)
    failing: str | None = None  # the last read error, logged once
    task: asyncio.Task[None] | None = None


def policy_holder(memo: Any) -> PolicyHolder:
    """The holder in Kopf's memo (created on first use, e.g. by a direct caller)."""
    holder = getattr(memo, "kinetic_policy", None) if memo is not None else None
    if holder is None:
        holder = PolicyHolder(policy=UnreadPolicy(source=_source(operator_state(memo).settings)))
        if memo is not None:
            memo.kinetic_policy = holder
    return holder


def current_policy(memo: Any) -> Policy:
    """The policy the webhook and the operator judge by right now."""
    return policy_holder(memo).policy


def _source(ours: OperatorSettings) -> str:
    return f"{ours.policy_config_map} in {ours.operator_namespace}"


def refresh(holder: PolicyHolder, kube: Kube, ours: OperatorSettings) -> None:
    """Read the ConfigMap once and update ``holder``; never raises (the poll goes on)."""
    source = _source(ours)
    try:
        cm = kube.read_config_map(ours.operator_namespace, ours.policy_config_map)
    except Exception as exc:  # noqa: BLE001 — keep the policy in force, say why once
        if holder.failing != describe(exc):  # not str(exc): it carries the reply's Date
            unread = isinstance(holder.policy, UnreadPolicy)
            kept = "nothing new is accepted" if unread else "the policy in force stays"
            log.warning("Cannot read %s (%s): %s", source, kept, describe(exc))
            holder.failing = describe(exc)
        holder.policy = policy_after_error(holder.policy, f"reading it failed: {describe(exc)}")
        return
    holder.failing = None
    version = "" if cm is None else (cm.get("metadata") or {}).get("resourceVersion") or ""
    if version == holder.version:
        return
    holder.version = version
    holder.policy, error = policy_after_read(cm, holder.policy, source)
    if error is not None:
        log.error("Invalid policy: %s", error)
        kube.post_event(cm or {}, "Warning", "InvalidPolicy", error)
        return
    if cm is None:
        log.info("No ConfigMap %s: no admission policy", source)
    else:
        log.info("Admission policy from %s: %s", source, holder.policy.model_dump(by_alias=True))


async def _poll(holder: PolicyHolder, state: OperatorState) -> None:
    while True:
        await asyncio.sleep(state.settings.policy_poll_seconds)
        await asyncio.to_thread(refresh, holder, state.kube, state.settings)


@kopf.on.startup()
async def load_policy(memo: kopf.Memo, **_: Any) -> None:
    """Read the policy before the webhook serves, then keep reading it in the background."""
    state = operator_state(memo)
    holder = policy_holder(memo)
    await asyncio.to_thread(refresh, holder, state.kube, state.settings)
    holder.task = asyncio.create_task(_poll(holder, state))


@kopf.on.cleanup()
async def stop_policy(memo: kopf.Memo, **_: Any) -> None:
    task = policy_holder(memo).task
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
