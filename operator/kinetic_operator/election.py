"""Leader election's thin layer: the Lease's reads and guarded writes, and the loop.

The decisions are `kinetic_operator.logic.leader`'s; this module only talks to the
API server (`LeaseStore`) and keeps the clock (`Elector`). `kinetic_operator.elected`
runs Kopf's reconciliation only while `Elector.leading`, and fences every
write the reconciler makes with `Elector.require`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, Protocol

from kinetic.model.names import LEADER_ELECTION_FLAG, LEADER_LEASE, fmt_micro_time
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kinetic_operator.logic.leader import (
    LeaseRecord,
    Move,
    Observation,
    Timings,
    next_look,
    next_move,
    observe,
    record_after,
    released,
    still_leading,
)

log = logging.getLogger("kinetic.operator")


class Store(Protocol):
    """Where the Lease lives: reads give its record and resourceVersion; a write names the
    version it read and fails (False) when the Lease has changed since, as the API server does."""

    def read(self) -> tuple[LeaseRecord | None, str | None]: ...

    def write(self, record: LeaseRecord, version: str | None) -> bool: ...


@dataclass
class LeaseStore:
    """The operator's Lease in its own namespace (coordination.k8s.io/v1)."""

    api: client.ApiClient
    namespace: str
    name: str = LEADER_LEASE

    def _coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    def read(self) -> tuple[LeaseRecord | None, str | None]:
        try:
            lease = self._coordination().read_namespaced_lease(self.name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None, None
            raise
        spec = lease.spec
        record = LeaseRecord(
            holder=spec.holder_identity or "",
            lease_duration_seconds=spec.lease_duration_seconds or 0,
            acquire_time=_stamp(spec.acquire_time),
            renew_time=_stamp(spec.renew_time),
            transitions=spec.lease_transitions or 0,
        )
        return record, lease.metadata.resource_version

    def write(self, record: LeaseRecord, version: str | None) -> bool:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.lease_duration_seconds,
                "acquireTime": record.acquire_time,
                "renewTime": record.renew_time,
                "leaseTransitions": record.transitions,
            },
        }
        try:
            if version is None:
                self._coordination().create_namespaced_lease(self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = version
                self._coordination().replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as e:
            if e.status == 409:  # changed since it was read, or created by the other replica
                return False
            raise
        return True


def _stamp(value: Any) -> str | None:
    """The client gives MicroTimes as datetimes (or strings); the record keeps the text."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return fmt_micro_time(value)
    return str(value)


class Resigned(Exception):
    """A write refused because this replica is handing the Lease over (a clean shutdown)."""


# The exit status of a replica that lost the Lease: the kubelet restarts it as a standby.
LOST_EXIT = 3


def lose(why: str) -> NoReturn:
    """Stop at once, as controller-runtime's managers do: no cleanup, no further write.

    Everything a reconcile had in flight is redone by the next leader from the
    resources (the truth is in them, not in this process), so exiting costs
    nothing but the restart; acting on could put two writers on one object.
    """
    log.critical("Lost the leader Lease (%s): exiting so that only one replica acts.", why)
    logging.shutdown()
    os._exit(LOST_EXIT)


ELECTED_FLAG = LEADER_ELECTION_FLAG
OPERATOR_SELECTOR = "app.kubernetes.io/name=kinetic"  # the chart's label on the operator's Pods


def unelected_operators(pods: list[dict[str, Any]]) -> list[str]:
    """The operator Pods among ``pods`` that reconcile without leader election and may
    still act: an older chart's, rolled out beside the new replicas on an upgrade."""
    found = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        commands = [
            [*(c.get("command") or []), *(c.get("args") or [])]
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        if commands and not any(ELECTED_FLAG in command for command in commands):
            found.append(str(meta.get("name")))
    return found


@dataclass
class PeerCheck:
    """Whether an unelected operator (an older chart's) still runs in the namespace."""

    api: client.ApiClient
    namespace: str

    def blocking(self) -> list[str]:
        """The unelected operator Pods still running; none when they cannot be listed
        (a chart without the Pod rule): an operator that could never lead would be worse
        than the few seconds of overlap this guards an upgrade against."""
        try:
            pods = client.CoreV1Api(self.api).list_namespaced_pod(
                self.namespace, label_selector=OPERATOR_SELECTOR, _preload_content=False
            )
        except ApiException as exc:
            log.warning(
                "Cannot list the operator's Pods (%s): not waiting for older ones.", exc.reason
            )
            return []
        return unelected_operators(json.loads(pods.data).get("items") or [])


@dataclass
class Elector:
    """One replica's side of the election: `step` every `pause` seconds."""

    store: Store
    me: str
    # Pods that must be gone before this replica may take the lead (see `PeerCheck`).
    blockers: Callable[[], list[str]] = lambda: []
    timings: Timings = Timings()
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = lambda: datetime.now(UTC)
    seen: Observation | None = None
    last_renewed: float | None = None
    resigned: bool = False

    @property
    def leading(self) -> bool:
        """Whether this replica may act as the leader now (within its renew deadline)."""
        return (
            not self.resigned
            and self.last_renewed is not None
            and still_leading(self.last_renewed, self.clock(), self.timings)
        )

    @property
    def has_led(self) -> bool:
        return self.last_renewed is not None

    def step(self) -> bool:
        """Read the Lease, make the next move, and say whether this replica leads.

        The time of a successful write is taken *before* the read: the renew
        deadline then runs from no later than the moment the API server could
        have seen the write, never from after it.
        """
        now = self.clock()
        record, version = self.store.read()
        self.seen = observe(self.seen, record, version, now)
        if record is None or record.holder != self.me:
            self.last_renewed = None  # someone else holds it (or nobody): not ours to act on
        move = next_move(self.seen, self.me, now, self.timings)
        if move in (Move.CREATE, Move.TAKE) and (waiting := self.blockers()):
            log.info("Not leading while %s reconciles without leader election.", ", ".join(waiting))
            move = Move.WAIT
        if move is not Move.WAIT and not self.resigned:
            new = record_after(move, record, self.me, self.wall(), self.timings)
            if self.store.write(new, version):
                self.last_renewed = now
                if move is not Move.RENEW:
                    log.info("Leading (Lease %s, transition %d).", move.value, new.transitions)
        return self.leading

    def pause(self) -> float:
        """Seconds until the next `step`."""
        if self.seen is None:
            return 0.0
        return next_look(self.seen, self.me, self.clock(), self.timings)

    def require(self) -> None:
        """Called before every write the reconciler makes: only the leader writes.

        Past the renew deadline this replica may already have been replaced
        (a stall, a partition): it exits rather than write. While it hands the
        Lease over on a clean shutdown, writes are refused instead, so the
        shutdown can finish.
        """
        if self.resigned:
            raise Resigned("this replica is shutting down; the next leader redoes this")
        if not self.leading:
            lose("no renewal within the renew deadline before a write")

    def resign(self) -> None:
        """Stop acting as the leader from now on (a clean shutdown begins)."""
        self.resigned = True

    def release(self) -> None:
        """Hand the Lease over at once (only if it is still ours), after `resign`."""
        self.resign()
        record, version = self.store.read()
        if record is not None and record.holder == self.me:
            self.store.write(released(record, self.wall()), version)
            log.info("Released the leader Lease.")
        self.last_renewed = None
