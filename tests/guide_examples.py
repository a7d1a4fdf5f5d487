"""The batch-submission guide's three example requests, as the guide writes them.

Shared by the unit tests (tests/unit/cli/test_submit_guide_examples.py: what
`kinetic batches submit` reads from them) and the live ones
(tests/integration/test_submit_guide.py: what it creates). The values are
the guide's; only `with_projects` changes anything, the projects' names, for
a cluster where those namespaces are a test's own.
"""

from __future__ import annotations

import copy
from typing import Any

PYTORCH = "pytorch/pytorch:latest"
SUBMIT = {"dry_run": False, "confirmed": True}  # how every example ends


def training(name: str, project: str, image: str, gpus: int) -> dict[str, Any]:
    return {"type": "training", "name": name, "project": project, "image": image, "gpus": gpus}


# Example 1: several training jobs in one project.
SEVERAL: dict[str, Any] = {
    "jobs": [
        training("job1", "project-01", PYTORCH, 2),
        training("job2", "project-01", PYTORCH, 1),
        training("job3", "project-01", "tensorflow/tensorflow:latest", 4),
    ],
    **SUBMIT,
}

# Example 2: a training job, a distributed one and a workspace.
MIXED: dict[str, Any] = {
    "jobs": [
        training("model-training", "project-01", PYTORCH, 2),
        {
            "type": "distributed",
            "name": "dist-training",
            "project": "project-01",
            "image": "nvcr.io/nvidia/pytorch:latest",
            "workers": 4,
            "gpus": 2,
            "framework": "pytorch",
        },
        {
            "type": "workspace",
            "name": "analysis",
            "project": "project-01",
            "image": "jupyter/scipy-notebook",
            "gpus": 1,
            "workspace_type": "jupyter",
        },
    ],
    **SUBMIT,
}

# Example 3: the same kind of job across projects.
ACROSS: dict[str, Any] = {
    "jobs": [
        training("job-a", "project-01", PYTORCH, 2),
        training("job-b", "project-02", PYTORCH, 4),
        training("job-c", "project-03", PYTORCH, 1),
    ],
    **SUBMIT,
}

EXAMPLES = {"several": SEVERAL, "mixed": MIXED, "across": ACROSS}


def with_projects(request: dict[str, Any], projects: dict[str, str]) -> dict[str, Any]:
    """The request with each job's project renamed as ``projects`` says, nothing else."""
    renamed = copy.deepcopy(request)
    for job in renamed["jobs"]:
        job["project"] = projects.get(job["project"], job["project"])
    return renamed
