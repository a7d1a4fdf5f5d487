"""Rendering for the CLI: one table, or the same rows as JSON or YAML for scripts."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OUTPUT_OPTION = typer.Option(Format.table, "--output", "-o", help="table, json or yaml.")
console = Console()
errors = Console(stderr=True)


def emit(rows: Sequence[dict[str, Any]] | dict[str, Any], fmt: Format, title: str = "") -> None:
    """Print rows (or one object) in the chosen format."""
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
    else:
        table = Table(title=title or None)
        for column in rows[0]:
            table.add_column(column.upper().replace("_", " "))
        for row in rows:
            table.add_row(*(_cell(v) for v in row.values()))
        console.print(table)


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
