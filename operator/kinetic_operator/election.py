"""Leader election's thin layer: the Lease's reads and guarded writes, and the loop.

The decisions are `kinetic_operator.leader`'s; this module only talks to the
API server (`LeaseStore`) and keeps the clock (`Elector`). Work in progress:
the start-up that runs Kopf's reconciliation only while `Elector.leading` is
the next step (see the branch's plan).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kinetic.model.names import fmt_micro_time
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kinetic_operator.leader import (
    LeaseRecord,
    Move,
    Observation,
    Timings,
    next_move,
    observe,
    record_after,
    released,
    still_leading,
)

log = logging.getLogger("kinetic.operator")

LEASE_NAME = "kinetic-operator-leader"


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
    name: str = LEASE_NAME

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


@dataclass
class Elector:
    """One replica's side of the election: `step` every ``retry_period``."""

    store: Store
    me: str
    timings: Timings = Timings()
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = lambda: datetime.now(UTC)
    seen: Observation | None = None
    last_renewed: float | None = None

    @property
    def leading(self) -> bool:
        """Whether this replica may act as the leader now (within its renew deadline)."""
        return self.last_renewed is not None and still_leading(
            self.last_renewed, self.clock(), self.timings
        )

    def step(self) -> bool:
        """Read the Lease, make the next move, and say whether this replica leads."""
        record, version = self.store.read()
        now = self.clock()
        self.seen = observe(self.seen, record, version, now)
        move = next_move(self.seen, self.me, now, self.timings)
        if move is not Move.WAIT:
            new = record_after(move, record, self.me, self.wall(), self.timings)
            if self.store.write(new, version):
                self.last_renewed = now
                if move is not Move.RENEW:
                    log.info("Leading (Lease %s, transition %d).", move.value, new.transitions)
        return self.leading

    def release(self) -> None:
        """On a clean shutdown: hand the Lease over at once (only if it is still ours)."""
        record, version = self.store.read()
        if record is not None and record.holder == self.me:
            self.store.write(released(record, self.wall()), version)
        self.last_renewed = None
