"""`kinetic batches submit -f FILE` against the real cluster, as a user runs it from a shell.

Preview and dry run create nothing; without a terminal and without --yes
nothing is created (past the policy's dryRunDefault, with --no-dry-run); the
server-side dry run surfaces the webhook's policy refusal; `--yes --wait`
submits several documents, follows them and ends with a per-job report whose
exit status says whether every job succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from kinetic_testing.cluster import EFFECT_SECONDS, batch_json, refused, stored, submit
from kube_helpers import Kube, wait_for

pytestmark = pytest.mark.integration

API = "kinetic.dev/v1alpha1"


def documents(ns: str, fail_index: int | None = None) -> str:
    """A batch over three items (input ``fail_index`` exits 1) and a KineticJob."""
    check = f'test "$KINETIC_INDEX" != {fail_index}' if fail_index is not None else "true"
    return f"""
apiVersion: {API}
kind: KineticBatch
metadata: {{name: sweep, namespace: {ns}}}
spec:
  template:
    container: {{image: busybox:1, command: [sh, -c, '{check}']}}
  inputs: {{items: [{{lr: 0.1}}, {{lr: 0.01}}, {{lr: 0.001}}]}}
---
apiVersion: {API}
kind: KineticJob
metadata: {{name: single, namespace: {ns}}}
spec: {{accelerator: cpu, container: {{command: ["true"]}}}}
"""


def test_dry_run_previews_and_creates_nothing(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    out = submit(tmp_path, client_env, documents(namespace), "--dry-run")
    assert out.returncode == 0, out.stderr
    for text in (
        "KineticBatch",
        "sweep",
        "KineticJob",
        "single",
        namespace,
        "busybox:1",
        "(operator default)",
        "Total: 4 x cpu",
        "nothing was created",
    ):
        assert text in out.stdout, (text, out.stdout)
    assert stored(kube, namespace) == []


def test_no_terminal_and_no_yes_means_no(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    # --no-dry-run: past the policy's dryRunDefault (a preview first), to the question.
    out = submit(tmp_path, client_env, documents(namespace), "--no-dry-run")
    assert out.returncode == 1
    assert "sweep" in out.stdout  # the preview was shown
    assert "nothing was submitted" in out.stderr
    assert stored(kube, namespace) == []


def test_a_local_error_names_the_document_and_field(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    bad = documents(namespace).replace("accelerator: cpu", "accelerator: cpu, retries: -1")
    out = submit(tmp_path, client_env, bad, "--yes")
    assert out.returncode == 1
    assert "document 2 (KineticJob/single): spec.retries" in out.stdout + out.stderr
    # The guide's continue_on_error (true by default): the valid batch was still created.
    assert stored(kube, namespace) == ["kineticbatch.kinetic.dev/sweep"]


def test_the_server_dry_run_applies_the_policy(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: Callable[[dict[str, str]], None],
) -> None:
    policy({"maxBatchSize": "2"})
    wait_for(
        lambda: refused(kube, batch_json("b", namespace, 3)), timeout=EFFECT_SECONDS, what="edit"
    )
    out = submit(tmp_path, client_env, documents(namespace), "--yes", "--stop-on-error")
    assert out.returncode == 1
    said = out.stdout + out.stderr
    assert f"KineticBatch/sweep in {namespace}" in said
    assert "batch size 3 exceeds maxBatchSize 2 (kinetic-policy in kinetic-system)" in said
    assert stored(kube, namespace) == []  # the batch is first: nothing before it to create


@pytest.mark.parametrize("fail_index,code", [(None, 0), (1, 1)])
def test_yes_wait_reports_every_job_and_exits_by_outcome(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    fail_index: int | None,
    code: int,
) -> None:
    out = submit(tmp_path, client_env, documents(namespace, fail_index), "--yes", "--wait")
    assert out.returncode == code, out.stdout + out.stderr
    assert sorted(stored(kube, namespace)) == [
        "kineticbatch.kinetic.dev/sweep",
        "kineticjob.kinetic.dev/single",
    ]
    lines = out.stdout.splitlines()
    for i, lr in enumerate(("0.1", "0.01", "0.001")):
        row = next((line for line in lines if f'{{"lr": {lr}}}' in line), None)
        assert row is not None, f"no report row for lr={lr}:\n{out.stdout}"
        outcome = "FAILED" if i == fail_index else "SUCCEEDED"
        assert outcome in row and f" {i} " in f" {row} ", row
        assert " 1 " in row  # one attempt each
    assert f"KineticJob/single in {namespace}: SUCCEEDED" in out.stdout
    status = json.loads(
        kube.kubectl(
            "get", "kineticbatch", "sweep", "-n", namespace, "-o", "jsonpath={.status}"
        ).stdout
    )
    assert status["phase"] == ("SUCCEEDED" if fail_index is None else "FAILED")
