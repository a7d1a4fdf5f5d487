"""`kinetic.job_status.JobStatus`, where the reference API keeps it.

The enum lives in the model (`kinetic.model.job_status`); this module only
gives it the reference's import path. Importing it loads neither the user API
nor the Kubernetes client. `kinetic.JobStatus` is the same class.
"""

from __future__ import annotations

from kinetic.model.job_status import JobStatus

__all__ = ["JobStatus"]
