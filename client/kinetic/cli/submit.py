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
4. with ``--wait``, live progress until every object ends, then a per-job
   report (index, input, outcome, attempts, message). The exit status is 0
   only if every job succeeded.

The preview and the report are built by pure functions (tested alone); the
command only reads the file, talks to the API server and prints.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Queue
from threading import Thread
from typing import Any

import typer
import yaml
from kubernetes.client import ApiException
from pydantic import ValidationError
from rich.live import Live
from rich.table import Table

from kinetic.api import kube
from kinetic.api.config import resolve
from kinetic.api.inputs import read_shard
from kinetic.cli.jobs import CONTEXT, NAMESPACE
from kinetic.cli.output import console, errors, fail
from kinetic.model import layout, limits
from kinetic.model import resources as r
from kinetic.model.fanout import grid_point
from kinetic.model.ranges import parse_ranges

KINDS = {"KineticJob": r.JOB_PLURAL, "KineticBatch": r.BATCH_PLURAL}
API_VERSION = f"{r.GROUP}/{r.VERSION}"
DEFAULT_IMAGE = "(operator default)"
INPUT_WIDTH = 60


class DocumentError(ValueError):
    """A document cannot be submitted; the message names the document and the field."""


@dataclass(frozen=True)
class Document:
    """One object of the file, checked locally."""

    number: int  # 1-based position in the file, for messages
    kind: str
    name: str
    namespace: str
    body: dict[str, Any]

    @property
    def plural(self) -> str:
        return KINDS[self.kind]

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name} in {self.namespace}"


# --------------------------------------------------------------------------- reading


def load_documents(text: str, default_namespace: str, *, forced: bool = False) -> list[Document]:
    """Every non-empty YAML document, parsed and checked; raises DocumentError.

    ``forced`` (``-n`` given): a document naming another namespace is an
    error, as with kubectl, rather than silently going elsewhere.
    """
    try:
        raw = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise DocumentError(f"the file is not valid YAML: {exc}") from exc
    if not raw:
        raise DocumentError("the file holds no documents")
    return [check_document(i, d, default_namespace, forced) for i, d in enumerate(raw, start=1)]


def check_document(number: int, doc: Any, default_namespace: str, forced: bool = False) -> Document:
    """One document: its kind, name and spec checked as the operator would."""
    where = f"document {number}"
    if not isinstance(doc, dict):
        raise DocumentError(f"{where}: expected a mapping, got {type(doc).__name__}")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise DocumentError(
            f"{where}: kind {kind!r} cannot be submitted here; expected KineticJob or KineticBatch"
        )
    if doc.get("apiVersion") != API_VERSION:
        raise DocumentError(
            f"{where}: apiVersion must be {API_VERSION} (got {doc.get('apiVersion')!r})"
        )
    meta = doc.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise DocumentError(f"{where} ({kind}): metadata.name is required")
    namespace = meta.get("namespace") or default_namespace
    if forced and namespace != default_namespace:
        raise DocumentError(
            f"{where} ({kind}/{name}): metadata.namespace {namespace!r} does not match "
            f"--namespace {default_namespace!r}; remove one of them"
        )
    where = f"{where} ({kind}/{name})"
    spec = doc.get("spec")
    problems = (
        limits.check_job_spec(spec)
        if kind == "KineticJob"
        else limits.check_batch_spec(spec, storage_root=None)
    )
    if problems:
        raise DocumentError(f"{where}: {'; '.join(problems)}")
    model = r.KineticJobSpec if kind == "KineticJob" else r.KineticBatchSpec
    try:
        model.model_validate(spec or {})
    except ValidationError as exc:
        found = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise DocumentError(f"{where}: {found}") from None
    body = {**doc, "metadata": {**meta, "namespace": namespace}}
    return Document(number, kind, name, namespace, body)


# --------------------------------------------------------------------------- preview


def job_specs(doc: Document) -> Iterator[dict[str, Any]]:
    """Each job spec a document runs (a batch's template stands for all its inputs)."""
    spec = doc.body.get("spec") or {}
    if doc.kind == "KineticJob":
        yield spec
        return
    if isinstance(spec.get("template"), dict):
        yield spec["template"]
    for job in spec.get("jobs") or []:
        if isinstance(job, dict):
            yield job


