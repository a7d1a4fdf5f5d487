"""`kinetic batches submit -f FILE`: preview, confirm, submit, and optionally wait and report.

The safety net of a batch-submission workflow, for YAML a person wrote:

1. every document is checked locally (the CRD models and `kinetic.model.limits`,
   the same checks the operator applies), then by the API server with a
   server-side dry run — which also runs the admission webhook and so the
   administrator's policy — before anything is created;
2. a preview lists, per document, its kind, name, namespace, how many jobs
   it runs, its images and accelerators (and their total);
3. nothing is created without a yes: ``--yes``, or an answer at a terminal.
   With no terminal and no ``--yes`` the answer is no (exit 1);
4. objects are created in file order, and a summary lists each one created,
   failed (with the API server's reason) or not attempted; the exit status
   is 1 if any was not created;
5. with ``--wait``, live progress until every created object ends, then a
   per-job report (index, input, outcome, attempts, message). The exit
   status is 0 only if every object was created and every job succeeded.

A file may also be one request in the batch-submission guide's format
(`kinetic.cli.guide`): its jobs become KineticJobs, and its ``dry_run``,
``confirmed`` and ``continue_on_error`` act as the flags do (a flag given
wins over the file).

**When an object is refused** (``continue_on_error``, true by default as in
the guide). Creation goes on past a refused object — refused by the local
checks, by the server-side dry run, or at creation although its dry run
passed (the policy, a quota or a name changed in between) — and the summary
reports each refusal with its reason; the exit status is 1 when any object
was not created. ``--stop-on-error`` (``continue_on_error: false``) creates
the objects before the first refused one and stops there, reporting the rest
as not attempted. The preview shows what will be created before anything is.

**The administrator's policy** (`kinetic.model.policy_keys`, read with
`kinetic.api.policy`): with ``dryRunDefault`` (true unless set false) the
command only previews unless ``--yes``, ``--no-dry-run`` or the file's
``dry_run: false`` says to submit; with ``requireConfirmation`` a person must
answer at a terminal and ``--yes`` does not stand in for that answer;
``defaultGpuType`` is the GPU type of a guide job without ``gpu_type``; and a
file of more than ``maxJobsPerRequest`` objects is refused whole.

The preview, the decisions and the report are built by pure functions
(tested alone); the command only reads the file, talks to the API server
and prints.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from queue import Queue
from threading import Thread
from typing import Any

import typer
from kubernetes.client import ApiException
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kinetic.api.config import default_namespace, resolve
from kinetic.api.inputs import read_shard
from kinetic.api.kube import ClusterUnreachable, KubeClient, kube_reason
from kinetic.api.policy import policy_source, read_submission_policy
from kinetic.cli.jobs import CONTEXT, NAMESPACE
from kinetic.cli.output import console, errors, fail
from kinetic.cli.submit_file import Contents, Document, DocumentError, Entry, Refusal, read_file
from kinetic.cli.submit_plan import (
    Decision,
    Outcome,
    accelerator_totals,
    all_succeeded,
    batch_report,
    create_all,
    decide,
    format_accelerators,
    job_report,
    preview_rows,
    preview_table,
    refuse_images,
    request_size_problem,
    summary_lines,
    to_create,
    unrecorded_endings,
    unseen_row,
)
from kinetic.model import layout
from kinetic.model import resources as r
from kinetic.model.catalog import default_catalog
from kinetic.model.policy_keys import DRY_RUN_DEFAULT, REQUIRE_CONFIRMATION, SubmissionPolicy

# --------------------------------------------------------------------------- the command


FILE_OPTION = typer.Option(
    ...,
    "--file",
    "-f",
    help="YAML or JSON: KineticBatch / KineticJob documents, or one request in the "
    "batch-submission guide's format (jobs: [...]); - reads stdin.",
)


def register(app: typer.Typer) -> None:
    """Add `submit` to the `kinetic batches` group."""
    app.command("submit")(submit)


def submit(
    file: Path = FILE_OPTION,
    dry_run: bool | None = typer.Option(
        None,
        "--dry-run/--no-dry-run",
        help="Check and preview only (server-side dry run); create nothing. --no-dry-run "
        "submits where the policy's dryRunDefault would only preview.",
    ),
    yes: bool = typer.Option(
        False,
        "--yes",
        "-y",
        help="Submit without asking (unless the policy's requireConfirmation wants a person).",
    ),
    continue_on_error: bool | None = typer.Option(
        None,
        "--continue-on-error/--stop-on-error",
        help="When an object is refused: create the others (the default, or the file's "
        "continue_on_error), or stop at the first refusal (objects before it are created).",
    ),
    wait: bool = typer.Option(
        False,
        "--wait",
        help="Follow progress, then print a per-job report; exit 0 only if all succeed.",
    ),
    timeout: float | None = typer.Option(
        None, help="With --wait: give up after this many seconds."
    ),
    namespace: str | None = NAMESPACE,
    context: str | None = CONTEXT,
) -> None:
    """Check, preview and submit the KineticBatches and KineticJobs in FILE."""
    policy = _policy(context)
    contents = _contents(file, namespace, context, policy.default_gpu_type)
    too_many = request_size_problem(
        len(contents.entries), policy.max_jobs_per_request, policy_source()
    )
    if too_many is not None:
        raise fail(escape(too_many))
    settings = contents.settings
    on_error = next(
        (said for said in (continue_on_error, settings.continue_on_error) if said is not None),
        True,  # the guide's default: go on past a refused object
    )
    entries = _preflight(contents, on_error, context, policy)
    decision = decide(dry_run, yes, settings, policy)
    planned = to_create(entries, stop_on_error=on_error is False)
    _stop_unless_going_ahead(decision, len(planned), len(entries))

    def create(doc: Document) -> object:
        return KubeClient(context).create(doc.plural, doc.namespace, doc.body)

    outcomes = create_all(entries, create, stop_on_error=on_error is False)
    _print_summary(outcomes)
    _finish(outcomes, wait, context, timeout)


def _stop_unless_going_ahead(decision: Decision, planned: int, total: int) -> None:
    """End the command here on a dry run (exit 1 when some object was refused), or when the
    submission wants a confirmation it did not get; else return, to create ``planned``."""
    if decision.dry_run:
        _say_dry_run(decision, planned, total)
        raise typer.Exit(0 if planned == total else 1)
    if planned and decision.ask and not _confirmed(planned, decision):
        how = "confirm at a terminal" + (
            f" ({policy_source()}: {REQUIRE_CONFIRMATION})"
            if decision.person_required
            else " or pass --yes"
        )
        raise fail(f"not submitted: {how}", code=1)


def _finish(
    outcomes: list[Outcome], wait: bool, context: str | None, timeout: float | None
) -> None:
    """Say what was not created, follow what was when asked (--wait), and exit: 0 only when
    every object was created (and, with --wait, every job succeeded)."""
    created = [o.doc for o in outcomes if o.doc is not None]
    missed = len(outcomes) - len(created)
    if missed:
        errors.print(f"[red]error:[/red] {missed} of {len(outcomes)} objects were not created")
    if wait and created:
        reports = _wait(created, context, timeout)
        raise typer.Exit(0 if all_succeeded(reports) and not missed else 1)
    raise typer.Exit(1 if missed else 0)


def _contents(
    file: Path, namespace: str | None, context: str | None, default_gpu_type: str | None
) -> Contents:
    """The file's objects, each checked locally; a file that cannot be read ends the command."""
    text = sys.stdin.read() if str(file) == "-" else _read(file)
    try:
        default_ns = namespace or default_namespace(context)
        return read_file(
            text,
            default_ns,
            forced=namespace is not None,
            accelerators=lambda: _accelerators(context),
            default_gpu_type=default_gpu_type,
        )
    except DocumentError as exc:
        raise fail(f"{file}: {escape(str(exc))}") from None


