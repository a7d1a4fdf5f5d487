"""`kinetic.list_jobs` and `kinetic jobs list` with the inputs of batches (issue 20, item 2).

The reference lists every job with its group: here the inputs of a batch are
listed among the KineticJobs, newest first, each with ``group_id``,
``group_kind`` ("map") and ``group_index``, a page at a time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import kinetic
import pytest
from kinetic.api.jobs import JobStatus
from kube_helpers import wait_for

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("kinetic"))


def test_batch_inputs_are_listed_among_the_jobs_newest_first_and_paged(
    namespace: str, client_env: dict[str, str]
) -> None:
    ns = namespace

    @kinetic.run(namespace=ns)
    def noop() -> int:
        return 0

    older = noop.run_async().job_id
    time.sleep(1.1)  # creation timestamps have a resolution of one second
    batch = kinetic.batch(
        [kinetic.container(["true"], image="busybox") for _ in range(3)], namespace=ns
    )
    time.sleep(1.1)
    newer = noop.run_async().job_id
    inputs = [f"{batch.group_id}-{i}" for i in range(3)]

    handles = kinetic.list_jobs(namespace=ns)
    assert [h.job_id for h in handles] == [newer, *inputs, older]
    grouped = [(h.group_id, h.group_kind, h.group_index) for h in handles]
    assert grouped == [
        (None, None, None),
        *[(batch.group_id, "map", i) for i in range(3)],
        (None, None, None),
    ]
    # A listed input is a working handle: it answers from its batch.
    assert handles[1].wait(timeout=240) is JobStatus.SUCCEEDED

    # A page: at most `limit` from `offset`; and without the batches, only KineticJobs.
    page = kinetic.list_jobs(namespace=ns, limit=2, offset=1)
    assert [h.job_id for h in page] == inputs[:2]
    assert [h.job_id for h in kinetic.list_jobs(namespace=ns, include_batches=False)] == [
        newer,
        older,
    ]

    # The CLI pages the same list and says where the next page is.
    out = subprocess.run(
        [CLI, "jobs", "list", "-n", ns, "--limit", "2", "--page", "2", "-o", "json"],
        env=client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["job_id"], r["group"], r["index"]) for r in rows] == [
        (inputs[1], batch.group_id, 1),
        (inputs[2], batch.group_id, 2),
    ]
    assert all(r["phase"] in ("PENDING", "RUNNING", "SUCCEEDED") for r in rows)
    table = subprocess.run(
        [CLI, "jobs", "list", "-n", ns, "--limit", "2"],
        env=client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "--page 2" in table.stdout


def test_each_input_shows_its_own_attempt_message_and_function_in_80_columns(
    namespace: str, client_env: dict[str, str]
) -> None:
    """A failed input used to show ATTEMPT 0 and no message (``jobs status`` said attempt
    2), every input of a mixed batch the functions of all, and the table did not fit."""
    ns = namespace

    @kinetic.run(namespace=ns)
    def noop() -> int:
        return 0

    failing = ["sh", "-c", "echo no >&2; exit 3"]
    batch = kinetic.batch(
        [noop.call(), kinetic.container(failing, image="busybox", retries=1)], namespace=ns
    )
    batch.wait(timeout=240)
    env = client_env | {"COLUMNS": "80"}

    def listed() -> list[dict]:
        out = subprocess.run(
            [CLI, "jobs", "list", "-n", ns, "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    # The manifest records the failure's message a few seconds after the batch ends.
    rows = wait_for(
        lambda: (found := listed()) and found[1].get("message") and found,
        timeout=60,
        what="the failed input's message in `kinetic jobs list`",
    )
    ok, failed = rows
    assert (ok["job_id"], ok["function"], ok["phase"], ok["attempt"]) == (
        f"{batch.group_id}-0",
        "noop",
        "SUCCEEDED",
        1,
    )
    assert (failed["function"], failed["phase"], failed["attempt"]) == (
        " ".join(failing),
        "FAILED",
        2,
    )
    assert "exit code 3" in failed["message"]
    status = subprocess.run(
        [CLI, "jobs", "status", failed["job_id"], "-n", ns, "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(status.stdout)["attempt"] == failed["attempt"]

    table = subprocess.run(
        [CLI, "jobs", "list", "-n", ns], env=env, capture_output=True, text=True, timeout=120
    )
    lines = table.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), table.stdout
    assert next(line for line in lines if line.startswith("ID")).split() == [
        "ID",
        "FUNCTION",
        "PHASE",
        "ATTEMPT",
        "AGE",
        "MESSAGE",
    ]
    row = next(line for line in lines if line.startswith(f"{failed['job_id']} "))  # id whole
    assert re.search(r"\sFAILED\s+2\s", row), row
