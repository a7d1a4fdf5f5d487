"""A batch's failures as CSV and JSON, for a spreadsheet or a script. Pure.

Everything in them comes from Pods (messages, reasons, tracebacks), so the CSV
defuses cells a spreadsheet would run as a formula (a leading ``=``, ``+``,
``-``, ``@``, tab or carriage return gets a ``'`` in front, as OWASP advises);
the JSON is plain data.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kinetic.dashboard.tables import InputRow
from kinetic.dashboard.tracebacks import Failure

COLUMNS = ("index", "attempts", "exit_code", "reason", "message", "exception_type", "traceback")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def failure_records(
    rows: Sequence[InputRow], failures: Mapping[int, Failure | None]
) -> list[dict[str, Any]]:
    """One record per failed input, in index order: its attempts, how the last ended, and
    the remote exception where its result recorded one."""
    out = []
    for row in rows:
        if row.phase != "FAILED":
            continue
        last = row.last
        failure = failures.get(row.index)
        out.append(
            {
                "index": row.index,
                "attempts": len(row.attempts),
                "exit_code": last.exit_code if last is not None else None,
                "reason": last.reason if last is not None else None,
                "message": row.message,
                "exception_type": failure.exception_type if failure else None,
                "traceback": failure.traceback if failure else None,
            }
        )
    return out


def defused(value: Any) -> str:
    """A CSV cell a spreadsheet shows as text, never evaluates."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def to_csv(records: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for record in records:
        writer.writerow([defused(record.get(column)) for column in COLUMNS])
    return out.getvalue()


def to_json(group_id: str, namespace: str, records: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(
        {"batch": group_id, "namespace": namespace, "failures": list(records)}, indent=2
    )
