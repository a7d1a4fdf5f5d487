"""`JobStatus`: the status a user sees of one job or one input of a batch.

Pure (no client, no I/O), so anything may name it: the user API's handles,
the CLI, and code running in a Pod, without loading the Kubernetes client.
The public import path is `kinetic.job_status` (the reference's), and
`kinetic.JobStatus` is the same class.
"""

from __future__ import annotations

import enum


class JobStatus(enum.Enum):
    """What a user sees of a job. NOT_FOUND: the resource no longer exists."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NOT_FOUND = "NOT_FOUND"

    @property
    def terminal(self) -> bool:
        return self is not JobStatus.PENDING and self is not JobStatus.RUNNING

    @classmethod
    def of(cls, obj: dict | None) -> JobStatus:
        """The status of a KineticJob as the API server returned it (None: it is gone)."""
        if obj is None:
            return cls.NOT_FOUND
        return cls(obj.get("status", {}).get("phase") or "PENDING")
