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

Names are imported on first use, so the pod-side runner (`python -m
kinetic.runner`) does not pay for the Kubernetes client it never needs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "run": "kinetic.remote",
    "RemoteFunction": "kinetic.remote",
    "JobHandle": "kinetic.jobs",
    "JobStatus": "kinetic.jobs",
    "JobFailed": "kinetic.jobs",
    "JobCancelled": "kinetic.jobs",
    "attach": "kinetic.jobs",
    "list_jobs": "kinetic.jobs",
    "BatchHandle": "kinetic.batches",
    "BatchError": "kinetic.batches",
    "InputHandle": "kinetic.batches",
    "SubmissionError": "kinetic.batches",
    "attach_batch": "kinetic.batches",
    "list_batches": "kinetic.batches",
    "ConfigError": "kinetic.config",
    "Data": "kinetic.data",
    "RunnerError": "kinetic.payload",
    "UnknownAccelerator": "kinetic.catalog",
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
    "list_batches",
    "list_jobs",
    "run",
]

if TYPE_CHECKING:
    from kinetic.batches import (
        BatchError,
        BatchHandle,
        InputHandle,
        SubmissionError,
        attach_batch,
        list_batches,
    )
    from kinetic.catalog import UnknownAccelerator
    from kinetic.config import ConfigError
    from kinetic.data import Data
    from kinetic.jobs import JobCancelled, JobFailed, JobHandle, JobStatus, attach, list_jobs
    from kinetic.payload import RunnerError
    from kinetic.remote import RemoteFunction, run


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kinetic' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
