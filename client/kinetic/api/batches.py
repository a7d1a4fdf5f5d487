"""Fan-out: `run_async_map()` submits a KineticBatch; `attach_batch()` picks one up again.

The `BatchHandle` that watches a batch is `kinetic.api.batch_handle`, re-exported here.

The client packages the function once and the inputs in parallel, creates one
KineticBatch and returns. Concurrency, retries, fail-fast and the manifest
are the operator's job, so the submitting process may exit at once and any
process can pick the batch up again with `attach_batch()`.

There is no Kubernetes object per input: `kinetic.api.inputs` says where what
the client knows of one input comes from (the batch status, its Pods, the
manifest), and `InputHandle` reads it.

Handles keep no state beyond what they were created with, so a handle from
`attach_batch()` or `kinetic.attach("<grp>-<i>")` in another process is as
good as the original.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from kinetic import storage
from kinetic.api import reference
from kinetic.api.batch_handle import BatchError as BatchError  # kinetic.api.batches.*, as before
from kinetic.api.batch_handle import BatchHandle as BatchHandle
from kinetic.api.batch_handle import new_group_id as new_group_id
from kinetic.api.batch_handle import rerun_batch as rerun_batch
from kinetic.api.batch_results import InputOverview as InputOverview
from kinetic.api.batch_results import _Results as _Results
from kinetic.api.config import ClientConfig, default_namespace, resolve
from kinetic.api.data import Data, walk_data
from kinetic.api.handle import last_uid
from kinetic.api.hosts import check_hosts
from kinetic.api.inputs import (
    InputHandle,
    read_manifest,
    status_from_header,
)
from kinetic.api.inputs import read_shard as read_shard  # kinetic.api.batches.read_shard, as before
from kinetic.api.kube import KubeClient
from kinetic.api.staging import Stager
from kinetic.api.submission import SubmissionError as SubmissionError  # kinetic.SubmissionError
from kinetic.api.submission import (
    mark_unsubmitted,
    submission_failure,
    wrong_typed_inputs,
)
from kinetic.model import layout, limits, names, payload
from kinetic.model import resources as r

log = logging.getLogger("kinetic")


class Submittable(Protocol):
    """What submitting a batch needs of a function bound by `kinetic.run`.

    `kinetic.api.remote.RemoteFunction` is one. It sits above this module (its
    `run_async_map` calls `submit_map`), so this module names only what it uses.
    """

    fn: Callable[..., Any]
    options: dict[str, Any]

    @property
    def func_name(self) -> str: ...

    def _config(self) -> ClientConfig: ...

    def check_cluster(self, cfg: ClientConfig) -> None: ...

    def captured_env(self) -> dict[str, str]: ...

    def ship_project(self, cfg: ClientConfig) -> dict[str, Any] | None: ...

    def job_spec(
        self,
        function: r.FunctionSpec,
        retries: int | None = None,
        volumes: list[r.DataVolume] | None = None,
    ) -> r.KineticJobSpec: ...


_UNBOUNDED_WARNING_THRESHOLD = 100
AUTO = r.AUTO_CHUNK


# --------------------------------------------------------------------------- submitting


def _check_chunk_size(chunk_size: object) -> r.ChunkSize:
    if chunk_size == AUTO:
        return AUTO
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or not 1 <= chunk_size <= r.MAX_CHUNK_SIZE
    ):
        raise ValueError(
            f"chunk_size must be 'auto' or an integer from 1 to {r.MAX_CHUNK_SIZE} (consecutive "
            f"inputs run by one Pod); got {chunk_size!r}. 'auto' (the default) lets the "
            "operator size each Pod's share from the inputs' measured durations; 1 runs one "
            f"input per Pod; at most {r.MAX_CHUNK_SIZE} fixes a size."
        )
    return chunk_size


def submit_map(
    fn: Submittable,
    inputs: Iterable[Any],
    input_mode: r.InputMode = "auto",
    max_concurrent: int | None = limits.DEFAULT_MAX_CONCURRENT,
    retries: int | None = None,
    fail_fast: bool = False,
    cancel_running_on_fail: bool = False,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    chunk_size: r.ChunkSize = AUTO,
    hosts: int | None = None,
) -> BatchHandle:
    """Package the function once and every input, create one KineticBatch, return its handle.

    Inputs that cannot be pickled are recorded in the batch as submission
    failures (they count as failures for fail-fast) rather than raising, so
    one bad input never loses the others. `chunk_size=k` runs k consecutive
    inputs in each Pod, for very short functions whose Pod start would cost
    more than the call; each input is still recorded, retried and reported
    on its own. `hosts=N` runs every input as a gang of N Pods (the batch's
    ``template.hosts``); unset, the function's own ``kinetic.run(hosts=...)``.
    """
    if hosts is not None:
        check_hosts(hosts, fn.options["accelerator"])
    items = list(inputs)
    chunk_size = _checked_arguments(fn, input_mode, max_concurrent, chunk_size, hosts)
    # A wrong-typed item fails its own slot (never uploaded), not the whole call.
    refused = wrong_typed_inputs(items, input_mode)
    _warn_unbounded(max_concurrent, len(items))
    cfg = fn._config()
    fn.check_cluster(cfg)
    # The operator's bounds, before anything is uploaded: the same check its webhook makes.
    limits.refuse(
        limits.check_batch_spec(
            {"inputs": {"count": len(items)}}, storage_root=None, max_inputs=cfg.max_inputs
        )
    )
    group_id = new_group_id()
    root = cfg.storage_root

    # kinetic.Data: uploaded once, referenced per input; fuse=True refused before any upload
    # when the cluster cannot mount it, and mounted (volumes, after the inputs) when it can.
    # The function's volumes concern every input; an input's own Data only that input.
    stager = Stager(root, cfg.namespace, cfg.context)
    stager.check(fn.options["volumes"], [])
    items, refused = _staged_inputs(stager, fn.options["volumes"], items, refused)
    volumes = stager.volumes(fn.options["volumes"])

    # Uploaded before the batch exists: a fresh folder of the namespace's uploads.
    upload = layout.new_upload_dir(root, cfg.namespace, group_id)
    function_bytes = payload.build_function_payload(
        fn.fn, env=fn.captured_env(), project=fn.ship_project(cfg)
    )
    function_uri = layout.batch_function_uri(upload)
    storage.write_bytes(function_uri, function_bytes)
    inline = (
        payload.inline_inputs(items) if 0 < len(items) <= limits.MAX_ITEMS and not refused else None
    )
    failures: dict[int, Exception] = {}
    if inline is not None:
        batch_inputs = r.BatchInputs(items=inline)
    else:
        batch_inputs, failures = _pickled_inputs(upload, items, refused)

    function = r.FunctionSpec(
        payload_uri=function_uri, sha256=payload.sha256(function_bytes), name=fn.func_name
    )
    spec = r.KineticBatchSpec(
        template=batch_template(fn, function, volumes, hosts),
        inputs=batch_inputs,
        input_mode=input_mode,
        max_concurrent=max_concurrent,
        chunk_size=chunk_size,
        retries=fn.options["retries"] if retries is None else retries,
        fail_fast=fail_fast,
        cancel_running_on_fail=cancel_running_on_fail,
        name=name,
        tags=dict(tags or {}),
        submission_failures=[submission_failure(i, e) for i, e in sorted(failures.items())],
    )
    created = create_batch(cfg, group_id, spec)
    handle = BatchHandle.from_resource(created, root, cfg.context)
    # This process still has the exceptions themselves: their type, message and traceback.
    handle._submission_failures = {i: mark_unsubmitted(e, i) for i, e in failures.items()}
    return handle


def _checked_arguments(
    fn: Submittable,
    input_mode: r.InputMode,
    max_concurrent: int | None,
    chunk_size: r.ChunkSize,
    hosts: int | None,
) -> r.ChunkSize:
    """Refuse arguments the operator would refuse; the chunk size to send (a gang's is 1)."""
    if input_mode not in payload.INPUT_MODES:
        raise ValueError(
            f"input_mode must be one of {', '.join(payload.INPUT_MODES)}; got {input_mode!r}"
        )
    limits.check_max_concurrent(max_concurrent)
    chunk_size = _check_chunk_size(chunk_size)
    gang_hosts = hosts if hosts is not None else fn.options.get("hosts")
    gang_batch = gang_hosts is not None and gang_hosts > 1
    if chunk_size == AUTO and gang_batch:
        chunk_size = 1  # a gang runs one input on several Pods: nothing to size
    if isinstance(chunk_size, int) and chunk_size > 1 and gang_batch:
        raise ValueError(
            f"chunk_size={chunk_size} with hosts={gang_hosts}: a chunk runs several inputs in "
            "one Pod, a gang runs one input on several Pods; use chunk_size=1 for multi-host "
            "inputs"
        )
    return chunk_size


def _warn_unbounded(max_concurrent: int | None, inputs: int) -> None:
    """Say that many inputs with no bound on concurrency all start at once."""
    if max_concurrent is None and inputs > _UNBOUNDED_WARNING_THRESHOLD:
        log.warning(
            "submitting %d inputs with max_concurrent=None starts them all at once; "
            "set max_concurrent to bound cluster usage",
            inputs,
        )


def _staged_inputs(
    stager: Stager, volumes: Mapping[str, Data], items: list[Any], refused: dict[int, Exception]
) -> tuple[list[Any], dict[int, Exception]]:
    """Each input with its `Data` checked and staged on its own; the inputs that failed.

    A problem of one input's data (fuse data this cluster cannot mount, a
    local file gone or unreadable since ``Data()`` checked it: a ValueError or
    OSError) fails that input alone, recorded in its slot as the reference
    records a packaging error; the others are submitted. Inputs in
    ``refused`` (wrong-typed) are not staged. What concerns the batch as a
    whole (more fuse mounts than a Pod may have) and a storage outage, which
    is no input's problem, fail the call as before.
    """
    failures = dict(refused)
    for i, item in enumerate(items):
        if i in failures:
            continue
        try:
            stager.check(volumes, list(walk_data(item, f"input {i}")))
        except ValueError as e:  # FuseUnavailable, a DataError
            failures[i] = e
    kept = [d for i, x in enumerate(items) if i not in failures for d in walk_data(x, f"input {i}")]
    stager.check(volumes, kept)
    staged = list(items)
    for i, item in enumerate(items):
        if i in failures:
            continue
        try:
            staged[i] = stager.value(item)
        except (ValueError, OSError) as e:
            failures[i] = e
    return staged, failures


def batch_template(
    fn: Submittable,
    function: r.FunctionSpec,
    volumes: list[r.DataVolume] | None,
    hosts: int | None,
) -> r.KineticJobSpec:
    """What every input runs: the function's job spec, with ``hosts`` when the call gives it.

    Retries are the batch's (``spec.retries``), not the template's. ``hosts``
    unset keeps the function's own (``kinetic.run(hosts=...)``, itself left
    out of the spec when not given: the accelerator's own count).
    """
    template = fn.job_spec(function, retries=0, volumes=volumes)
    if hosts is None:
        return template
    return template.model_copy(update={"hosts": hosts})


def create_batch(cfg: ClientConfig, group_id: str, spec: r.KineticBatchSpec) -> dict[str, Any]:
    """Check the spec as it will be sent (the operator's own bounds), then create the batch.

    ``maxConcurrent`` is always sent, null included: null means unlimited,
    while leaving it out would mean the CRD's default.
    """
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {
            "name": group_id,
            "namespace": cfg.namespace,
            "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY},
        },
        "spec": _spec_body(spec) | {"maxConcurrent": spec.max_concurrent},
    }
    limits.refuse(
        limits.check_batch_spec(
            body["spec"], storage_root=cfg.storage_root, max_inputs=cfg.max_inputs
        )
    )
    return KubeClient(cfg.context).create(r.BATCH_PLURAL, cfg.namespace, body)


