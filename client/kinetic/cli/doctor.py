"""`kinetic doctor`: what Kinetic needs from here, checked in order, each with its fix.

One line per check (`kinetic.api.doctor`), printed as soon as it is known: ✓ or ✗, the
check's name and what was found; under a ✗ the fix. A check that cannot run because
an earlier one failed is shown as skipped, with the reason. ``-o json`` (or yaml)
prints the same results as a list. The exit status is 0 only when every check passed.
"""

from __future__ import annotations

import os

import typer
from rich.markup import escape
from rich.table import Table

from kinetic.api.doctor import CheckResult, Status, run
from kinetic.cli.jobs import CONTEXT, NAMESPACE
from kinetic.cli.output import OUTPUT_OPTION, Format, console, emit
from kinetic.storage import RETRY_TIMEOUT_ENV

MARKS = {
    Status.ok: "[green]✓[/green]",
    Status.failed: "[red]✗[/red]",
    Status.skipped: "[dim]-[/dim]",
}
NAME_WIDTH = 11  # "permissions"
# A doctor answers in seconds: storage that does not answer within this is reported, not
# waited for (the client's own calls retry for two minutes).
STORAGE_RETRY_SECONDS = "15"


def doctor(
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Check the cluster, CRDs, operator, its leader and webhook, storage and your permissions."""
    os.environ.setdefault(RETRY_TIMEOUT_ENV, STORAGE_RETRY_SECONDS)
    results = []
    for result in run(namespace, context):
        results.append(result)
        if output is Format.table:
            console.print(_line(result))
    if output is not Format.table:
        emit([r.model_dump(mode="json") for r in results], output)
    raise typer.Exit(0 if all(r.passed for r in results) else 1)


def _line(result: CheckResult) -> Table:
    """The check's mark, name and finding (a skipped check's reason); a failure's fix beneath."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=1)
    grid.add_column(width=NAME_WIDTH)
    grid.add_column(overflow="fold")  # URIs and commands whole, never cut
    detail = escape(result.detail)
    if result.status is Status.skipped:
        detail = f"[dim]skipped: {detail}[/dim]"
    grid.add_row(MARKS[result.status], f"[bold]{result.name}[/bold]", detail)
    if result.fix:
        grid.add_row("", "", f"[yellow]fix:[/yellow] {escape(result.fix)}")
    return grid
