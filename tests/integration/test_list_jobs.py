"""`kinetic.list_jobs` and `kinetic jobs list` with the inputs of batches (issue 20, item 2).

The reference lists every job with its group: here the inputs of a batch are
listed among the KineticJobs, newest first, each with ``group_id``,
``group_kind`` ("map") and ``group_index``, a page at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import kinetic
import pytest
from kinetic.api.jobs import JobStatus

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
