"""A container job may leave its command out: the image's own entrypoint runs (issue 32).

The batch-submission guide makes ``command`` optional; a KineticJob's
``container.command`` is optional too, and the Pod the operator builds then
names no command, so the kubelet runs the image's entrypoint with ``args``.
"""

from __future__ import annotations

import pytest
from kinetic.model.catalog import default_catalog
from kinetic.model.resources import KineticJobSpec
from kinetic_operator.logic.job_logic import validate_spec
from kinetic_operator.logic.podspec import Owner, build_job_pod
from kinetic_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(
    storage_root="gs://kinetic/root",
    default_image="runner:1",
    runner_image="kinetic-runner:7",
    runner_pythons=["3.12"],
    runner_service_account="kinetic-runner",
    runner_command=["python", "-m", "kinetic.runtime.runner"],
)


@pytest.mark.parametrize(
    "container,args",
    [
        ({"image": "pytorch/pytorch:latest"}, None),
        ({"image": "trainer:1", "args": ["--lr", "1"]}, ["--lr", "1"]),
    ],
)
def test_a_container_without_a_command_runs_its_images_entrypoint(
    container: dict[str, object], args: list[str] | None
) -> None:
    raw = {"container": container}
    spec = validate_spec("kj", raw, default_catalog(), storage_root=None, max_disruptions=3)
    assert isinstance(spec, KineticJobSpec), spec  # not an InvalidSpec
    pod = build_job_pod(Owner(name="kj", namespace="ns", uid="u"), spec, SETTINGS, 1)
    [made] = pod["spec"]["containers"]
    assert made["image"] == container["image"]
    assert not made.get("command")  # empty: the API server stores none, the entrypoint runs
    assert made.get("args") == args