def job_count(doc: Document) -> int:
    """How many jobs (Pods' worth of work) a document runs."""
    spec = doc.body.get("spec") or {}
    if doc.kind == "KineticJob":
        return 1
    if isinstance(spec.get("jobs"), list):
        return len(spec["jobs"])
    return limits.input_total(spec.get("inputs") or {}, limits.MAX_INPUTS_CEILING)


def image_of(job: dict[str, Any]) -> str:
    container = job.get("container") or {}
    return container.get("image") or job.get("image") or DEFAULT_IMAGE


def preview_rows(docs: list[Document]) -> list[dict[str, Any]]:
    """One row per document: kind, name, namespace, jobs, images and accelerators.

    Accelerators are counted per job: a batch of 10 inputs on gpu-l4 needs
    ``10 x gpu-l4`` over its life (at most maxConcurrent at once).
    """
    rows = []
    for doc in docs:
        n = job_count(doc)
        specs = list(job_specs(doc))
        per_job = n if doc.kind == "KineticJob" or len(specs) <= 1 else 1
        accelerators: dict[str, int] = {}
        for job in specs:
            name = job.get("accelerator") or "cpu"
            accelerators[name] = accelerators.get(name, 0) + per_job
        rows.append(
            {
                "kind": doc.kind,
                "name": doc.name,
                "namespace": doc.namespace,
                "jobs": n,
                "images": sorted({image_of(j) for j in specs}),
                "accelerators": accelerators,
            }
        )
    return rows


