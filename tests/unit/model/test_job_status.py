"""`import kinetic.job_status` works as in the reference, and names the one JobStatus."""

from __future__ import annotations

import os
import subprocess
import sys

import kinetic
import kinetic.job_status
from kinetic.api.jobs import JobStatus as ApiJobStatus
from kinetic.job_status import JobStatus
from kinetic.model.job_status import JobStatus as ModelJobStatus


def test_the_module_and_the_package_name_the_same_class() -> None:
    assert kinetic.job_status.JobStatus is JobStatus
    assert kinetic.JobStatus is JobStatus
    assert ApiJobStatus is JobStatus is ModelJobStatus


def test_it_has_the_reference_statuses_and_their_values() -> None:
    for name in ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "NOT_FOUND"):
        assert JobStatus[name].value == name
    assert JobStatus("CANCELLED").terminal
    assert not JobStatus.RUNNING.terminal


def test_a_resource_gives_its_status() -> None:
    assert JobStatus.of(None) is JobStatus.NOT_FOUND
    assert JobStatus.of({"status": {}}) is JobStatus.PENDING
    assert JobStatus.of({"status": {"phase": "SUCCEEDED"}}) is JobStatus.SUCCEEDED


def test_importing_it_loads_neither_the_user_api_nor_the_kubernetes_client() -> None:
    code = (
        "import sys, kinetic.job_status\n"
        "print(sorted(m for m in ('kubernetes', 'kinetic.api', 'typer') if m in sys.modules))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]"
