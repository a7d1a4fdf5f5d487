"""`kinetic jobs list`: each input's own attempt, message and function, in 80 columns.

Failed batch inputs used to show ``ATTEMPT 0`` and no message although ``jobs
status`` said attempt 2; every input of a mixed batch showed every function of
its batch; and the nine-column table was unreadable in 80 columns.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from kinetic.api.batches import BatchHandle, InputOverview
from kinetic.api.handle import JobStatus
from kinetic.api.inputs import input_summary
from kinetic.cli.jobs import LIST_COLUMNS, _row
from kinetic.cli.output import age, narrow_table
from kinetic.model.manifest import InputRecord
from kinetic.model.resources import AttemptRecord
from rich.console import Console

GRP = "grp-0a1b2c3d"
DIVIDE = "Attempt 2 failed: Error, exit code 1: ZeroDivisionError: division by zero"


def failed_twice() -> InputRecord:
    return InputRecord(
        outcome="FAILED",
        attempts=[
            AttemptRecord(attempt=1, pod=f"{GRP}-2-1", outcome="failure", message="Attempt 1 …"),
            AttemptRecord(attempt=2, pod=f"{GRP}-2-2", outcome="failure", message=DIVIDE),
        ],
    )


# --------------------------------------------------------------------------- attempt and message


def test_a_failed_input_shows_its_last_attempt_and_why() -> None:
    assert input_summary(JobStatus.FAILED, failed_twice()) == {
        "phase": "FAILED",
        "attempt": 2,
        "message": DIVIDE,
    }


def test_the_records_own_message_comes_first() -> None:
    record = failed_twice().model_copy(update={"message": "input 2 failed: retries exhausted"})
    assert input_summary(JobStatus.FAILED, record)["message"] == "input 2 failed: retries exhausted"


def test_a_live_pod_newer_than_the_record_gives_the_attempt() -> None:
    """The manifest is written debounced: attempt 3's Pod may run before it is recorded."""
    assert input_summary(JobStatus.RUNNING, failed_twice(), live_attempt=3)["attempt"] == 3
    assert input_summary(JobStatus.PENDING, None) == {"phase": "PENDING", "attempt": 0}


def test_the_overview_reads_each_input_from_its_unit() -> None:
    records = {2: failed_twice()}
    seen = InputOverview(
        phases={0: JobStatus.SUCCEEDED, 2: JobStatus.FAILED, 5: JobStatus.RUNNING},
        pod_attempts={4: 1},  # the unit of inputs 4-5 (chunks of 2) runs attempt 1
        record=records.get,
        unit_of=lambda index: index - index % 2,
    )
    assert seen.of(2) == {"phase": "FAILED", "attempt": 2, "message": DIVIDE}
    assert seen.of(5) == {"phase": "RUNNING", "attempt": 1}
    assert seen.of(7) == {"phase": "PENDING", "attempt": 0}  # not launched yet


# --------------------------------------------------------------------------- function


def test_each_input_of_a_mixed_batch_shows_its_own_function_and_accelerator() -> None:
    obj = {
        "metadata": {"name": GRP, "namespace": "ns", "uid": "u1"},
        "spec": {
            "jobs": [
                {"function": {"name": "prepare", "payloadURI": "gs://b/p", "sha256": "0" * 64}},
                {
                    "function": {"name": "train", "payloadURI": "gs://b/t", "sha256": "0" * 64},
                    "accelerator": "gpu-l4",
                },
                {"container": {"command": ["sh", "-c", "echo done"]}},
            ]
        },
    }
    batch = BatchHandle.from_resource(obj, "gs://b", None)
    assert [batch.child(i).func_name for i in range(3)] == ["prepare", "train", "sh -c echo done"]
    assert [batch.child(i).accelerator for i in range(3)] == ["cpu", "gpu-l4", "cpu"]


# --------------------------------------------------------------------------- the table


def rows() -> list[dict]:
    batch = BatchHandle(
        group_id=GRP, namespace="ns", name=None, tags={}, total=4, storage_root="gs://b",
        func_name="divide_hundred_by", created_at="2026-01-01T00:00:00Z",
    )  # fmt: skip
    failed = _row(batch.child(2), input_summary(JobStatus.FAILED, failed_twice()))
    done = _row(batch.child(1), {"phase": "SUCCEEDED", "attempt": 1})
    return [failed, done]


def rendered(width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(narrow_table(rows(), LIST_COLUMNS, width, "jobs"))
    return console.export_text()


def test_the_table_reads_in_80_columns() -> None:
    text = rendered(80)
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), text
    header = next(line for line in lines if line.startswith("ID"))
    assert header.split() == ["ID", "FUNCTION", "PHASE", "ATTEMPT", "AGE", "MESSAGE"]
    row = next(line for line in lines if line.startswith(f"{GRP}-2 "))  # the id whole
    assert re.search(r"\bFAILED\s+2\b", row)
    # The message is all there, wrapped in its column.
    words = " ".join(line[header.index("MESSAGE") :].strip() for line in lines[2:])
    assert "ZeroDivisionError: division by zero" in words


def test_a_wide_terminal_also_shows_the_accelerator() -> None:
    text = rendered(160)
    header = next(line for line in text.splitlines() if line.startswith("ID"))
    assert "ACCELERATOR" in header
    assert any(line.rstrip().endswith(DIVIDE) for line in text.splitlines())


@pytest.mark.parametrize(
    "created, shown",
    [
        ("2026-01-01T11:59:15Z", "45s"),
        ("2026-01-01T11:48:00Z", "12m"),
        ("2026-01-01T09:00:00Z", "3h"),
        ("2025-12-27T12:00:00Z", "5d"),
        ("2026-01-01T12:00:05Z", "0s"),  # a clock a little ahead
        ("", ""),
    ],
)
def test_age(created: str, shown: str) -> None:
    assert age(created, now=datetime(2026, 1, 1, 12, 0, tzinfo=UTC)) == shown
