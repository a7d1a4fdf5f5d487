"""What `kinetic batches submit` shows and decides, as pure functions.

The preview (kind, name, namespace, jobs, images, accelerators), the
decisions (preview only or submit, ask or not, which objects to create, when to
stop) and the per-job report after ``--wait``: each a function of the file's
entries, the flags and the policy, tested without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes.client import ApiException
from rich.table import Table

from kinetic.api import kube
from kinetic.cli import guide
from kinetic.cli.submit_file import DEFAULT_IMAGE, INPUT_WIDTH, Document, Entry, Refusal
from kinetic.model import catalog, images, limits
from kinetic.model.fanout import grid_point
from kinetic.model.policy_keys import MAX_JOBS_PER_REQUEST, SubmissionPolicy
from kinetic.model.ranges import parse_ranges

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
    ``10 x gpu-l4`` over its life (at most maxConcurrent at once). A
    multi-host job counts one per Pod (`accelerators_per_job`).
    """
    rows = []
    for doc in docs:
        n = job_count(doc)
        specs = list(job_specs(doc))
        per_job = n if doc.kind == "KineticJob" or len(specs) <= 1 else 1
        accelerators: dict[str, int] = {}
        for job in specs:
            name = job.get("accelerator") or "cpu"
            accelerators[name] = accelerators.get(name, 0) + per_job * accelerators_per_job(job)
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


def accelerators_per_job(job: dict[str, Any]) -> int:
    """How many of its accelerator one job holds: one per host, as each Pod gets one
    (``hosts: 4`` of gpu-l4x2 is 4 x gpu-l4x2), but one for a multi-host TPU slice,
    whose name already stands for all its hosts (tpu-v5e-16 is one slice of 4)."""
    hosts = job.get("hosts")
    if not isinstance(hosts, int) or isinstance(hosts, bool) or hosts < 1:
        return 1  # left out, or refused by the document's own checks
    try:
        spanned = catalog.hosts_of(catalog.default_catalog(), job.get("accelerator") or "cpu")
    except catalog.UnknownAccelerator:
        spanned = 1
    return 1 if spanned > 1 else hosts


def accelerator_totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Jobs per accelerator over every document."""
    total: dict[str, int] = {}
    for row in rows:
        for name, n in row["accelerators"].items():
            total[name] = total.get(name, 0) + n
    return dict(sorted(total.items()))


def format_accelerators(counts: dict[str, int]) -> str:
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
            format_accelerators(row["accelerators"]),
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


def unrecorded_endings(status: dict[str, Any], records: dict[int, dict[str, Any]]) -> list[int]:
    """Inputs the status says succeeded whose manifest record has no attempt yet: the
    manifest is written after the status, a few times a second at most. (Only successes:
    every one ran at least once, while a failed or cancelled input may never have.)"""
    succeeded = parse_ranges(status.get("succeededIndexes") or "")
    return sorted(i for i in succeeded if not (records.get(i) or {}).get("attempts"))


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


def unseen_row(label: str) -> dict[str, Any]:
    """The report's row for an object `--wait` never saw end (its watch failed or timed
    out): not a success, and the command to look at it."""
    return {
        "index": "-",
        "input": "-",
        "outcome": "UNKNOWN",
        "attempts": 0,
        "message": f"{label} was not seen ending (its watch failed or timed out); "
        "look with kubectl get or kinetic jobs status",
    }


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

    ``--dry-run``/``--no-dry-run`` decides when given, else the file's
    ``dry_run``; with neither, ``--yes`` submits and otherwise the policy's
    dryRunDefault (true unless the administrator set it false) previews. A
    file's ``confirmed: true`` is the answer to the question, not a word on
    the preview, as in the guide. A person is asked unless there is a yes
    (``--yes`` or ``confirmed: true``), and always under requireConfirmation.
    """
    approved = yes or settings.confirmed is True
    explicit = dry_run if dry_run is not None else settings.dry_run
    by_policy = explicit is None and not yes and policy.dry_run_default
    return Decision(
        dry_run=bool(explicit) or by_policy,
        by_policy=by_policy,
        ask=policy.require_confirmation or not approved,
        person_required=policy.require_confirmation,
        yes_ignored=policy.require_confirmation and approved,
    )


def request_size_problem(objects: int, limit: int | None, source: str) -> str | None:
    """Why a file of ``objects`` objects (a guide request's jobs, or documents) is too many
    for the policy's ``maxJobsPerRequest`` (``limit``; None: no limit), or None."""
    if limit is None or objects <= limit:
        return None
    return (
        f"the file holds {objects} jobs, more than {MAX_JOBS_PER_REQUEST} {limit} ({source}): "
        f"nothing was submitted. Split it into files of at most {limit} jobs, or ask the "
        f"administrator to raise {MAX_JOBS_PER_REQUEST}"
    )


def refuse_images(
    entries: list[Entry], policy: SubmissionPolicy, default_image: str | None, source: str
) -> list[Entry]:
    """``entries`` with each document whose images the policy's allowedImages refuses turned
    into a Refusal: the operator's rule and sentences (`kinetic.model.images`), so the preview
    says what admission will, before anything reaches the API server."""
    checked: list[Entry] = []
    for entry in entries:
        if isinstance(entry, Document):
            spec = entry.body.get("spec")
            jobs = images.job_specs(entry.kind, spec if isinstance(spec, dict) else {})
            allowed, exempt = policy.allowed_images, default_image
            refused = [
                why
                for at, job in jobs
                for why in images.image_refusals(at, job, allowed, exempt, source)
            ]
            if refused:
                entry = Refusal(entry.label, "; ".join(refused))
        checked.append(entry)
    return checked


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
                reason, stop = kube.kube_reason(exc), stop_on_error
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
