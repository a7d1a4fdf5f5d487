"""The inputs table's paging and the list's rows (`kinetic.dashboard.tables`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kinetic.dashboard import tables
from kinetic.dashboard.tables import InputRow


def rows(phases: str) -> list[InputRow]:
    """One row per letter: P(ending) R(unning) S(ucceeded) F(ailed) C(ancelled)."""
    names = {"P": "PENDING", "R": "RUNNING", "S": "SUCCEEDED", "F": "FAILED", "C": "CANCELLED"}
    return [InputRow(i, names[p]) for i, p in enumerate(phases)]


def test_a_page_is_a_slice_of_the_rows_that_pass_the_filter():
    page = tables.page_of(rows("SFSFSFS"), "FAILED", 2, 2)
    assert [r.index for r in page.rows] == [5]
    assert (page.matching, page.page, page.pages) == (3, 2, 2)
    assert page.counts == {
        "PENDING": 0,
        "RUNNING": 0,
        "SUCCEEDED": 4,
        "FAILED": 3,
        "CANCELLED": 0,
    }


def test_a_page_past_the_end_is_the_last_page_not_a_blank_table():
    page = tables.page_of(rows("S" * 250), None, 9, 100)
    assert page.page == 3 and [r.index for r in page.rows][0] == 200


def test_no_rows_is_one_empty_page():
    page = tables.page_of([], "FAILED", 1, 100)
    assert (page.rows, page.page, page.pages, page.matching) == ([], 1, 1, 0)


def test_ten_thousand_rows_page_without_reading_anything_else():
    many = rows("S" * 9000 + "F" * 1000)
    page = tables.page_of(many, "FAILED", 10, 100)
    assert [r.index for r in page.rows] == list(range(9900, 10000))


@pytest.mark.parametrize(
    ("status", "page", "size", "says"),
    [
        ("done", None, None, "status='done': choose one of PENDING, RUNNING"),
        (None, "0", None, "page=0: out of bounds, use a whole number 1 or more"),
        (None, "two", None, "page='two': a whole number 1 or more"),
        (None, None, "501", "size=501: out of bounds, use a whole number from 1 to 500"),
        (None, None, "-1", "size=-1: out of bounds"),
    ],
)
def test_bad_paging_names_the_field_its_limit_and_the_fix(status, page, size, says):
    with pytest.raises(tables.BadRequest) as e:
        tables.paging(status, page, size)
    assert says in str(e.value)


def test_paging_defaults_and_any_case():
    assert tables.paging(None, None, None) == (None, 1, tables.DEFAULT_PAGE_SIZE)
    assert tables.paging("failed", "3", "50") == ("FAILED", 3, 50)


def test_an_input_row_says_its_last_attempt():
    row = tables.input_row(
        7,
        "FAILED",
        [
            {"attempt": 1, "pod": "p-1", "outcome": "disruption", "reason": "Evicted"},
            {
                "attempt": 2,
                "pod": "p-2",
                "startTime": "2026-01-01T00:00:00Z",
                "endTime": "2026-01-01T00:01:30Z",
                "exitCode": 137,
                "reason": "OOMKilled",
                "outcome": "failure",
            },
        ],
        "Failed on attempt 2",
    )
    wire = row.wire()
    assert wire["attempt"] == 2 and wire["pod"] == "p-2" and wire["seconds"] == 90.0
    assert wire["exitCode"] == 137 and wire["reason"] == "OOMKilled"
    assert row.ended_at == datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC).timestamp()


NOW = datetime(2026, 1, 1, 1, 0, 0, tzinfo=UTC)


def test_a_batch_row_has_its_progress_age_and_duration():
    obj = {
        "kind": "KineticBatch",
        "metadata": {
            "name": "grp-1",
            "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"name": "sweep", "template": {"function": {"name": "train"}}},
        "status": {
            "phase": "RUNNING",
            "total": 10,
            "counts": {"succeeded": 3, "failed": 1, "running": 2},
            "startTime": "2026-01-01T00:30:00Z",
        },
    }
    row = tables.summary(obj, NOW)
    assert row["kind"] == "batch" and row["title"] == "sweep"
    assert row["ended"] == 4 and row["fraction"] == 0.4
    assert row["age"] == 3600 and row["duration"] == 1800


def test_a_job_row_names_its_command():
    obj = {
        "kind": "KineticJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"container": {"command": ["sh", "-c", "exit 3"]}},
        "status": {"phase": "FAILED", "attempt": 2},
    }
    row = tables.summary(obj, NOW)
    assert (row["kind"], row["title"], row["attempt"]) == ("job", "sh -c exit 3", 2)
    assert row["age"] is None


@pytest.mark.parametrize(
    ("phase", "search", "shown"),
    [(None, None, True), ("FAILED", None, False), (None, "SWE", True), (None, "grp-2", False)],
)
def test_the_list_filters_by_phase_and_searches_names(phase, search, shown):
    row = {"name": "grp-1", "title": "sweep", "phase": "RUNNING"}
    assert tables.matches(row, phase, search) is shown
