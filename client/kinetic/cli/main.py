"""The `kinetic` command."""

from __future__ import annotations

import typer

from kinetic.cli import batches, dashboard, doctor, jobs

app = typer.Typer(
    no_args_is_help=True,
    help="Run Python functions and containers over many inputs on Kubernetes.",
    pretty_exceptions_show_locals=False,
)
app.add_typer(jobs.app, name="jobs")
app.add_typer(batches.app, name="batches")
app.command("doctor")(doctor.doctor)
app.command("dashboard")(dashboard.dashboard)

LOCAL_HELP = "The local cluster: up, down, status."
# The local cluster is its own package (kinetic-dev): it needs this repository's
# chart and scripts, so `pip install kinetic` users do not get a command that
# cannot work for them.
LOCAL_MISSING = (
    "`kinetic local` runs the local development cluster, which is the kinetic-dev "
    "package and works only from a checkout of the Kinetic repository. There, run "
    "`make venv` (or: pip install -e ./client -e ./operator -e ./devcluster)."
)


def _add_local() -> None:
    """Add `kinetic local` from kinetic-dev when installed, else a command saying how to get it."""
    try:
        from kinetic_dev.cli import app as local_app
    except ModuleNotFoundError as e:
        if e.name != "kinetic_dev" and e.name != "kinetic_dev.cli":
            raise  # kinetic-dev is installed but broken: show the real error

        @app.command(
            "local",
            help=f"{LOCAL_HELP} (needs kinetic-dev)",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False,
        )
        def local_missing() -> None:
            typer.secho(f"kinetic local: {LOCAL_MISSING}", fg=typer.colors.RED, err=True)
            raise typer.Exit(1)

        return
    app.add_typer(local_app, name="local", help=LOCAL_HELP)


_add_local()

if __name__ == "__main__":
    app()
