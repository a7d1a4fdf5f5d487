"""A batch's failures as CSV and JSON (`kinetic.dashboard.export`)."""

from __future__ import annotations

import csv
import io
import json

from kinetic.dashboard import export
from kinetic.dashboard.tables import Attempt, InputRow
from kinetic.dashboard.tracebacks import Failure

ROWS = [
    InputRow(0, "SUCCEEDED", (Attempt(1, "p-0", outcome="success"),)),
    InputRow(1, "FAILED", (Attempt(1, "p-1", exit_code=1, outcome="failure"),), "=HYPERLINK(x)"),
    InputRow(2, "FAILED", (), "not submitted: TypeError"),
]
FAILURES = {1: Failure("ValueError", "ValueError: bad", "Traceback...\n+1\n", "call"), 2: None}


def test_only_failed_inputs_are_exported_with_their_tracebacks():
    records = export.failure_records(ROWS, FAILURES)
    assert [r["index"] for r in records] == [1, 2]
    assert records[0]["exception_type"] == "ValueError"
    assert records[0]["traceback"] == "Traceback...\n+1\n"
    assert records[1]["attempts"] == 0 and records[1]["traceback"] is None


def test_csv_cells_a_spreadsheet_would_evaluate_are_defused():
    text = export.to_csv(export.failure_records(ROWS, FAILURES))
    table = list(csv.DictReader(io.StringIO(text)))
    assert table[0]["message"] == "'=HYPERLINK(x)"
    assert table[0]["traceback"] == "Traceback...\n+1\n"  # a multi-line cell, quoted
    assert table[1]["message"] == "not submitted: TypeError"


def test_defused_leaves_plain_text_alone():
    assert [export.defused(v) for v in ("-1", "@a", "\tx", "ok", None, 3)] == [
        "'-1",
        "'@a",
        "'\tx",
        "ok",
        "",
        "3",
    ]


def test_json_names_the_batch():
    data = json.loads(export.to_json("grp-1", "ns", export.failure_records(ROWS, FAILURES)))
    assert data["batch"] == "grp-1" and data["namespace"] == "ns"
    assert data["failures"][0]["message"] == "=HYPERLINK(x)"  # JSON is data: kept as is
