"""`kinetic batches ...`: follow and collect fan-outs from a shell."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.live import Live
from rich.table import Table

from kinetic.api import kube
from kinetic.api.batch_rerun import rerun_origin
from kinetic.api.batches import BatchHandle, attach_batch, list_batches, rerun_batch
from kinetic.cli import submit
from kinetic.cli.jobs import CONTEXT, NAMESPACE
from kinetic.cli.output import OUTPUT_OPTION, Format, console, emit, fail
from kinetic.model.digest import ResultMismatch
from kinetic.model.ranges import RangeError, parse_ranges

app = typer.Typer(
    no_args_is_help=True, help="Batches: submit, list, status, watch, results, cancel, cleanup."
)


def _handle(group_id: str, namespace: str | None, context: str | None) -> BatchHandle:
    try:
        return attach_batch(group_id, namespace=namespace, context=context)
    except (LookupError, kube.ClusterUnreachable) as e:
        raise fail(str(e)) from None


def _summary(obj: dict[str, Any]) -> dict[str, Any]:
    st, spec = obj.get("status", {}), obj.get("spec", {})
    counts = st.get("counts", {})
    return {
        "group_id": obj["metadata"]["name"],
        "name": spec.get("name") or "",
        "phase": st.get("phase", "PENDING"),
        "succeeded": f"{counts.get('succeeded', 0)}/{st.get('total', 0)}",
        "running": counts.get("running", 0),
        "failed": counts.get("failed", 0),
        "cancelled": counts.get("cancelled", 0),
        "created": obj["metadata"].get("creationTimestamp", ""),
    }


@app.command("list")
def list_(
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    output: Format = OUTPUT_OPTION,
) -> None:
    """List the batches in a namespace."""
    try:
        items = list_batches(namespace=namespace, context=context)
    except kube.ClusterUnreachable as e:
        raise fail(str(e)) from None
    emit([_summary(o) for o in items], output, title="batches")


@app.command()
def status(
    group_id: str,
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    inputs: bool = typer.Option(
        False, "--inputs", help="Also list every launched input's status (GROUP-INDEX ids)."
    ),
    output: Format = OUTPUT_OPTION,
) -> None:
    """Show a batch's counts, index ranges and conditions (and with --inputs, each input)."""
    h = _handle(group_id, namespace, context)
    st = h.status()
    origin = rerun_origin(h)  # a rerun: each input also shows the index it ran as
    rows: list[dict[str, Any]] | None = (
        [
            {"input": f"{h.group_id}-{i}", "index": i, "phase": s.value}
            | ({} if origin is None else {"original index": origin.original(i)})
            for i, s in h.statuses()
        ]
        if inputs
        else None
    )
    if output is not Format.table:
        extra: dict[str, Any] = {} if rows is None else {"inputs": rows}
        if origin is not None:
            extra["rerunOf"] = origin.describe()
        emit({"groupId": h.group_id, "name": h.name, "tags": h.tags, **st, **extra}, output)
        return
    emit(
        {
            "group id": h.group_id,
            "name": h.name,
            "tags": h.tags,
            "phase": st.get("phase"),
            "total": st.get("total"),
            "counts": st.get("counts"),
            "succeeded": st.get("succeededIndexes") or "-",
            "failed": st.get("failedIndexes") or "-",
            "cancelled": st.get("cancelledIndexes") or "-",
            "manifest": st.get("manifestURI"),
            "message": st.get("message"),
        }
        | ({} if origin is None else {"rerun of": origin.summary()}),
        output,
    )
    if rows is not None:
        emit(rows, output, title="inputs")


def _live_table(h: BatchHandle, st: dict[str, Any], started: float, first_done: int) -> Table:
    c = st.get("counts", {})
    total = st.get("total") or h.total
    done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = (done - first_done) / elapsed
    eta = f"{(total - done) / rate:.0f}s" if rate > 0 and done < total else "-"
    table = Table(title=f"{h.group_id} {h.name or ''}  [bold]{st.get('phase', 'PENDING')}[/bold]")
    for col in ("total", "pending", "running", "succeeded", "failed", "cancelled", "rate", "eta"):
        table.add_column(col.upper(), justify="right")
    table.add_row(
        str(total),
        str(c.get("pending", 0)),
        str(c.get("running", 0)),
        f"[green]{c.get('succeeded', 0)}[/green]",
        f"[red]{c.get('failed', 0)}[/red]",
        str(c.get("cancelled", 0)),
        f"{rate:.2f}/s",
        eta,
    )
    return table