def accelerator_totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Jobs per accelerator over every document."""
    total: dict[str, int] = {}
    for row in rows:
        for name, n in row["accelerators"].items():
            total[name] = total.get(name, 0) + n
    return dict(sorted(total.items()))


def _fmt_accelerators(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} x {name}" for name, n in sorted(counts.items())) or "-"


def preview_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Submission preview")
    for col in ("kind", "name", "namespace", "jobs", "images", "accelerators"):
        table.add_column(col.upper(), justify="right" if col == "jobs" else "left")
    for row in rows:
        table.add_row(
            row["kind"],
            row["name"],
            row["namespace"],
            f"{row['jobs']:,}",
            ", ".join(row["images"]),
            _fmt_accelerators(row["accelerators"]),
        )
    return table


# --------------------------------------------------------------------------- the report


def input_label(spec: dict[str, Any], index: int) -> str:
    """What input ``index`` of a batch is, short enough for one table cell."""
    inputs = spec.get("inputs") or {}
    jobs = spec.get("jobs")
    if isinstance(jobs, list) and index < len(jobs):
        return f"jobs[{index}]"
    if isinstance(inputs.get("items"), list) and index < len(inputs["items"]):
        text = json.dumps(inputs["items"][index], default=str)
    elif isinstance(inputs.get("grid"), dict):
        text = json.dumps(grid_point(inputs["grid"], index), default=str)
    else:
        text = f"input {index} (uploaded)"
    return text if len(text) <= INPUT_WIDTH else text[: INPUT_WIDTH - 1] + "…"


def batch_report(
    spec: dict[str, Any],
    status: dict[str, Any],
    records: dict[int, dict[str, Any]],
) -> list[dict[str, Any]]:
    """One row per input: index, input, outcome, attempts, message.

    ``records`` are the manifest's per-input records (outcome, attempts,
    message); the status's index ranges fill in what the manifest does not
    have yet, and inputs never launched are NOT_STARTED.
    """
    total = status.get("total") or 0
    by_range = {}
    for outcome, key in (
        ("SUCCEEDED", "succeededIndexes"),
        ("FAILED", "failedIndexes"),
        ("CANCELLED", "cancelledIndexes"),
    ):
        for i in parse_ranges(status.get(key) or ""):
            by_range[i] = outcome
    rows = []
    for i in range(total):
        rec = records.get(i) or {}
        lines = (rec.get("message") or "").strip().splitlines()
        rows.append(
            {
                "index": i,
                "input": input_label(spec, i),
                "outcome": by_range.get(i) or rec.get("outcome") or "NOT_STARTED",
                "attempts": len(rec.get("attempts") or []),
                "message": lines[-1] if lines else "",  # the last line says what went wrong
            }
        )
    return rows


def job_report(status: dict[str, Any]) -> list[dict[str, Any]]:
    """The one row of a KineticJob."""
    return [
        {
            "index": "-",
            "input": "-",
            "outcome": status.get("phase") or "PENDING",
            "attempts": status.get("attempt") or 0,
            "message": status.get("message") or "",
        }
    ]


def all_succeeded(reports: list[list[dict[str, Any]]]) -> bool:
    return all(row["outcome"] == "SUCCEEDED" for rows in reports for row in rows) and bool(reports)


# --------------------------------------------------------------------------- the command


FILE_OPTION = typer.Option(
    ...,
    "--file",
    "-f",
    help="YAML with one or more KineticBatch / KineticJob documents; - reads stdin.",
)


def register(app: typer.Typer) -> None:
    """Add `submit` to the `kinetic batches` group."""
    app.command("submit")(submit)


def submit(
    file: Path = FILE_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check and preview only (server-side dry run); create nothing."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Submit without asking."),
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
    text = sys.stdin.read() if str(file) == "-" else _read(file)
    try:
        default_ns = namespace or kube.current_namespace(context)
        docs = load_documents(text, default_ns, forced=namespace is not None)
    except DocumentError as exc:
        raise fail(f"{file}: {exc}") from None
    _server_dry_run(docs, context)
    rows = preview_rows(docs)
    console.print(preview_table(rows))
    console.print(f"Total: {_fmt_accelerators(accelerator_totals(rows))}")
    if dry_run:
        console.print(
            "[bold]Dry run[/bold]: the API server accepted every document; nothing was created."
        )
        return
    if not yes and not _confirmed(len(docs)):
        raise fail("not submitted: confirm at a terminal or pass --yes", code=1)
    for doc in docs:
        try:
            kube.create(doc.plural, doc.namespace, doc.body, context)
        except ApiException as exc:
            raise fail(f"{doc.label}: not created: {_api_message(exc)}") from None
        console.print(f"created {doc.label}")
    if not wait:
        return
    reports = _wait(docs, context, timeout)
    raise typer.Exit(0 if all_succeeded(reports) else 1)


def _read(file: Path) -> str:
    try:
        return file.read_text()
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror}") from None


def _server_dry_run(docs: list[Document], context: str | None) -> None:
    """Every document through the API server (schema, webhook, policy), nothing stored."""
    refused = []
    for doc in docs:
        try:
            kube.custom(context).create_namespaced_custom_object(
                r.GROUP,
                r.VERSION,
                doc.namespace,
                doc.plural,
                doc.body,
                dry_run="All",
                _content_type="application/json",
            )
        except ApiException as exc:
            refused.append(f"{doc.label}: {_api_message(exc)}")
        except kube.ClusterUnreachable as exc:
            raise fail(str(exc)) from None
    if refused:
        raise fail("the API server refused (nothing was created):\n  " + "\n  ".join(refused))


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def _confirmed(n: int) -> bool:
    """Ask at a terminal; without one the answer is no."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        errors.print("No terminal to confirm at, and no --yes: nothing was submitted.")
        return False
    return typer.confirm(f"Submit {n} object{'s' * (n != 1)}?", default=False)


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

    Watches, not polls (see `kinetic.api.kube`); ``None`` is put when it is
    deleted or the watch fails, so the waiter never waits for a silent thread.
    """
    try:
        for obj in kube.watch_one(doc.plural, doc.namespace, doc.name, timeout, context):
            status = (obj or {}).get("status") or {}
            out.put((i, status if obj is not None else None))
            if obj is None or r.Phase(status.get("phase") or "PENDING").terminal:
                return
    except Exception:  # noqa: BLE001 — timeout or a broken watch: this object is done waiting
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


def _batch_rows(doc: Document, status: dict[str, Any], context: str | None) -> list[dict[str, Any]]:
    """The report of a batch, from its status and its manifest's per-input records."""
    obj = kube.get(doc.plural, doc.namespace, doc.name, context) or {}
    records: dict[int, dict[str, Any]] = {}
    root = _storage_root(context)
    uid = (obj.get("metadata") or {}).get("uid")
    if root and uid:
        home = layout.batch_home(root, doc.namespace, doc.name, uid)
        total = status.get("total") or 0
        for shard in range(layout.shard_of(total - 1) + 1 if total else 0):
            found = read_shard(home, shard)
            for key, rec in (found.inputs if found else {}).items():
                records[int(key)] = rec.model_dump(mode="json")
    return batch_report(doc.body.get("spec") or {}, status, records)


def _storage_root(context: str | None) -> str | None:
    try:
        return resolve(context=context).storage_root
    except Exception:  # noqa: BLE001 — the report falls back to the status's index ranges
        return None
