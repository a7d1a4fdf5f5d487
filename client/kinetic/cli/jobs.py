"""`kinetic jobs ...`: look after single jobs, and single inputs of batches, from a shell.

Every command but `list` takes a KineticJob's name or a batch input's id,
``<group id>-<index>``: the same handle answers both (`kinetic.attach`).
"""

from __future__ import annotations

from typing import Any

import typer

from kinetic.api import kube
from kinetic.api.debug import DebugAttachError, cleanup_port_forward
from kinetic.api.jobs import (
    JobCancelled,
    JobFailed,
    JobHandle,
    JobStatus,
    attach,
    iter_jobs_with_status,
    page_of,
)
from kinetic.cli.output import OUTPUT_OPTION, Column, Format, age, console, emit, fail
from kinetic.model.digest import ResultMismatch

app = typer.Typer(
    no_args_is_help=True,
    help="Single jobs (or one input of a batch, as GROUP-INDEX): list, status, logs, result, "
    "cancel, cleanup, debug.",
)

NAMESPACE = typer.Option(None, "--namespace", "-n", help="Namespace (default: the kubeconfig's).")
CONTEXT = typer.Option(None, "--context", help="Kubeconfig context.")


def _handle(job_id: str, namespace: str | None, context: str | None) -> JobHandle:
    try:
        return attach(job_id, namespace=namespace, context=context)
    except (LookupError, kube.ClusterUnreachable) as e:
        raise fail(str(e)) from None


def _row(h: JobHandle, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_id": h.job_id,
        "group": h.group_id or "",
        "index": "" if h.group_index is None else h.group_index,
        "function": h.func_name,
        "phase": status.get("phase", JobStatus.NOT_FOUND.value if not status else "PENDING"),
        "attempt": status.get("attempt", 0),
        "accelerator": h.accelerator,
        "created": h.created_at,
        "message": status.get("message", ""),
    }


# `jobs list` as a table reads in 80 columns: the id whole (it is what you copy), the group
# and index left out (the id holds them), the creation time as an age, the accelerator
# only on a wider terminal, and the message wrapped in what is left. -o json|yaml has all.
LIST_COLUMNS = (
    Column("job_id", "ID", whole=True),
    Column("function", most=16),
    Column("phase", whole=True),
    Column("attempt", whole=True),
    Column("accelerator", most=16, wider_than=120),
    Column("created", "AGE", show=age, whole=True),
    Column("message", fill=True),
)


@app.command("list")
def list_(
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    batches: bool = typer.Option(
        True, "--batches/--no-batches", help="Also list every input of every batch."
    ),
    limit: int = typer.Option(100, "--limit", min=1, help="Rows per page."),
    page: int = typer.Option(1, "--page", min=1, help="Which page (newest first)."),
    output: Format = OUTPUT_OPTION,
) -> None:
    """List the jobs in a namespace, newest first: KineticJobs and the inputs of batches
    (their GROUP-INDEX ids), a page at a time."""
    try:
        rows = iter_jobs_with_status(namespace, context, include_batches=batches)
        listed = page_of(rows, limit + 1, (page - 1) * limit)
        shown = [_row(h, status()) for h, status in listed[:limit]]
    except kube.ClusterUnreachable as e:
        raise fail(str(e)) from None
    emit(shown, output, title=f"jobs (page {page})" if page > 1 else "jobs", columns=LIST_COLUMNS)
    if len(listed) > limit and output is Format.table:
        console.print(f"[dim]more: --page {page + 1}[/dim]")


