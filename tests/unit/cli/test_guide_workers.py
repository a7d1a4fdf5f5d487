"""`kinetic batches submit`: the guide's ``distributed`` jobs become multi-host KineticJobs
(``workers`` is ``spec.hosts``), and the preview counts one accelerator per Pod."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kinetic.cli.guide import FRAMEWORKS
from kinetic.cli.submit_file import Document, Refusal, read_file
from kinetic.cli.submit_plan import accelerator_totals, preview_rows
from kinetic.model.limits import MAX_HOSTS


def distributed(name: str, **keys: Any) -> dict[str, Any]:
    return {
        "type": "distributed",
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.01",
        "command": "torchrun train.py",
        **keys,
    }


def submitted(job: dict[str, Any]) -> Document | Refusal:
    (entry,) = read_file(json.dumps({"jobs": [job]}), "team-a").entries
    return entry


def test_workers_are_the_jobs_hosts_rank_0_included() -> None:
    """The guide's "4 workers with 2 GPUs per worker": 4 Pods of 2 L4s, no extra master."""
    doc = submitted(distributed("dist", workers=4, gpus=2, gpu_type="l4", framework="pytorch"))
    assert isinstance(doc, Document), doc
    assert doc.body["spec"] == {
        "accelerator": "gpu-l4x2",
        "container": {
            "command": ["sh", "-c", "torchrun train.py"],
            "image": "nvcr.io/nvidia/pytorch:24.01",
        },
        "hosts": 4,
    }


@pytest.mark.parametrize("framework", [*FRAMEWORKS, None])
def test_every_documented_framework_is_accepted_alike(framework: str | None) -> None:
    job = distributed("dist", workers=2)
    if framework is not None:
        job["framework"] = framework
    doc = submitted(job)
    assert isinstance(doc, Document), doc
    assert doc.body["spec"]["hosts"] == 2


def test_a_training_job_has_no_hosts() -> None:
    doc = submitted({"type": "training", "name": "one", "command": "true"})
    assert isinstance(doc, Document) and "hosts" not in doc.body["spec"]


@pytest.mark.parametrize(
    "keys,says",
    [
        (
            {"workers": 2, "framework": "torch"},
            "jobs[0] (dist): framework: 'torch' is not one of pytorch, tensorflow, mpi, jax, "
            "xgboost; any of them runs the same way here",
        ),
        ({}, "jobs[0] (dist): workers is required for a distributed job"),
        ({"workers": 0}, "workers is 0; a job runs on at least 1 host: set it to 1 or more"),
        ({"workers": "4"}, "workers must be a whole number of hosts, at least 1; got '4'"),
        (
            {"workers": MAX_HOSTS + 1},
            f"workers is {MAX_HOSTS + 1}; the limit is {MAX_HOSTS} hosts per job: ask for fewer",
        ),
        ({"workers": 2, "replicas": 3}, "replicas: not a key of a distributed job"),
    ],
)
def test_a_distributed_job_that_cannot_run_is_refused_naming_the_field(
    keys: dict[str, Any], says: str
) -> None:
    refusal = submitted(distributed("dist", **keys))
    assert isinstance(refusal, Refusal), refusal
    assert says in f"{refusal.label}: {refusal.reason}"


# --------------------------------------------------------------------------- the preview


def job_doc(name: str, spec: dict[str, Any]) -> Document:
    body = {"kind": "KineticJob", "metadata": {"name": name}, "spec": spec}
    return Document(1, "KineticJob", name, "ns", body)


def test_the_preview_counts_one_accelerator_per_pod_but_one_per_slice() -> None:
    rows = preview_rows(
        [
            job_doc("gpus", {"accelerator": "gpu-l4x2", "hosts": 4}),
            job_doc("slice", {"accelerator": "tpu-v5e-16", "hosts": 4}),
            job_doc("slice-implied", {"accelerator": "tpu-v5e-16"}),
            job_doc("one", {"accelerator": "gpu-l4x2"}),
        ]
    )
    assert [r["accelerators"] for r in rows] == [
        {"gpu-l4x2": 4},
        {"tpu-v5e-16": 1},
        {"tpu-v5e-16": 1},
        {"gpu-l4x2": 1},
    ]
    assert accelerator_totals(rows) == {"gpu-l4x2": 5, "tpu-v5e-16": 2}


def test_a_batch_of_gangs_counts_pods_per_input() -> None:
    body = yaml.safe_load(
        """
kind: KineticBatch
metadata: {name: sweep}
spec:
  template: {accelerator: gpu-l4, hosts: 2, container: {command: ["true"]}}
  inputs: {items: [1, 2, 3]}
"""
    )
    (row,) = preview_rows([Document(1, "KineticBatch", "sweep", "ns", body)])
    assert (row["jobs"], row["accelerators"]) == (3, {"gpu-l4": 6})
