"""The batch-submission guide's three example requests, as the guide writes them.

Each is read as `kinetic batches submit -f` reads it, with the policy's
``defaultGpuType`` (the guide's jobs count GPUs and name no type) and with
none; what comes out is the objects the command would create: names,
namespaces, images, accelerators, hosts. The requests are in
tests/guide_examples.py; the same ones are submitted to the live cluster in
tests/integration/test_submit_guide.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from guide_examples import ACROSS, MIXED, PYTORCH, SEVERAL
from kinetic.cli.guide import RequestSettings
from kinetic.cli.submit_file import Document, Refusal, read_file
from kinetic.cli.submit_plan import accelerator_totals, decide, preview_rows
from kinetic.model.policy_keys import SubmissionPolicy


def entries(request: dict[str, Any], default_gpu_type: str | None = "l4") -> list[Any]:
    contents = read_file(json.dumps(request), "default", default_gpu_type=default_gpu_type)
    assert contents.settings == RequestSettings(dry_run=False, confirmed=True)
    return contents.entries


def objects(found: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, name, spec) of each object; refusals as ("refused", label, {reason})."""
    out = []
    for e in found:
        if isinstance(e, Document):
            out.append((e.namespace, e.name, e.body["spec"]))
        else:
            out.append(("refused", e.label, {"reason": e.reason}))
    return out


def container(image: str) -> dict[str, Any]:
    """A guide job's container: its image, no command (the image's entrypoint runs)."""
    return {"image": image}


def test_example_1_several_training_jobs() -> None:
    found = entries(SEVERAL)
    assert objects(found) == [
        ("project-01", "job1", {"accelerator": "gpu-l4x2", "container": container(PYTORCH)}),
        ("project-01", "job2", {"accelerator": "gpu-l4", "container": container(PYTORCH)}),
        (
            "project-01",
            "job3",
            {"accelerator": "gpu-l4x4", "container": container("tensorflow/tensorflow:latest")},
        ),
    ]
    rows = preview_rows([e for e in found if isinstance(e, Document)])
    assert accelerator_totals(rows) == {"gpu-l4": 1, "gpu-l4x2": 1, "gpu-l4x4": 1}  # 7 GPUs


def test_example_2_mixed_types_refuses_only_the_workspace_naming_it() -> None:
    found = entries(MIXED)
    assert objects(found)[:2] == [
        (
            "project-01",
            "model-training",
            {"accelerator": "gpu-l4x2", "container": container(PYTORCH)},
        ),
        (
            "project-01",
            "dist-training",
            {
                "accelerator": "gpu-l4x2",
                "container": container("nvcr.io/nvidia/pytorch:latest"),
                "hosts": 4,
            },
        ),
    ]
    workspace = found[2]
    assert isinstance(workspace, Refusal)
    assert workspace.label == "jobs[2] (analysis)"
    assert workspace.reason.startswith(
        "type 'workspace' cannot be submitted: a workspace is interactive"
    )
    rows = preview_rows([e for e in found if isinstance(e, Document)])
    assert accelerator_totals(rows) == {"gpu-l4x2": 5}  # 1 + 4 hosts: 10 GPUs


def test_example_3_across_projects_goes_to_each_projects_namespace() -> None:
    assert objects(entries(ACROSS)) == [
        ("project-01", "job-a", {"accelerator": "gpu-l4x2", "container": container(PYTORCH)}),
        ("project-02", "job-b", {"accelerator": "gpu-l4x4", "container": container(PYTORCH)}),
        ("project-03", "job-c", {"accelerator": "gpu-l4", "container": container(PYTORCH)}),
    ]


@pytest.mark.parametrize("request_", [SEVERAL, MIXED, ACROSS], ids=["1", "2", "3"])
def test_without_a_default_gpu_type_each_gpu_job_is_refused_with_both_fixes(
    request_: dict[str, Any],
) -> None:
    for e in entries(request_, default_gpu_type=None):
        assert isinstance(e, Refusal)
        assert (
            "of which type? Add gpu_type (one of: a100, h100, l4, t4), or ask the "
            "administrator to set defaultGpuType in the policy" in e.reason
        ) or e.reason.startswith("type 'workspace' cannot be submitted")


def test_the_examples_submit_at_once_as_they_say_under_the_default_policy() -> None:
    """dry_run: false and confirmed: true: created without a question, unless the
    administrator's requireConfirmation wants a person."""
    settings = RequestSettings(dry_run=False, confirmed=True)
    chosen = decide(None, False, settings, SubmissionPolicy())
    assert not chosen.dry_run and not chosen.ask
    asked = decide(None, False, settings, SubmissionPolicy(require_confirmation=True))
    assert not asked.dry_run and asked.ask and asked.person_required
