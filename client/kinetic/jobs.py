"""`kinetic.jobs`, where the reference API keeps its job handles and their functions.

Code written for the reference imports ``from kinetic.jobs import JobHandle,
attach, list_jobs`` (and ``attach_remote_traceback``, ``JobStatus``); this
module gives those names that path. The code is in `kinetic.api.jobs` (and
`kinetic.model.payload` for the traceback note); `kinetic.JobHandle` and the
others are the same objects.
"""

from __future__ import annotations

from kinetic.api.jobs import JobHandle, JobStatus, attach, list_jobs
from kinetic.model.payload import attach_remote_traceback

__all__ = ["JobHandle", "JobStatus", "attach", "attach_remote_traceback", "list_jobs"]
