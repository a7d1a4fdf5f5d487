"""`kinetic batches rerun` and `BatchHandle.rerun`: a new batch over inputs of an earlier one.

The client only decides *which* inputs (the source's failed ones, or all)
and writes them into a new KineticBatch as ``spec.inputs.fromBatch`` with
explicit index ranges and the source's UID; the operator resolves the
inputs and the template from the source batch (see
`kinetic_operator.rerun_source`), exactly as for a batch written by hand.
Each input keeps its original index. This module makes the new batch;
`kinetic.api.batches.rerun_batch`, above it, hands back its `BatchHandle`.

The source is read through the API server: its spec and status, and its
manifest only as its status vouches for it (`kinetic.api.vouched`). A source
that was deleted is not rerun: nothing in the API server vouches for its
records any more, and any Pod or bucket writer can change them (its
template names the code the rerun would run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client import ApiException

from kinetic.api.config import ClientConfig
from kinetic.api.inputs import vouched_manifest
from kinetic.api.kube import KubeClient, kube_reason
from kinetic.model import layout, names
from kinetic.model import resources as r
from kinetic.model.manifest import ManifestHeader
from kinetic.model.ranges import IndexSet
from kinetic.model.rerun import SELECT_ALL, SELECT_FAILED, SelectionError, original_index, select


class _WithManifest(Protocol):
    """A batch handle, as far as `rerun_origin` reads it (`kinetic.api.batches`, above)."""

    def _manifest(self) -> ManifestHeader | None: ...


# Settings a rerun takes over from its source (the inputs and template come via fromBatch).
_CARRIED = (
    "template",
    "inputMode",
    "maxConcurrent",
    "chunkSize",
    "retries",
    "failFast",
    "cancelRunningOnFail",
    "tags",
)


@dataclass(frozen=True)
class SourceView:
    """What the client knows about the batch to rerun."""

    group_id: str
    uid: str
    spec: dict[str, Any]  # the object's (all but maxConcurrent and cancel as accepted)
    phase: str
    total: int
    failed: str


def source_view(group_id: str, namespace: str, root: str, kube: KubeClient) -> SourceView:
    """The source batch, from its object (and its manifest, as its status vouches for it)."""
    obj = kube.get(r.BATCH_PLURAL, namespace, group_id)
    uid = (obj or {}).get("metadata", {}).get("uid")
    if obj is None or not uid:
        raise LookupError(
            f"No KineticBatch {group_id!r} in namespace {namespace!r}: a batch is rerun from "
            "its object, whose status vouches for its records; once it is deleted, nothing "
            "does (any Pod or bucket writer can change storage), so a deleted batch cannot be "
            "rerun. Check the group id and namespace (`kinetic batches list`)."
        )
    home = layout.batch_home(root, namespace, group_id, uid)
    live = obj.get("status") or {}
    header = None
    if live.get("truncated"):  # its ranges were cut: the manifest it vouches for has them
        manifest = vouched_manifest(home, namespace, group_id, kube)
        manifest.seen(live)
        header = manifest.header()
    phase, total, failed = source_state(group_id, live, header)
    return SourceView(group_id, uid, obj.get("spec") or {}, phase, total, failed)


def source_state(
    group_id: str, status: dict[str, Any] | None, header: ManifestHeader | None
) -> tuple[str, int, str]:
    """Phase, input count and failed ranges of the source: from its live status (None once
    deleted) and its manifest header.

    The manifest has the complete ranges (the status may cut them), but it is
    written just after the status: a batch that has just ended may still
    have an older header, and then the live status is the truth.
    """
    live_phase = (status or {}).get("phase", "PENDING")
    live_final = status is not None and r.Phase(live_phase).terminal
    if header is not None and (r.Phase(header.phase).terminal or not live_final):
        return header.phase, header.total, header.failed_indexes
    if status is None:
        return "PENDING", 0, ""
    if live_final and status.get("truncated"):
        raise ValueError(
            f"Batch {group_id} has just finished and its manifest is still being written; "
            "try again in a few seconds."
        )
    return live_phase, status.get("total", 0), status.get("failedIndexes", "")


def rerun_body(
    source: SourceView, *, failed: bool, namespace: str, new_name: str
) -> tuple[dict[str, Any], IndexSet]:
    """The new KineticBatch (and the source indexes it runs). Raises ValueError to refuse."""
    if failed and not r.Phase(source.phase).terminal:
        raise ValueError(
            f"Batch {source.group_id} is still {source.phase}: rerun its failed inputs once it "
            f"has finished (`kinetic batches watch {source.group_id}`), or use --all."
        )
    failures = [f.get("index") for f in source.spec.get("submissionFailures") or []]
    try:
        chosen = select(
            SELECT_FAILED if failed else SELECT_ALL,
            total=source.total,
            failed=source.failed,
            submission_failures=[i for i in failures if isinstance(i, int)],
        )
    except SelectionError as exc:
        raise ValueError(f"Nothing to rerun in batch {source.group_id}: {exc}.") from None
    spec: dict[str, Any] = {k: source.spec[k] for k in _CARRIED if k in source.spec}
    if source.spec.get("name"):
        spec["name"] = source.spec["name"]
    spec["inputs"] = {
        "fromBatch": {"name": source.group_id, "uid": source.uid, "indexes": str(chosen)}
    }
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {
            "name": new_name,
            "namespace": namespace,
            "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY},
            "annotations": {"kinetic.dev/rerun-of": source.group_id},
        },
        "spec": spec,
    }
    return body, chosen


def create_rerun(
    cfg: ClientConfig, group_id: str, kube: KubeClient, *, failed: bool, new_name: str
) -> dict[str, Any]:
    """Create batch ``new_name`` running the failed (or all) inputs of batch ``group_id``
    again, through ``kube``; return the created object.

    The source batch must still exist (see the module docstring). Raises
    LookupError (no such batch) or ValueError (nothing to rerun, the source
    has not finished and ``failed`` is set, or the API server refused it).
    """
    source = source_view(group_id, cfg.namespace, cfg.storage_root, kube)
    body, _ = rerun_body(source, failed=failed, namespace=cfg.namespace, new_name=new_name)
    try:
        return kube.create(r.BATCH_PLURAL, cfg.namespace, body)
    except ApiException as exc:
        if exc.status == 409:
            raise ValueError(
                f"A batch named {body['metadata']['name']} already exists in namespace "
                f"{cfg.namespace}: choose another --name (or leave it out for a fresh one)."
            ) from None
        raise ValueError(f"The API server refused the rerun batch: {kube_reason(exc)}") from None


@dataclass(frozen=True)
class RerunOrigin:
    """Where a rerun batch's inputs come from, as its manifest records it."""

    source: str
    uid: str | None
    selected: str
    indexes: str  # input p is the p-th original index of these ranges

    def original(self, position: int) -> int:
        return original_index(self.indexes, position)

    def summary(self) -> str:
        return f"{self.source} ({self.selected}); original indexes {self.indexes}"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.source,
            "uid": self.uid,
            "selected": self.selected,
            "originalIndexes": self.indexes,
        }


def rerun_origin(handle: _WithManifest) -> RerunOrigin | None:
    """The batch's source and index map when it is a rerun (from its manifest), else None."""
    header = handle._manifest()
    if header is None or header.rerun_of is None or header.original_indexes is None:
        return None
    of = header.rerun_of
    return RerunOrigin(of.name, of.uid, of.selected, header.original_indexes)
