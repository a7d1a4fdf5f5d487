"""Resolving ``spec.inputs.fromBatch``: a rerun's inputs from its source batch's records.

The source is read from storage only — its accepted spec and its manifest
header, under *this* namespace's prefix (`kinetic.layout`), by the UID the
spec names or the one its name's ``current.json`` points at — so it works
after the source batch was deleted, and a batch can never read another
namespace's. The resolution happens once: the accepted spec stored for the
rerun holds the result (template, inputs with ``indexes``, input mode),
and every later reconcile, also after an operator restart, reuses it.

`rerun_spec` is the pure decision; `load_source` the reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kinetic import layout, storage
from kinetic.fanout import input_count
from kinetic.manifest import ManifestHeader, decode_header
from kinetic.rerun import SELECT_FAILED, SelectionError, originals, select
from kinetic.resources import FromBatch, KineticBatchSpec, Phase
from pydantic import ValidationError

from kinetic_operator.bounded_read import TooLarge, read_at_most

FIELD = "spec.inputs.fromBatch"
MAX_SPEC_BYTES = 8 << 20  # an accepted spec is bounded by the API server's object size


class SourceProblem(ValueError):
    """The source batch cannot be rerun; the message names the field and what to do."""


@dataclass(frozen=True)
class Source:
    """What the operator read about the source batch."""

    uid: str
    spec: KineticBatchSpec
    header: ManifestHeader | None


def rerun_spec(spec: KineticBatchSpec, source: Source) -> KineticBatchSpec:
    """The spec the rerun runs: the source's inputs restricted to the selection.

    The template is this spec's when given, else the source's; the input
    mode is always the source's (it says how its inputs are passed). Raises
    `SourceProblem`.
    """
    wanted = spec.inputs.from_batch if spec.inputs is not None else None
    assert wanted is not None
    src = source.spec
    if src.inputs is None:
        raise SourceProblem(
            f"{FIELD}.name: batch {wanted.name} is a batch of different jobs (spec.jobs), "
            "which fromBatch cannot rerun; list the jobs to run again in a new batch's spec.jobs"
        )
    if src.inputs.from_batch is not None and src.inputs.indexes is None:
        raise SourceProblem(
            f"{FIELD}.name: batch {wanted.name} never resolved its own inputs "
            "(it failed before it ran), so there is nothing to rerun"
        )
    header = source.header
    if wanted.indexes == SELECT_FAILED:
        if header is None:
            raise SourceProblem(
                f"{FIELD}.indexes: batch {wanted.name} has no manifest yet, so which of its "
                "inputs failed is not known; rerun it once it has finished"
            )
        if not Phase(header.phase).terminal:
            raise SourceProblem(
                f"{FIELD}.indexes: batch {wanted.name} is still {header.phase}; rerun its "
                "failed inputs once it has finished (or name them as ranges)"
            )
    try:
        positions = select(
            wanted.indexes,
            total=input_count(src.inputs),
            failed=header.failed_indexes if header else "",
            submission_failures=[f.index for f in src.submission_failures],
        )
    except SelectionError as exc:
        raise SourceProblem(f"{FIELD}.indexes: {exc}") from None
    inputs = src.inputs.model_copy(
        update={
            "indexes": str(originals(src.inputs.indexes, positions)),
            "from_batch": FromBatch(name=wanted.name, uid=source.uid, indexes=wanted.indexes),
        }
    )
    return spec.model_copy(
        update={
            "template": spec.template or src.template,
            "inputs": inputs,
            "input_mode": src.input_mode,
        }
    )


def load_source(root: str, namespace: str, wanted: FromBatch) -> Source:
    """Read the source batch's accepted spec and manifest header from this namespace's storage.

    Raises `SourceProblem` for a source that is missing or unreadable;
    storage being unreachable propagates (the reconcile is retried).
    """
    uid = wanted.uid or _current_uid(root, namespace, wanted.name)
    try:
        home = layout.batch_home(root, namespace, wanted.name, uid)
    except ValueError as exc:
        raise SourceProblem(f"{FIELD}: {exc}") from None
    doc = _json(home.accepted_spec_uri, wanted.name)
    if doc is None:
        raise SourceProblem(
            f"{FIELD}.name: batch {wanted.name} (uid {uid}) has no record in namespace "
            f"{namespace}'s storage; it never ran, or it was cleaned up"
        )
    if doc.get("uid") != uid:
        raise SourceProblem(f"{FIELD}.name: the record of batch {wanted.name} is not its own")
    try:
        spec = KineticBatchSpec.model_validate(doc.get("spec") or {})
    except ValidationError as exc:
        raise SourceProblem(
            f"{FIELD}.name: the accepted spec of batch {wanted.name} is unreadable: "
            f"{exc.errors()[0]['msg']}"
        ) from None
    try:
        header = decode_header(storage.read_bytes(home.manifest_uri))
    except storage.NotFound:
        header = None
    except ValueError as exc:
        why = f"{FIELD}.name: the manifest of {wanted.name} is unreadable: {exc}"
        raise SourceProblem(why) from None
    return Source(uid=uid, spec=spec, header=header)


def _current_uid(root: str, namespace: str, name: str) -> str:
    try:
        uri = layout.current_uri(root, namespace, "batches", name)
    except ValueError as exc:
        raise SourceProblem(f"{FIELD}.name: {exc}") from None
    doc = _json(uri, name)
    uid = (doc or {}).get("uid")
    if not isinstance(uid, str):
        raise SourceProblem(
            f"{FIELD}.name: no batch named {name} has run in namespace {namespace} "
            "(check the name: it is the group id, grp-...)"
        )
    return uid


def _json(uri: str, name: str) -> dict[str, Any] | None:
    try:
        raw: Any = json.loads(read_at_most(uri, MAX_SPEC_BYTES))
    except storage.NotFound:
        return None
    except (TooLarge, ValueError) as exc:
        why = f"{FIELD}.name: the record of batch {name} is unreadable: {exc}"
        raise SourceProblem(why) from None
    return raw if isinstance(raw, dict) else None
