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
`kinetic.api.policy`): with ``dryRunDefault`` the command only previews
unless ``--yes``, ``--no-dry-run`` (or the file's ``confirmed: true`` /
``dry_run: false``) says to submit; with ``requireConfirmation`` a person
must answer at a terminal and ``--yes`` does not stand in for that answer.

The preview, the decisions and the report are built by pure functions
(tested alone); the command only reads the file, talks to the API server
and prints.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue
from threading import Thread
from typing import Any, Literal

import typer
import yaml
from kubernetes.client import ApiException
from pydantic import ValidationError
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kinetic.api import kube
from kinetic.api.config import resolve
from kinetic.api.inputs import read_shard
from kinetic.api.policy import policy_source, read_submission_policy
from kinetic.cli import guide
from kinetic.cli.jobs import CONTEXT, NAMESPACE
from kinetic.cli.output import console, errors, fail
from kinetic.model import layout, limits
from kinetic.model import resources as r
from kinetic.model.catalog import default_catalog
from kinetic.model.fanout import grid_point
from kinetic.model.policy_keys import DRY_RUN_DEFAULT, REQUIRE_CONFIRMATION, SubmissionPolicy
from kinetic.model.ranges import parse_ranges

KINDS = {"KineticJob": r.JOB_PLURAL, "KineticBatch": r.BATCH_PLURAL}
API_VERSION = f"{r.GROUP}/{r.VERSION}"
DEFAULT_IMAGE = "(operator default)"
INPUT_WIDTH = 60


class DocumentError(ValueError):
    """A document cannot be submitted; the message names the document and the field.

    ``where`` is the document ("document 2 (KineticJob/x)"), empty for the
    whole file; ``problem`` the rest of the message.
    """

    def __init__(self, problem: str, where: str = "") -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


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


@dataclass(frozen=True)
class Refusal:
    """An object of the file that will not be created: where it is, and why."""

    label: str
    reason: str


Entry = Document | Refusal


@dataclass(frozen=True)
class Contents:
    """A file's objects in order (each checked, or refused) and its own settings."""

    entries: list[Entry]
    settings: guide.RequestSettings = field(default_factory=guide.RequestSettings)

    @property
    def refusals(self) -> list[Refusal]:
        return [e for e in self.entries if isinstance(e, Refusal)]


# --------------------------------------------------------------------------- reading


def read_file(
    text: str,
    default_namespace: str,
    *,
    forced: bool = False,
    accelerators: Callable[[], Sequence[str]] = lambda: default_catalog().names(),
) -> Contents:
    """Every object of the file, in order, each checked or refused with its reason.

    Raises DocumentError only for the file as a whole (not YAML, empty, a
    guide request that is not one). ``forced`` (``-n`` given): an object
    naming another namespace is refused, as with kubectl, rather than
    silently going elsewhere. ``accelerators``: the names the cluster's
    catalog offers, asked for only when a guide request counts GPUs.
    """
    raw = _parse(text)
    if not any(guide.is_request(d) for d in raw):
        checked = [_checked(i, d, default_namespace, forced) for i, d in enumerate(raw, 1)]
        return Contents(_once_each(checked))
    if len(raw) != 1:
        raise DocumentError(
            "a request in the batch-submission guide's format (jobs: [...]) must be the "
            "file's only document"
        )
    try:
        settings = guide.request_settings(raw[0])
    except guide.GuideError as exc:
        raise DocumentError(str(exc)) from None
    entries: list[Entry] = []
    for i, job in enumerate(raw[0]["jobs"]):
        try:
            where, body = guide.job_object(i, job, accelerators() if _counts_gpus(job) else ())
            entries.append(check_document(i + 1, body, default_namespace, forced, where=where))
        except (guide.GuideError, DocumentError) as exc:
            entries.append(Refusal(exc.where, exc.problem))
    return Contents(_once_each(entries), settings)


def load_documents(text: str, default_namespace: str, *, forced: bool = False) -> list[Document]:
    """Every object of the file, checked; raises DocumentError at the first one refused."""
    contents = read_file(text, default_namespace, forced=forced)
    if contents.refusals:
        first = contents.refusals[0]
        raise DocumentError(first.reason, first.label)
    return [e for e in contents.entries if isinstance(e, Document)]


def _parse(text: str) -> list[Any]:
    try:
        raw = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        if text.lstrip().startswith("{"):  # JSON that YAML cannot read (tabs, say)
            try:
                return [json.loads(text)]
            except ValueError:
                pass
        raise DocumentError(f"the file is not valid YAML: {exc}") from exc
    if not raw:
        raise DocumentError("the file holds no documents")
    return raw