def _preflight(
    contents: Contents, on_error: bool, context: str | None, policy: SubmissionPolicy
) -> list[Entry]:
    """The local checks' refusals (the file's own, then the policy's allowedImages), then the
    server-side dry run's, then the preview."""
    entries = refuse_images(contents.entries, policy, _default_image(context), policy_source())
    entries = _server_dry_run(entries, context)
    _preview(entries, stop=on_error is False)
    return entries


def _policy(context: str | None) -> SubmissionPolicy:
    """The live policy's client keys; a note when it is not followed as written."""
    policy, note = read_submission_policy(context)
    if note:
        errors.print(f"[dim]{escape(note)}[/dim]", soft_wrap=True)
    return policy


def _default_image(context: str | None) -> str | None:
    """The operator's default image (always allowed by its policy), if it published one."""
    try:
        return resolve(context=context).image
    except Exception:  # noqa: BLE001 — no published settings: no image is exempt
        return None


def _read(file: Path) -> str:
    try:
        return file.read_text()
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror}") from None


def _accelerators(context: str | None) -> Sequence[str]:
    """The names the cluster's catalog offers (the operator publishes them), else the built-in's."""
    try:
        published = resolve(context=context).accelerators
    except Exception:  # noqa: BLE001 — no published settings: the built-in catalog
        published = None
    return published or default_catalog().names()


