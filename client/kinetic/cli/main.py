"""The `kinetic` command."""

from __future__ import annotations

import typer

from kinetic.cli import batches, jobs, local

app = typer.Typer(
    no_args_is_help=True,
    help="Run Python functions and containers over many inputs on Kubernetes.",
    pretty_exceptions_show_locals=False,
)
app.add_typer(jobs.app, name="jobs")
app.add_typer(batches.app, name="batches")
app.add_typer(local.app, name="local", help="The local cluster: up, down, status.")

if __name__ == "__main__":
    app()