@app.command()
def watch(
    group_id: str,
    timeout: float | None = typer.Option(None, help="Stop watching after this many seconds."),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """A live view: counts, rate, ETA, and failures as they happen."""
    h = _handle(group_id, namespace, context)
    started = time.monotonic()
    first: int | None = None
    reported: set[int] = set()
    with Live(console=console, refresh_per_second=4) as live:
        try:
            for st in h._watch(timeout):
                c = st.get("counts", {})
                done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
                first = done if first is None else first
                for i in parse_ranges(st.get("failedIndexes", "")):
                    if i not in reported:
                        reported.add(i)
                        reason = h.child(i).message() or "no message"
                        live.console.print(f"[red]input {i} failed[/red]: {reason}")
                live.update(_live_table(h, st, started, first))
        except TimeoutError:
            pass
    console.print(h.status().get("message") or "")


@app.command()
def results(
    group_id: str,
    timeout: float | None = typer.Option(
        None, help="Seconds to wait; the batch keeps running after."
    ),
    cleanup: bool = typer.Option(
        True,
        "--cleanup/--keep",
        help="Delete each succeeded input's stored result after reading it (the default, as "
        "in Python's results()); --keep keeps them.",
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Wait for a batch and print every input's result, in input order."""
    h = _handle(group_id, namespace, context)
    try:
        values = h.results(timeout=timeout, cleanup=cleanup, return_exceptions=True)
    except TimeoutError as e:
        raise fail(f"{e}; the batch is still running", code=2) from None
    except ResultMismatch as e:  # the manifest itself was changed in storage
        raise fail(str(e)) from None
    rows = [
        {
            "index": i,
            "ok": not isinstance(v, BaseException),
            "result": f"{type(v).__name__}: {v}" if isinstance(v, BaseException) else v,
        }
        for i, v in enumerate(values)
    ]
    emit(
        rows if output is not Format.table else [{**r, "result": repr(r["result"])} for r in rows],
        output,
        title="results",
    )
    if any(not r["ok"] for r in rows):
        failed = sum(not r["ok"] for r in rows)
        raise fail(f"Batch {group_id}: {failed} of {len(rows)} jobs failed")


@app.command()
def cancel(
    group_id: str,
    only: str | None = typer.Option(
        None, "--inputs", help="Cancel only these inputs, as ranges ('3,7-9'); the rest carry on."
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Stop launching and cancel every running input (or, with --inputs, only some)."""
    h = _handle(group_id, namespace, context)
    if only is None:
        h.cancel()
        console.print(f"{group_id}: cancel requested")
        return
    try:
        indexes = parse_ranges(only)
    except RangeError as e:
        raise fail(f"--inputs {only!r}: {e}. Write ranges like '3,7-9'.") from None
    out_of_range = [i for i in indexes if i >= h.total]
    if out_of_range:
        raise fail(
            f"--inputs {only!r}: batch {group_id} has {h.total} inputs (0 to {h.total - 1}); "
            f"there is no input {out_of_range[0]}"
        )
    try:
        h.cancel_inputs(indexes)
    except ValueError as e:
        raise fail(str(e)) from None
    console.print(f"{group_id}: cancel requested for inputs {only}")


@app.command()
def cleanup(
    group_id: str,
    k8s: bool = typer.Option(True, "--k8s/--no-k8s", help="Delete the batch and its Pods."),
    gcs: bool = typer.Option(
        True,
        "--gcs/--no-gcs",
        "--storage/--no-storage",
        help="Delete artifacts and the manifest (--storage/--no-storage: the same).",
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Delete a batch, its Pods and (by default) all its stored artifacts and logs."""
    _handle(group_id, namespace, context).cleanup(k8s=k8s, gcs=gcs)
    console.print(f"{group_id}: cleaned up")


@app.command()
def rerun(
    group_id: str,
    failed: bool = typer.Option(False, "--failed", help="Rerun the inputs that failed."),
    all_: bool = typer.Option(False, "--all", help="Rerun every input."),
    name: str | None = typer.Option(None, "--name", help="Group id of the new batch."),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Run the failed (or all) inputs of a batch again as a new batch; prints its group id.

    Each input keeps its original index (KINETIC_INDEX) and runs with the
    original definition, also when the old batch was deleted.
    """
    if failed == all_:
        raise fail("Choose what to rerun: --failed or --all (exactly one).")
    try:
        h = rerun_batch(group_id, failed=failed, name=name, namespace=namespace, context=context)
    except (LookupError, ValueError, kube.ClusterUnreachable) as e:
        raise fail(str(e)) from None
    typer.echo(h.group_id)


submit.register(app)