@app.command()
def status(
    job_id: str,
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Show a job's (or a batch input's) phase, attempts and message."""
    h = _handle(job_id, namespace, context)
    st = h.describe()
    if output is not Format.table:
        emit({"jobId": h.job_id, "namespace": h.namespace, **st}, output)
        return
    emit(_row(h, st), output)
    attempts = st.get("attempts", [])
    if attempts:
        emit([_attempt_row(a) for a in attempts], output, title="attempts")
    gangs = [a for a in attempts if a.get("members")]
    if gangs:
        newest = gangs[-1]
        emit(member_rows(newest), output, title=f"members of attempt {newest.get('attempt')}")


def _attempt_row(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "attempt": a.get("attempt"),
        "pod": a.get("pod"),
        "outcome": a.get("outcome"),
        "exit_code": a.get("exitCode"),
        "reason": a.get("reason"),
        "message": a.get("message"),
    }


def member_rows(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """A multi-host attempt's members by rank: which Pod, how it ended and why.

    Only the newest such attempt is shown: it is the one a user acts on,
    and older ones are in ``-o json`` (every attempt with its members).
    """
    members = sorted(attempt.get("members") or [], key=lambda m: m.get("rank", 0))
    return [
        {
            "rank": m.get("rank"),
            "pod": m.get("pod"),
            "outcome": m.get("outcome"),
            "exit_code": m.get("exitCode"),
            "reason": m.get("reason"),
        }
        for m in members
    ]


@app.command()
def logs(
    job_id: str,
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream until the pod ends."),
    tail: int | None = typer.Option(None, "--tail", help="Only the last N lines."),
    rank: int = typer.Option(
        0, "--rank", help="A multi-host job's member whose log to print (0: the coordinator)."
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Print a job's logs (its newest attempt; archived once its Pod is gone). A multi-host
    job has one log per member: --rank picks whose."""
    h = _handle(job_id, namespace, context)
    try:
        if follow:
            h.logs(follow=True, rank=rank)
        elif tail is not None:
            print(h.tail(tail, rank=rank), end="")
        else:
            print(h.logs(rank=rank) or "", end="")
    except ValueError as e:  # a rank the job does not have: the message says which it has
        raise fail(str(e)) from None


@app.command()
def result(
    job_id: str,
    timeout: float | None = typer.Option(
        None, help="Seconds to wait; the job keeps running after."
    ),
    cleanup: bool = typer.Option(
        True,
        "--cleanup/--keep",
        help="Delete the job and its artifacts after a success (the default, as in Python's "
        "result()); --keep keeps them. A failed job is always kept.",
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Wait for a job and print its return value; after a success, delete the job and its
    artifacts (--keep keeps them), as Python's result() does."""
    h = _handle(job_id, namespace, context)
    try:
        with console.status(f"waiting for {job_id}"):
            value = h.result(timeout=timeout, cleanup=None if cleanup else False)
    except TimeoutError as e:
        raise fail(f"{e}; the job is still running", code=2) from None
    except (JobFailed, JobCancelled, ResultMismatch) as e:
        raise fail(str(e)) from None
    except Exception as e:  # the remote exception, re-raised with its traceback note
        notes = "\n".join(getattr(e, "__notes__", []))
        raise fail(f"the job raised {type(e).__name__}: {e}\n{notes}") from None
    emit({"result": value} if output is not Format.table else {"result": repr(value)}, output)


@app.command()
def cancel(job_id: str, namespace: str | None = NAMESPACE, context: str | None = CONTEXT) -> None:
    """Stop a job, or one input of a batch (the others carry on); it ends CANCELLED."""
    h = _handle(job_id, namespace, context)
    final = h.cancel()
    console.print(f"{job_id}: {final.value}")


@app.command()
def cleanup(
    job_id: str,
    k8s: bool = typer.Option(
        True, "--k8s/--no-k8s", help="Delete the resource and its Pods (an input: its Pods)."
    ),
    gcs: bool = typer.Option(
        True,
        "--gcs/--no-gcs",
        "--storage/--no-storage",
        help="Delete stored payload, result and logs (--storage/--no-storage: the same).",
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Delete a job's resources and artifacts (outputs under KINETIC_OUTPUT_DIR are kept)."""
    h = _handle(job_id, namespace, context)
    h.cleanup(k8s=k8s, gcs=gcs)
    console.print(f"{job_id}: cleaned up")


@app.command()
def debug(
    job_id: str,
    port: int = typer.Option(5678, "--port", "-p", help="Local port to forward to debugpy."),
    working_dir: str | None = typer.Option(
        None, "--working-dir", help="Local folder of the function's source (default: here)."
    ),
    timeout: float = typer.Option(600, help="Seconds to wait for the job's debugpy to listen."),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Forward a local port to a debug job's debugpy and print the VS Code configuration;
    the forward lasts until the job ends or Ctrl-C."""
    h = _handle(job_id, namespace, context)
    try:
        forward = h.debug_attach(local_port=port, working_dir=working_dir, timeout=timeout)
    except (DebugAttachError, TimeoutError) as e:
        raise fail(str(e)) from None
    try:
        final = h.wait()
        console.print(f"{job_id}: {final.value}; the forward is closed")
    except KeyboardInterrupt:
        console.print("the forward is closed; the job carries on")
    finally:
        cleanup_port_forward(forward)
