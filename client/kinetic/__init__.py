"""Kinetic: run Python functions and containers over many inputs on Kubernetes.

    import kinetic

    @kinetic.run(accelerator="cpu")
    def train(lr):
        ...

    train(0.01)                                  # blocks, returns the value
    job = train.run_async(0.01)                  # a JobHandle, at once
    batch = train.run_async_map([0.001, 0.01])   # a BatchHandle, at once
    batch.jobs[1].tail()                         # one input's handle: status, result, logs
    kinetic.attach(f"{batch.group_id}-1")        # the same input, from any process
    kinetic.batch([train.call(0.1), other.call("x"),       # different calls, one batch
                   kinetic.container(["echo", "hi"], image="busybox")])

Names are imported on first use, so the pod-side runner (`python -m
kinetic.runtime.runner`) does not pay for the Kubernetes client it never needs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Handles come through kinetic.api.jobs (they are defined in kinetic.api.handle): importing it
# loads every kind of handle, so `JobHandle.from_dict` can rebuild a saved input's handle too.
_EXPORTS = {
    "run": "kinetic.api.remote",
    "RemoteFunction": "kinetic.api.remote",
    "JobHandle": "kinetic.api.jobs",
    "JobStatus": "kinetic.job_status",
    "JobFailed": "kinetic.api.jobs",
    "JobCancelled": "kinetic.api.jobs",
    "attach": "kinetic.api.jobs",
    "list_jobs": "kinetic.api.jobs",
    "BatchHandle": "kinetic.api.batches",
    "BatchError": "kinetic.api.batches",
    "InputHandle": "kinetic.api.batches",
    "SubmissionError": "kinetic.api.batches",
    "attach_batch": "kinetic.api.batches",
    "list_batches": "kinetic.api.batches",
    "ConfigError": "kinetic.api.config",
    "Data": "kinetic.api.data",
    "RunnerError": "kinetic.model.payload",
    "UnknownAccelerator": "kinetic.model.catalog",
    "batch": "kinetic.api.mixed",
    "container": "kinetic.api.mixed",
}

__all__ = [
    "BatchError",
    "BatchHandle",
    "ConfigError",
    "Data",
    "InputHandle",
    "JobCancelled",
    "JobFailed",
    "JobHandle",
    "JobStatus",
    "RemoteFunction",
    "RunnerError",
    "SubmissionError",
    "UnknownAccelerator",
    "attach",
    "attach_batch",
    "batch",
    "container",
    "list_batches",
    "list_jobs",
    "run",
]

if TYPE_CHECKING:
    from kinetic.api.batches import (
        BatchError,
        BatchHandle,
        InputHandle,
        SubmissionError,
        attach_batch,
        list_batches,
    )
    from kinetic.api.config import ConfigError
    from kinetic.api.data import Data
    from kinetic.api.jobs import JobCancelled, JobFailed, JobHandle, attach, list_jobs
    from kinetic.api.mixed import batch, container
    from kinetic.api.remote import RemoteFunction, run
    from kinetic.job_status import JobStatus
    from kinetic.model.catalog import UnknownAccelerator
    from kinetic.model.payload import RunnerError


# The reference API's public submodules, reachable as attributes (`kinetic.debug.…`).
_SUBMODULES = frozenset({"debug", "job_status", "jobs"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f"kinetic.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kinetic' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
