"""What `kinetic batches submit` reads: the file's objects, each checked locally.

A file holds KineticBatch and KineticJob documents, or one request in the
batch-submission guide's format (`kinetic.cli.guide`). Every object comes out
as a `Document` (checked against the CRD models and limits) or a `Refusal`
(where it is and why), in file order, so the command can create the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from kinetic.cli import guide
from kinetic.model import limits
from kinetic.model import resources as r
from kinetic.model.catalog import default_catalog

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
    default_gpu_type: str | None = None,
) -> Contents:
    """Every object of the file, in order, each checked or refused with its reason.

    Raises DocumentError only for the file as a whole (not YAML, empty, a
    guide request that is not one). ``forced`` (``-n`` given): an object
    naming another namespace is refused, as with kubectl, rather than
    silently going elsewhere. ``accelerators``: the names the cluster's
    catalog offers, asked for only when a guide request counts GPUs;
    ``default_gpu_type`` the policy's type for a guide job without ``gpu_type``.
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
            offered = accelerators() if _counts_gpus(job) else ()
            where, body = guide.job_object(i, job, offered, default_gpu_type)
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
    kind = _kind(doc, where)
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
    _check_spec(kind, doc.get("spec"), where)
    body = {**doc, "metadata": {**meta, "namespace": namespace}}
    return Document(number, kind, name, namespace, body)


def _kind(doc: Any, where: str) -> str:
    """The document's kind, once it is a mapping of a kind and apiVersion submitted here."""
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
    return str(kind)


def _check_spec(kind: str, spec: Any, where: str) -> None:
    """Refuse a spec the operator would: its bounds first, then the schema."""
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
