"""`kinetic batches submit`: reading documents, the preview and the per-job report (table tests)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kinetic.cli.submit_file import Document, DocumentError, Refusal, load_documents
from kinetic.cli.submit_plan import (
    accelerator_totals,
    all_succeeded,
    batch_report,
    job_report,
    preview_rows,
    refuse_images,
    unrecorded_endings,
    unseen_row,
)
from kinetic.model.policy_keys import SubmissionPolicy

API = "apiVersion: kinetic.dev/v1alpha1"

GRID = f"""
{API}
kind: KineticBatch
metadata: {{name: sweep, namespace: team-a}}
spec:
  template:
    accelerator: gpu-l4x2
    container: {{image: ghcr.io/acme/train:1, command: [python, train.py]}}
  inputs: {{grid: {{lr: [0.1, 0.01], depth: [2, 4, 8]}}}}
"""
ITEMS = f"""
{API}
kind: KineticBatch
metadata: {{name: items}}
spec:
  template: {{container: {{command: ["true"]}}}}
  inputs: {{items: [1, 2, 3, 4]}}
"""
JOB = f"""
{API}
kind: KineticJob
metadata: {{name: one}}
spec: {{accelerator: tpu-v5e-4, image: ghcr.io/acme/tpu:2, container: {{command: ["true"]}}}}
"""


def test_several_documents_preview_per_document_with_totals() -> None:
    docs = load_documents("---".join([GRID, ITEMS, JOB]), "default")
    rows = preview_rows(docs)
    assert rows == [
        {
            "kind": "KineticBatch",
            "name": "sweep",
            "namespace": "team-a",
            "jobs": 6,
            "images": ["ghcr.io/acme/train:1"],
            "accelerators": {"gpu-l4x2": 6},
        },
        {
            "kind": "KineticBatch",
            "name": "items",
            "namespace": "default",
            "jobs": 4,
            "images": ["(operator default)"],
            "accelerators": {"cpu": 4},
        },
        {
            "kind": "KineticJob",
            "name": "one",
            "namespace": "default",
            "jobs": 1,
            "images": ["ghcr.io/acme/tpu:2"],
            "accelerators": {"tpu-v5e-4": 1},
        },
    ]
    assert accelerator_totals(rows) == {"cpu": 4, "gpu-l4x2": 6, "tpu-v5e-4": 1}


def test_a_heterogeneous_batch_counts_each_job() -> None:
    text = f"""
{API}
kind: KineticBatch
metadata: {{name: mixed}}
spec:
  jobs:
    - {{accelerator: gpu-l4, container: {{image: a:1, command: ["true"]}}}}
    - {{accelerator: gpu-l4, container: {{image: b:1, command: ["true"]}}}}
    - {{container: {{command: ["true"]}}}}