def _spec_body(spec: r.KineticBatchSpec) -> dict[str, Any]:
    """The spec as sent; an empty cancelIndexes is left out, as the API server may refuse it."""
    body = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    if not body.get("cancelIndexes"):
        body.pop("cancelIndexes", None)
    return body


def _pickled_inputs(
    upload: str, items: list[Any], refused: dict[int, Exception]
) -> tuple[r.BatchInputs, dict[int, Exception]]:
    """Upload every input pickled, with the list of their hashes; per-index failures."""
    inputs_prefix = layout.batch_inputs_prefix(upload)
    hashes, failures = _upload_inputs(inputs_prefix, items, refused)
    hashes_bytes = json.dumps(hashes).encode()
    hashes_uri = layout.batch_hashes_uri(upload)
    storage.write_bytes(hashes_uri, hashes_bytes)
    inputs = r.BatchInputs(
        count=len(items),
        uri_prefix=inputs_prefix,
        sha256_uri=hashes_uri,
        sha256=payload.sha256(hashes_bytes),
    )
    return inputs, failures


def _upload_inputs(
    inputs_prefix: str, items: list[Any], refused: dict[int, Exception]
) -> tuple[list[str | None], dict[int, Exception]]:
    """Pickle and upload every input in parallel; returns hashes and per-index failures.

    Inputs in `refused` are not uploaded: they are failures already.
    """

    def one(i: int) -> tuple[int, str | None, Exception | None]:
        if i in refused:
            return i, None, refused[i]
        try:
            data = payload.build_input_payload(items[i])
        except payload.PayloadError as e:  # an unpicklable input fails alone, with its own error
            return i, None, e.__cause__ if isinstance(e.__cause__, Exception) else e
        storage.write_bytes(layout.batch_input_uri(inputs_prefix, i), data)
        return i, payload.sha256(data), None

    hashes: list[str | None] = [None] * len(items)
    failures: dict[int, Exception] = {}
    with ThreadPoolExecutor(max_workers=16) as pool:
        for i, digest, error in pool.map(one, range(len(items))):
            hashes[i] = digest
            if error is not None:
                failures[i] = error
    return hashes, failures


