"""Rendering for the CLI: one table, or the same rows as JSON or YAML for scripts."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from kinetic.model.names import parse_time


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OUTPUT_OPTION = typer.Option(Format.table, "--output", "-o", help="table, json or yaml.")
console = Console()
errors = Console(stderr=True)


@dataclass(frozen=True)
class Column:
    """One column of a table that must read in a narrow terminal (`emit`'s ``columns``).

    ``key`` names the row's field; ``header`` the heading (default: the key in
    capitals); ``show`` turns the value into the cell. ``whole`` cells are never
    wrapped or cut (an id you copy), ``most`` cuts a cell past that width with an
    ellipsis, ``fill`` takes the width left and wraps. ``wider_than`` hides the
    column on a terminal narrower than that.
    """

    key: str
    header: str | None = None
    show: Callable[[Any], str] | None = None
    whole: bool = False
    most: int | None = None
    fill: bool = False
    wider_than: int = 0


def emit(
    rows: Sequence[dict[str, Any]] | dict[str, Any],
    fmt: Format,
    title: str = "",
    columns: Sequence[Column] | None = None,
) -> None:
    """Print rows (or one object) in the chosen format.

    ``columns`` chooses and shapes a table's columns (JSON and YAML keep every
    field); without it every field is a column.
    """
    if fmt is Format.json:
        print(json.dumps(rows, indent=2, default=str))
    elif fmt is Format.yaml:
        print(yaml.safe_dump(rows, sort_keys=False, default_flow_style=False), end="")
    elif isinstance(rows, dict):
        table = Table(show_header=False, box=None, title=title or None)
        for key, value in rows.items():
            table.add_row(f"[bold]{key}[/bold]", _cell(value))
        console.print(table)
    elif not rows:
        console.print(f"[dim]no {title or 'items'}[/dim]")
    elif columns is not None:
        console.print(narrow_table(rows, columns, console.width, title))
    else:
        table = Table(title=title or None)
        for column in rows[0]:
            table.add_column(column.upper().replace("_", " "))
        for row in rows:
            table.add_row(*(_cell(v) for v in row.values()))
        console.print(table)


def narrow_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], width: int, title: str = ""
) -> Table:
    """Rows as a borderless table (like kubectl's) of the ``columns`` that fit ``width``."""
    shown = [c for c in columns if width >= c.wider_than]
    table = Table(title=title or None, box=None, padding=(0, 1), pad_edge=False)
    for c in shown:
        cells = [_shown(c, row.get(c.key)) for row in rows]
        table.add_column(
            c.header or c.key.upper().replace("_", " "),
            no_wrap=c.whole or c.most is not None,
            min_width=max(map(len, cells), default=0) if c.whole else None,
            max_width=c.most,
            overflow="ellipsis" if c.most is not None else "fold",
            ratio=1 if c.fill else None,
        )
    for row in rows:
        table.add_row(*(_shown(c, row.get(c.key)) for c in shown))
    return table


def _shown(column: Column, value: Any) -> str:
    return column.show(value) if column.show is not None else _cell(value)


def age(created: str, now: datetime | None = None) -> str:
    """How long ago ``created`` (RFC 3339) was, as kubectl says it: 45s, 12m, 3h, 5d."""
    try:
        then = parse_time(created)
    except ValueError:
        return ""
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error for a person and return the Exit to raise."""
    errors.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)