def _server_dry_run(entries: list[Entry], context: str | None) -> list[Entry]:
    """Every document through the API server (schema, webhook, policy), nothing stored.

    Returns the entries with each document the server refused replaced by its
    Refusal.
    """
    checked: list[Entry] = []
    for entry in entries:
        if isinstance(entry, Document):
            try:
                KubeClient(context).custom.create_namespaced_custom_object(
                    r.GROUP,
                    r.VERSION,
                    entry.namespace,
                    entry.plural,
                    entry.body,
                    dry_run="All",
                    _content_type="application/json",
                )
            except ApiException as exc:
                entry = Refusal(entry.label, kube_reason(exc))
            except ClusterUnreachable as exc:
                raise fail(str(exc)) from None
        checked.append(entry)
    return checked


def _preview(entries: list[Entry], stop: bool) -> None:
    """The preview of what will be created; then what was refused, and what will not be tried."""
    planned = to_create(entries, stop_on_error=stop)
    if planned:
        rows = preview_rows(planned)
        console.print(preview_table(rows))
        console.print(f"Total: {format_accelerators(accelerator_totals(rows))}")
    refused = [e for e in entries if isinstance(e, Refusal)]
    if refused:
        console.print(f"[red]Refused[/red], will not be created ({len(refused)}):")
        for refusal in refused:
            console.print(f"  {escape(refusal.label)}: {escape(refusal.reason)}", soft_wrap=True)
    skipped = [e for e in entries if isinstance(e, Document) and e not in planned]
    if skipped:
        console.print(
            "[yellow]Not attempted[/yellow] (--stop-on-error stops at the first refusal): "
            + escape(", ".join(d.label for d in skipped)),
            soft_wrap=True,
        )


def _say_dry_run(decision: Decision, planned: int, total: int) -> None:
    what = (
        "the API server accepted every document"
        if planned == total
        else f"{planned} of {total} objects would be created (see above)"
    )
    if decision.by_policy:
        console.print(
            f"[bold]Dry run[/bold] ({policy_source()}: {DRY_RUN_DEFAULT}): {what}; nothing was "
            "created. To submit, pass --yes or --no-dry-run."
        )
    else:
        console.print(f"[bold]Dry run[/bold]: {what}; nothing was created.")


def _confirmed(n: int, decision: Decision) -> bool:
    """Ask at a terminal; without one the answer is no."""
    source = policy_source()
    if decision.yes_ignored:
        console.print(
            f"[dim]{source} ({REQUIRE_CONFIRMATION}): a person confirms every submission; "
            "--yes does not answer for them.[/dim]"
        )
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        errors.print(
            f"No terminal to confirm at: {source} requires a person to confirm every "
            f"submission ({REQUIRE_CONFIRMATION}), and --yes does not count; nothing was "
            "submitted."
            if decision.person_required
            else "No terminal to confirm at, and no --yes: nothing was submitted."
        )
        return False
    return typer.confirm(f"Submit {n} object{'s' * (n != 1)}?", default=False)


def _print_summary(outcomes: list[Outcome]) -> None:
    color = {"created": "green", "failed": "red", "not attempted": "yellow"}
    head, *rows = summary_lines(outcomes)
    console.print(f"[bold]{head}[/bold]")
    for outcome, line in zip(outcomes, rows, strict=True):
        c = color[outcome.result]
        console.print(f"[{c}]{escape(line)}[/{c}]", soft_wrap=True)


def _progress(docs: list[Document], statuses: list[dict[str, Any]]) -> Table:
    table = Table(title="Progress")
    for col in ("object", "phase", "succeeded", "failed", "running", "total"):
        table.add_column(col.upper())
    for doc, st in zip(docs, statuses, strict=True):
        c = st.get("counts") or {}
        if doc.kind == "KineticJob":
            done = int(st.get("phase") == "SUCCEEDED")
            c = {"succeeded": done, "failed": int(st.get("phase") == "FAILED")}
        table.add_row(
            doc.label,
            st.get("phase") or "PENDING",
            str(c.get("succeeded", 0)),
            str(c.get("failed", 0)),
            str(c.get("running", 0)),
            str(st.get("total") or 1),
        )
    return table