"""
    # Built from the raw body: the preview does not depend on the model knowing spec.jobs.
    body = yaml.safe_load(text)
    rows = preview_rows([Document(1, "KineticBatch", "mixed", "ns", body)])
    assert rows[0]["jobs"] == 3
    assert rows[0]["accelerators"] == {"gpu-l4": 2, "cpu": 1}
    assert rows[0]["images"] == ["(operator default)", "a:1", "b:1"]


@pytest.mark.parametrize(
    "text,says",
    [
        ("", "the file holds no documents"),
        ("a: [unclosed", "not valid YAML"),
        (f"{API}\nkind: ConfigMap\nmetadata: {{name: x}}", "kind 'ConfigMap' cannot be submitted"),
        (
            "apiVersion: v1\nkind: KineticJob\nmetadata: {name: x}",
            "apiVersion must be kinetic.dev/v1alpha1",
        ),
        (
            f"{API}\nkind: KineticJob\nmetadata: {{}}\nspec: {{}}",
            "document 1 (KineticJob): metadata.name is required",
        ),
        (
            f"{API}\nkind: KineticJob\nmetadata: {{name: x}}\n"
            "spec: {retries: -1, container: {command: [a]}}",
            "document 1 (KineticJob/x): spec.retries: Input should be greater than or equal to 0",
        ),
        (
            ITEMS + "---\n" + f"{API}\nkind: KineticBatch\nmetadata: {{name: big}}\n"
            "spec: {template: {container: {command: [a]}}, inputs: {count: 2000000}}",
            "document 2 (KineticBatch/big): spec.inputs.count is 2,000,000 inputs",
        ),
    ],
)
def test_bad_documents_are_refused_locally_naming_the_document(text: str, says: str) -> None:
    with pytest.raises(DocumentError) as err:
        load_documents(text, "default")
    assert says in str(err.value)


def test_an_explicit_namespace_must_match_the_documents() -> None:
    assert [d.namespace for d in load_documents(ITEMS, "team-b", forced=True)] == ["team-b"]
    with pytest.raises(DocumentError, match="metadata.namespace 'team-a' does not match"):
        load_documents(GRID, "team-b", forced=True)


def rec(outcome: str, attempts: int, message: str | None = None) -> dict[str, Any]:
    return {"outcome": outcome, "attempts": [{}] * attempts, "message": message}


def test_the_batch_report_has_one_row_per_input() -> None:
    spec = {"template": {}, "inputs": {"items": [{"x": 1}, "b", "c", "d"]}}
    status = {
        "total": 4,
        "succeededIndexes": "0,2",
        "failedIndexes": "1",
        "phase": "FAILED",
    }
    records = {0: rec("SUCCEEDED", 1), 1: rec("FAILED", 3, "Traceback\nValueError: bad b")}
    assert batch_report(spec, status, records) == [
        {"index": 0, "input": '{"x": 1}', "outcome": "SUCCEEDED", "attempts": 1, "message": ""},
        {
            "index": 1,
            "input": '"b"',
            "outcome": "FAILED",
            "attempts": 3,
            "message": "ValueError: bad b",
        },
        # The status says it succeeded; the manifest has not caught up: no attempts known yet.
        {"index": 2, "input": '"c"', "outcome": "SUCCEEDED", "attempts": 0, "message": ""},
        {"index": 3, "input": '"d"', "outcome": "NOT_STARTED", "attempts": 0, "message": ""},
    ]


def test_grid_and_uploaded_inputs_are_labelled() -> None:
    grid = {"template": {}, "inputs": {"grid": {"b": [1, 2], "a": ["x"]}}}
    rows = batch_report(grid, {"total": 2, "succeededIndexes": "0-1"}, {})
    assert [r["input"] for r in rows] == ['{"a": "x", "b": 1}', '{"a": "x", "b": 2}']
    counted = {"template": {}, "inputs": {"count": 1, "uriPrefix": "gs://b/p"}}
    assert batch_report(counted, {"total": 1}, {})[0]["input"] == "input 0 (uploaded)"


@pytest.mark.parametrize(
    "reports,ok",
    [
        ([job_report({"phase": "SUCCEEDED", "attempt": 1})], True),
        ([job_report({"phase": "SUCCEEDED"}), job_report({"phase": "FAILED"})], False),
        (
            [
                batch_report(
                    {"inputs": {"items": [1, 2]}}, {"total": 2, "succeededIndexes": "0"}, {}
                )
            ],
            False,
        ),
        (
            [batch_report({"inputs": {"items": [1]}}, {"total": 1, "succeededIndexes": "0"}, {})],
            True,
        ),
        ([], False),
        (  # a batch whose end --wait never saw: its rows so far, and the unseen row
            [
                batch_report({"inputs": {"items": [1]}}, {"total": 1, "succeededIndexes": "0"}, {})
                + [unseen_row("KineticBatch/sweep in ns")]
            ],
            False,
        ),
    ],
)
def test_exit_status_is_success_only_if_every_job_succeeded(
    reports: list[list[dict[str, Any]]], ok: bool
) -> None:
    assert all_succeeded(reports) is ok


@pytest.mark.parametrize(
    "status, records, missing",
    [
        ({"succeededIndexes": "0-2"}, {0: {"attempts": [{}]}, 2: {"attempts": []}}, [1, 2]),
        ({"succeededIndexes": "0", "failedIndexes": "1"}, {0: {"attempts": [{}]}}, []),
        ({"cancelledIndexes": "0-9"}, {}, []),  # may never have run: nothing to wait for
        ({}, {}, []),
    ],
)
def test_a_report_waits_only_for_successes_the_manifest_has_not_recorded(status, records, missing):
    assert unrecorded_endings(status, records) == missing


# ----------------------------------------------------------------------- allowedImages


def test_the_preview_refuses_an_image_with_the_operators_rule_and_sentence() -> None:
    from kinetic.model.catalog import default_catalog
    from kinetic_operator.logic.policy import Policy, policy_violations

    docs = load_documents("---".join([GRID, ITEMS, JOB]), "default")
    allowed = ("ghcr.io/acme/train", "busybox")
    entries = refuse_images(
        list(docs), SubmissionPolicy(allowed_images=allowed), "runner:1", "kinetic-policy in x"
    )
    assert isinstance(entries[0], Document)  # ghcr.io/acme/train:1: allowed
    assert isinstance(entries[1], Document)  # no image: the operator's default
    refused = entries[2]
    assert isinstance(refused, Refusal) and refused.label == "KineticJob/one in default"
    operator = policy_violations(
        "KineticJob",
        "default",
        docs[2].body["spec"],
        Policy(allowed_images=allowed, source="kinetic-policy in x"),
        default_catalog(),
        "runner:1",
    )
    assert refused.reason == "; ".join(operator)
    assert "spec.image 'ghcr.io/acme/tpu:2' is not an allowed image" in refused.reason


@pytest.mark.parametrize(
    "allowed,refused",
    [
        ((), False),  # no list: any image
        (("*",), False),
        (("ghcr.io/acme",), False),
        (("ghcr.io/acme-other",), True),
        (("ghcr.io",), False),
        (("ghcr.io.evil.com",), True),
    ],
)
def test_the_preview_matches_whole_path_parts(allowed: tuple[str, ...], refused: bool) -> None:
    docs = load_documents(GRID, "default")
    entries = refuse_images(list(docs), SubmissionPolicy(allowed_images=allowed), None, "p")
    assert isinstance(entries[0], Refusal) is refused