def _once_each(entries: list[Entry]) -> list[Entry]:
    """A second object of the same kind, namespace and name is refused: it cannot be created."""
    seen = set()
    kept: list[Entry] = []
    for entry in entries:
        if isinstance(entry, Document):
            key = (entry.kind, entry.namespace, entry.name)
            if key in seen:
                entry = Refusal(
                    entry.label,
                    f"the file holds {entry.kind}/{entry.name} more than once; "
                    "give each object its own name",
                )
            seen.add(key)
        kept.append(entry)
    return kept


def _counts_gpus(job: Any) -> bool:
    return isinstance(job, dict) and (job.get("gpus") is not None or "gpu_type" in job)


def _checked(number: int, doc: Any, default_namespace: str, forced: bool) -> Entry:
    try:
        return check_document(number, doc, default_namespace, forced)
    except DocumentError as exc:
        return Refusal(exc.where, exc.problem)


def check_document(
    number: int,
    doc: Any,
    default_namespace: str,
    forced: bool = False,
    where: str | None = None,
) -> Document:
    """One document: its kind, name and spec checked as the operator would.

    ``where`` names it in messages (a guide request's ``jobs[1] (name)``);
    by default ``document N (Kind/name)``.
    """
    named = where is not None
    where = where or f"document {number}"
    if not isinstance(doc, dict):
        raise DocumentError(f"expected a mapping, got {type(doc).__name__}", where)
    kind = doc.get("kind")
    if kind not in KINDS:
        raise DocumentError(
            f"kind {kind!r} cannot be submitted here; expected KineticJob or KineticBatch", where
        )
    if doc.get("apiVersion") != API_VERSION:
        raise DocumentError(
            f"apiVersion must be {API_VERSION} (got {doc.get('apiVersion')!r})", where
        )
    meta = doc.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise DocumentError("metadata.name is required", where if named else f"{where} ({kind})")
    if not named:
        where = f"{where} ({kind}/{name})"
    namespace = meta.get("namespace") or default_namespace
    if forced and namespace != default_namespace:
        raise DocumentError(
            f"metadata.namespace {namespace!r} does not match --namespace "
            f"{default_namespace!r}; remove one of them",
            where,
        )
    spec = doc.get("spec")
    problems = (
        limits.check_job_spec(spec)
        if kind == "KineticJob"
        else limits.check_batch_spec(spec, storage_root=None)
    )
    if problems:
        raise DocumentError("; ".join(problems), where)
    model = r.KineticJobSpec if kind == "KineticJob" else r.KineticBatchSpec
    try:
        model.model_validate(spec or {})
    except ValidationError as exc:
        found = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise DocumentError(found, where) from None
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


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Decision:
    """What the command does after the preview."""

    dry_run: bool  # preview only: create nothing
    by_policy: bool  # ... because the policy's dryRunDefault says so
    ask: bool  # a person answers at a terminal before anything is created
    person_required: bool  # requireConfirmation: only that answer counts, never a yes
    yes_ignored: bool  # a yes was given, and does not count


def decide(
    dry_run: bool | None,
    yes: bool,
    settings: guide.RequestSettings,
    policy: SubmissionPolicy,
) -> Decision:
    """Preview or submit, and whether to ask: the flags, then the file, then the policy.

    ``--dry-run``/``--no-dry-run`` (else the file's ``dry_run``) decides when
    given; otherwise the policy's dryRunDefault previews unless a yes
    (``--yes``, the file's ``confirmed: true``) says to submit. A person is
    asked unless there is a yes, and always under requireConfirmation.
    """
    approved = yes or settings.confirmed is True
    explicit = dry_run if dry_run is not None else settings.dry_run
    by_policy = explicit is None and policy.dry_run_default and not approved
    return Decision(
        dry_run=bool(explicit) or by_policy,
        by_policy=by_policy,
        ask=policy.require_confirmation or not approved,
        person_required=policy.require_confirmation,
        yes_ignored=policy.require_confirmation and approved,
    )


def to_create(entries: list[Entry], stop_on_error: bool) -> list[Document]:
    """The objects creation will try: every accepted one, or those before the first refusal."""
    docs = []
    for entry in entries:
        if isinstance(entry, Document):
            docs.append(entry)
        elif stop_on_error:
            break
    return docs


Result = Literal["created", "failed", "not attempted"]


@dataclass(frozen=True)
class Outcome:
    """What became of one object of the file."""

    label: str
    result: Result
    detail: str = ""
    doc: Document | None = None  # the object, when it was created