def _follow(doc: Document, i: int, context: str | None, timeout: float | None, out: Queue) -> None:
    """Put (i, status) on ``out`` at every change of one object, until it ends (a thread).

    Watches, not polls (`KubeClient.watch_one`, which starts a watch the API server breaks
    off again by itself). ``None`` is put when the object is deleted, on the timeout, or
    when the watch fails for good, so the waiter never waits for a silent thread (and
    reports the object as unseen, never as a success).
    """
    try:
        for obj in KubeClient(context).watch_one(doc.plural, doc.namespace, doc.name, timeout):
            status = (obj or {}).get("status") or {}
            out.put((i, status if obj is not None else None))
            if obj is None or r.Phase(status.get("phase") or "PENDING").terminal:
                return
    except Exception:  # noqa: BLE001 — timed out or failed for good: say so in the report
        out.put((i, None))


def _ended(status: dict[str, Any] | None) -> bool:
    return status is None or r.Phase(status.get("phase") or "PENDING").terminal


def _wait(
    docs: list[Document], context: str | None, timeout: float | None
) -> list[list[dict[str, Any]]]:
    """Live progress until every object has ended, then one report table per object."""
    updates: Queue = Queue()
    for i, doc in enumerate(docs):
        Thread(target=_follow, args=(doc, i, context, timeout, updates), daemon=True).start()
    latest: list[dict[str, Any] | None] = [{} for _ in docs]
    done = [False] * len(docs)
    with Live(console=console, refresh_per_second=4) as live:
        while not all(done):
            i, status = updates.get()
            done[i] = _ended(status)
            latest[i] = status if status is not None else latest[i]
            live.update(_progress(docs, [s or {} for s in latest]))
    statuses = [s or {} for s in latest]
    console.print()
    reports = []
    for doc, st in zip(docs, statuses, strict=True):
        rows = job_report(st) if doc.kind == "KineticJob" else _batch_rows(doc, st, context)
        if not _ended(st):  # its watch failed or timed out: never call that a success
            rows = [*rows, unseen_row(doc.label)]
        reports.append(rows)
        table = Table(title=f"{doc.label}: {st.get('phase') or 'PENDING'}")
        for col in ("index", "input", "outcome", "attempts", "message"):
            table.add_column(col.upper())
        for row in rows:
            color = {"SUCCEEDED": "green", "FAILED": "red"}.get(row["outcome"], "yellow")
            table.add_row(
                str(row["index"]),
                row["input"],
                f"[{color}]{row['outcome']}[/{color}]",
                str(row["attempts"]),
                row["message"],
            )
        console.print(table)
    return reports


MANIFEST_CATCH_UP = 30.0  # seconds a report waits for the manifest to record every ending


def _batch_rows(doc: Document, status: dict[str, Any], context: str | None) -> list[dict[str, Any]]:
    """The report of a batch, from its status and its manifest's per-input records.

    The status says an input ended before the manifest (written a few times
    a second at most) records its attempts; the report waits for the
    manifest to catch up, a bounded while, rather than show an ended input
    with no attempt.
    """
    obj = KubeClient(context).get(doc.plural, doc.namespace, doc.name) or {}
    root = _storage_root(context)
    uid = (obj.get("metadata") or {}).get("uid")
    records: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + MANIFEST_CATCH_UP
    while root and uid:
        records = _manifest_records(layout.batch_home(root, doc.namespace, doc.name, uid), status)
        if not unrecorded_endings(status, records) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return batch_report(doc.body.get("spec") or {}, status, records)


def _manifest_records(home: layout.Home, status: dict[str, Any]) -> dict[int, dict[str, Any]]:
    records: dict[int, dict[str, Any]] = {}
    total = status.get("total") or 0
    for shard in range(layout.shard_of(total - 1) + 1 if total else 0):
        found = read_shard(home, shard)
        for key, rec in (found.inputs if found else {}).items():
            records[int(key)] = rec.model_dump(mode="json")
    return records


def _storage_root(context: str | None) -> str | None:
    try:
        return resolve(context=context).storage_root
    except Exception:  # noqa: BLE001 — the report falls back to the status's index ranges
        return None