def _attach(
    group_id: str, cfg: ClientConfig, kube: KubeClient
) -> tuple[BatchHandle, dict[str, Any]]:
    """The batch's handle and status, from its resource or, once deleted, its manifest."""
    obj = kube.get(r.BATCH_PLURAL, cfg.namespace, group_id)
    if obj is not None:
        handle = BatchHandle.from_resource(obj, cfg.storage_root, kube.context, kube)
        return handle, obj.get("status", {})
    uid = last_uid(cfg.storage_root, cfg.namespace, "batches", group_id)
    home = (
        None if uid is None else layout.batch_home(cfg.storage_root, cfg.namespace, group_id, uid)
    )
    header = read_manifest(home) if home is not None else None
    if header is None:
        raise LookupError(
            f"No KineticBatch {group_id!r} in namespace {cfg.namespace!r} and no manifest "
            f"recorded for that name under "
            f"{layout.namespace_prefix(cfg.storage_root, cfg.namespace)}. Check the id and "
            "namespace (`kinetic batches list -n NAMESPACE`)."
        )
    handle = BatchHandle.from_manifest(header, cfg.namespace, cfg.storage_root, kube.context, kube)
    return handle, status_from_header(header)


@reference.moved_positions("kinetic.attach_batch", ("group_id", "namespace", "cluster"))
def attach_batch(
    group_id: str,
    project: str | None = None,
    cluster: str | None = None,
    poll_interval: float | None = None,
    poll_timeout: float | None = None,
    *,
    namespace: str | None = None,
    context: str | None = None,
    zone: str | None = None,
    backend: str | None = None,
    base_image_repo: str | None = None,
    kube: KubeClient | None = None,
) -> BatchHandle:
    """Pick up a batch from any process; index alignment and submission failures are kept.

    The reference API's arguments (`kinetic.api.reference`): `cluster` selects
    the kubeconfig context (a name that selects none is a `ConfigError`
    listing them); `backend` is "gke" or None. `project`, `zone`,
    `base_image_repo`, `poll_interval` and `poll_timeout` cannot matter here
    and warn once, naming the equivalent: a KineticBatch has every input from
    the start, so there are no late inputs to poll for. The positional order
    is the reference's; a second positional argument (the namespace before
    this order) warns (`ArgumentMoved`).

    ``kube`` is the client the handle (and its inputs' handles) asks the API
    server through: pass one to share it (the dashboard does); by default one
    is made for the context.
    """
    reference.accept(
        "kinetic.attach_batch",
        backend=backend,
        project=project,
        zone=zone,
        base_image_repo=base_image_repo,
        poll_interval=poll_interval,
        poll_timeout=poll_timeout,
    )
    kube = reference.kube_for("kinetic.attach_batch", cluster, context, kube)
    cfg = resolve(namespace=namespace, context=kube.context)
    handle, status = _attach(group_id, cfg, kube)
    launched = status.get("launched", 0)
    if launched < handle.total and r.Phase(status.get("phase", "PENDING")).terminal:
        log.warning(
            "batch %s launched %d of %d inputs before it ended", group_id, launched, handle.total
        )
    return handle


def attach_input(
    group_id: str, index: int, cfg: ClientConfig, kube: KubeClient | None = None
) -> InputHandle:
    """The handle of input `index` of a batch (`kinetic.attach("<group>-<index>")`), asking
    through ``kube`` (by default a client for the configuration's context)."""
    batch, _ = _attach(group_id, cfg, kube or KubeClient(cfg.context))
    if not 0 <= index < batch.total:
        raise LookupError(
            f"Batch {group_id} has {batch.total} inputs (indexes 0 to {batch.total - 1}); "
            f"there is no input {index}. Check the index (`kinetic batches status {group_id}`)."
        )
    return batch.child(index)


def list_batches(namespace: str | None = None, context: str | None = None) -> list[dict[str, Any]]:
    """The batches in a namespace with their status, oldest first."""
    ns = namespace or default_namespace(context)
    items = KubeClient(context).list_(r.BATCH_PLURAL, ns)
    return sorted(items, key=lambda o: o["metadata"].get("creationTimestamp", ""))