def create_all(
    entries: list[Entry], create: Callable[[Document], object], stop_on_error: bool
) -> list[Outcome]:
    """Create the accepted objects in file order; one Outcome per entry.

    A refusal (by the checks, or the API server's answer to the create) is a
    failure with its reason, and with ``stop_on_error`` everything after the
    first failure is not attempted. An error that is no answer (the API
    server cannot be reached) stops creation whatever the setting: every
    later create would fail the same way.
    """
    outcomes: list[Outcome] = []
    stopped_at: str | None = None
    for entry in entries:
        if stopped_at is not None:
            outcomes.append(Outcome(entry.label, "not attempted", f"stopped at {stopped_at}"))
            continue
        if isinstance(entry, Refusal):
            reason, stop = entry.reason, stop_on_error
        else:
            try:
                create(entry)
            except ApiException as exc:
                reason, stop = _api_message(exc), stop_on_error
            except Exception as exc:  # noqa: BLE001 — no answer at all: stop here
                reason, stop = f"the API server could not be reached: {exc}", True
            else:
                outcomes.append(Outcome(entry.label, "created", doc=entry))
                continue
        outcomes.append(Outcome(entry.label, "failed", reason))
        if stop:
            stopped_at = f"the failure of {entry.label}"
    return outcomes


def summary_lines(outcomes: list[Outcome]) -> list[str]:
    """The submission's summary: the counts, then each object with its result and reason."""
    counts = {
        result: sum(o.result == result for o in outcomes)
        for result in ("created", "failed", "not attempted")
    }
    n = len(outcomes)
    said = ", ".join(f"{k} {result}" for result, k in counts.items() if k)
    lines = [f"Submitted {n} object{'s' * (n != 1)}: {said}"]
    for o in outcomes:
        lines.append(f"  {o.result:<13}  {o.label}" + (f": {o.detail}" if o.detail else ""))
    return lines


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
    contents = _contents(file, namespace, context)
    settings = contents.settings
    on_error = next(
        (said for said in (continue_on_error, settings.continue_on_error) if said is not None),
        True,  # the guide's default: go on past a refused object
    )
    entries = _preflight(contents, on_error, context)
    decision = _decision(dry_run, yes, settings, context)
    planned = to_create(entries, stop_on_error=on_error is False)
    if decision.dry_run:
        _say_dry_run(decision, len(planned), len(entries))
        raise typer.Exit(0 if len(planned) == len(entries) else 1)
    if planned and decision.ask and not _confirmed(len(planned), decision):
        how = "confirm at a terminal" + (
            f" ({policy_source()}: {REQUIRE_CONFIRMATION})"
            if decision.person_required
            else " or pass --yes"
        )
        raise fail(f"not submitted: {how}", code=1)

    def create(doc: Document) -> object:
        return kube.create(doc.plural, doc.namespace, doc.body, context)

    outcomes = create_all(entries, create, stop_on_error=on_error is False)
    _print_summary(outcomes)
    created = [o.doc for o in outcomes if o.doc is not None]
    missed = len(outcomes) - len(created)
    if missed:
        errors.print(f"[red]error:[/red] {missed} of {len(outcomes)} objects were not created")
    if wait and created:
        reports = _wait(created, context, timeout)
        raise typer.Exit(0 if all_succeeded(reports) and not missed else 1)
    raise typer.Exit(1 if missed else 0)


def _contents(file: Path, namespace: str | None, context: str | None) -> Contents:
    """The file's objects, each checked locally; a file that cannot be read ends the command."""
    text = sys.stdin.read() if str(file) == "-" else _read(file)
    try:
        default_ns = namespace or kube.current_namespace(context)
        return read_file(
            text,
            default_ns,
            forced=namespace is not None,
            accelerators=lambda: _accelerators(context),
        )
    except DocumentError as exc:
        raise fail(f"{file}: {escape(str(exc))}") from None


def _preflight(contents: Contents, on_error: bool, context: str | None) -> list[Entry]:
    """The local checks' refusals, then the server-side dry run's, then the preview."""
    entries = _server_dry_run(contents.entries, context)
    _preview(entries, stop=on_error is False)
    return entries


def _decision(
    dry_run: bool | None, yes: bool, settings: guide.RequestSettings, context: str | None
) -> Decision:
    """`decide`, with the live policy read unless this is a dry run anyway."""
    explicit_dry = dry_run if dry_run is not None else settings.dry_run
    policy, note = (SubmissionPolicy(), None) if explicit_dry else read_submission_policy(context)
    if note:
        errors.print(f"[dim]{escape(note)}[/dim]", soft_wrap=True)
    return decide(dry_run, yes, settings, policy)


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
                kube.custom(context).create_namespaced_custom_object(
                    r.GROUP,
                    r.VERSION,
                    entry.namespace,
                    entry.plural,
                    entry.body,
                    dry_run="All",
                    _content_type="application/json",
                )
            except ApiException as exc:
                entry = Refusal(entry.label, _api_message(exc))
            except kube.ClusterUnreachable as exc:
                raise fail(str(exc)) from None
        checked.append(entry)
    return checked


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def _preview(entries: list[Entry], stop: bool) -> None:
    """The preview of what will be created; then what was refused, and what will not be tried."""
    planned = to_create(entries, stop_on_error=stop)
    if planned:
        rows = preview_rows(planned)
        console.print(preview_table(rows))
        console.print(f"Total: {_fmt_accelerators(accelerator_totals(rows))}")
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
