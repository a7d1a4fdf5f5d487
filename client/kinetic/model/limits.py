"""Every bound on what a user may put in a KineticJob or KineticBatch, and the checks for them.

One module, no I/O, used by three parties so they always agree:

* the pydantic models in `kinetic.model.resources` (and so the CRD schemas that
  `make crds` generates from them) take their maxLength / maxItems /
  maximum from the constants here;
* the operator's validating webhook refuses what a schema cannot express
  (nesting depth and size of inline JSON, the total input count, where the
  input hash list may live), and the operator applies the very same checks
  again to whatever was stored while the webhook was down;
* the client refuses a batch before uploading anything.

The limits are generous for real work and finite on purpose: an object
nested thousands of levels deep, or a grid of 2^63 points, must be refused
with a sentence, not crash or stall the operator.

Every check walks JSON iteratively: the objects it judges may be nested far
deeper than Python's recursion limit.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

from kinetic.model.ranges import IndexSet, RangeError

# --------------------------------------------------------------------------- schema bounds
# (the CRD enforces these; pydantic enforces them again in the operator and the client)

MAX_NAME_LENGTH = 253  # display names, like a Kubernetes object name
MAX_URI_LENGTH = 2048  # gs:// and file:// URIs
MAX_IMAGE_LENGTH = 1024  # registry/repository:tag@sha256:digest fits with room to spare
MAX_ACCELERATOR_LENGTH = 64
MAX_QUANTITY_LENGTH = 64  # "500m", "4Gi"
MAX_COMMAND_ITEMS = 1024  # entries of container command, and of args
MAX_ARG_LENGTH = 32768  # one command or args entry
MAX_ENV = 256  # environment variables per job
MAX_ENV_NAME_LENGTH = 256
MAX_ENV_VALUE_LENGTH = 32768
MAX_RETRIES = 100
MAX_DEADLINE_SECONDS = 30 * 24 * 3600  # thirty days per attempt
MAX_CONCURRENT = 100_000  # Pods at once per batch
MAX_CHUNK_SIZE = 256  # inputs per Pod
MAX_TARGET_UNIT_SECONDS = 86_400.0  # chunkSize auto: a day of work per Pod at most
MAX_UNIT_GRID_LENGTH = 8_192  # the status's grid of unit starts (a few hundred segments)
DEFAULT_TARGET_UNIT_SECONDS = 30.0  # chunkSize auto: the work one Pod is given, by default
DEFAULT_UNIT_FIRST_INPUTS = 16  # chunkSize auto: inputs per unit before any is measured
DEFAULT_UNIT_MIN_SECONDS = 2.0  # chunkSize auto: the least work worth a Pod, while inputs are left
DEFAULT_UNIT_STARTS_AT_ONCE = 16  # chunkSize auto: a batch's units starting at once, at least
MAX_JOBS = 1_000  # job specs of one heterogeneous batch (each a whole spec: etcd holds 1.5 MB)
MAX_ITEMS = 100_000  # inline items of one batch (the object must also fit in etcd)
MAX_GRID_KEYS = 64
MAX_GRID_VALUES = 10_000  # values of one grid key
MAX_GRID_KEY_LENGTH = 128  # becomes part of an environment variable's name
MAX_TAGS = 64
MAX_TAG_KEY_LENGTH = 253
MAX_TAG_VALUE_LENGTH = 1024
MAX_SUBMISSION_FAILURES = 10_000
MAX_MESSAGE_LENGTH = 4096
MAX_CANCEL_INDEXES_LENGTH = 65536
MAX_INPUTS_CEILING = 100_000_000  # schema maximum of inputs.count; the setting may not exceed it
MAX_VOLUMES = 16  # data volumes (spec.volumes) per job: one emptyDir and one download each
MAX_MOUNT_PATH_LENGTH = 1024
RESERVED_MOUNT_ROOTS = ("/dev", "/proc", "/sys")  # the container runtime owns these
# Hosts (Pods) of one multi-host job. Every member's TPU_WORKER_HOSTNAMES lists all of them
# (<= 127 characters and a comma each): 512 keeps that one value at 64 KiB, half of what
# Linux lets one environment string hold (128 KiB), and the schema's bound on the policy's
# maxHostsPerJob.
MAX_HOSTS = 512

# --------------------------------------------------------------------------- admission bounds
# (beyond what a structural schema can say; checked by the webhook, the operator, the client)

MAX_DEPTH = 32  # lists/objects nested inside one inline input
MAX_INLINE_BYTES = 1024 * 1024  # inline inputs of one object, as compact JSON
DEFAULT_MAX_INPUTS = 1_000_000  # the operator's maxInputs setting, unless changed
# The largest admission review the webhook reads (KINETIC_WEBHOOK_MAX_REVIEW_BYTES): an
# UPDATE carries the old object and the new one, each at most what etcd stores. Measured on
# Kubernetes 1.20 with etcd's default --max-request-bytes (1.5 MiB): the largest KineticJob
# stored was 1,572,462 bytes as JSON, and its UPDATE's review 3,145,430 bytes (the envelope
# ~700 of them). Strings are escaped alike in etcd and in the review ("<" is sent as
# \u003c: a CREATE of 1.57 M of them made a review of 9.4 MB, and etcd refused the object),
# so a larger review is of an object etcd cannot store: refusing it loses nothing.
# 2 x 1.5 MiB, plus 64 KiB for the envelope (the user's groups and extra fields).
ETCD_MAX_OBJECT_BYTES = 1_572_864
MAX_REVIEW_BYTES = 2 * ETCD_MAX_OBJECT_BYTES + (64 << 10)
# The input hash list is `json.dumps(list_of_hex)`: '"<64 hex>", ' is 68 bytes an entry.
HASH_LIST_ENTRY_BYTES = 68
HASH_LIST_SLACK = 4096


def hash_list_max_bytes(count: int) -> int:
    """The most bytes the operator reads of ``inputs.sha256URI`` for ``count`` inputs."""
    return max(count, 0) * HASH_LIST_ENTRY_BYTES + HASH_LIST_SLACK


# --------------------------------------------------------------------------- read bounds
# (the most any reader holds of an object a Pod or a bucket writer can change: each bound
# is above what a genuine object holds, so only a forged or runaway one is refused)

MAX_REPORT_BYTES = 64 * 1024  # a chunk report: {"<index>": "<64 hex>"} for <= 256 inputs
MAX_SPEC_BYTES = 8 << 20  # an accepted spec: an object is <= 1.5 MiB, a resolved rerun 2x
MAX_POINTER_BYTES = 64 * 1024  # a name's current.json: a UID and a hash
MAX_DATA_MANIFEST_BYTES = 64 << 20  # a data upload's file list (~130 bytes per file)
# A manifest shard holds 1,000 inputs' records; the operator keeps what it writes
# under SHARD_BUDGET (`kinetic.model.manifest.shard_bytes`) and readers refuse more than
# MAX_SHARD_BYTES.
SHARD_BUDGET = 24 << 20
MAX_SHARD_BYTES = 32 << 20
_HEADER_FIXED_BYTES = 4 << 20  # what comes from the spec (<= 1.5 MiB) and fixed fields
_HEADER_BYTES_PER_SHARD = 160  # its entry in shardRefs and shards


def header_max_bytes(total: int) -> int:
    """The most bytes a reader takes of a manifest header for a batch of ``total`` inputs.

    Its complete outcome ranges name each index at most once (digits and a
    comma each), and it lists one digest per shard of 1,000 inputs.
    """
    total = max(total, 0)
    per_index = len(str(total)) + 1
    shards = total // 1000 + 1
    return _HEADER_FIXED_BYTES + total * per_index + shards * _HEADER_BYTES_PER_SHARD


# --------------------------------------------------------------------------- pure helpers


def json_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How many lists/objects are nested in ``value`` (a scalar is 0, ``[1]`` is 1).

    Stops counting at ``limit + 1``, so a hostile value costs no more than
    what it takes to find it is too deep; iterative, so any depth is safe.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        depth += 1
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def json_size(value: Any, limit: int = MAX_INLINE_BYTES) -> int:
    """Bytes of ``value`` as compact JSON (UTF-8), counted up to ``limit + 1``.

    An estimate that is exact for strings without escapes and never less
    than the encoding for the rest; iterative, like `json_depth`.
    """
    total = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            total += 2 + max(len(node) - 1, 0) + len(node)  # braces, commas, colons
            for key, child in node.items():
                total += _scalar_size(str(key))
                stack.append(child)
        elif isinstance(node, list | tuple):
            total += 2 + max(len(node) - 1, 0)
            stack.extend(node)
        else:
            total += _scalar_size(node)
        if total > limit:
            return limit + 1
    return total


def _scalar_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 2
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    return len(repr(value))


def capped_product(lengths: Iterable[int], cap: int) -> int:
    """The product of ``lengths``, or ``cap + 1`` as soon as it exceeds ``cap``.

    A grid's point count is this product; computed plainly it is a number
    of any size (63 keys of two values: 2^63), which no status field can
    hold. Any zero makes the product zero, wherever it comes.
    """
    sizes = list(lengths)
    if any(n <= 0 for n in sizes):
        return 0
    total = 1
    for n in sizes:
        total *= n
        if total > cap:
            return cap + 1
    return total


def under_root(uri: str, root: str) -> bool:
    """Whether ``uri`` names an object strictly below the storage ``root``.

    No '.', '..' or empty path segments below the root, so the answer
    cannot be fooled by a path that climbs back out once resolved.
    """
    base = root.rstrip("/")
    if not base or not uri.startswith(base + "/"):
        return False
    rest = uri[len(base) + 1 :]
    if not rest or "\\" in rest or "\x00" in rest:
        return False
    segments = rest.split("/")
    return all(s not in ("", ".", "..") for s in segments) and posixpath.normpath(rest) == rest


def _fmt(n: int) -> str:
    return f"{n:,}"


# --------------------------------------------------------------------------- the checks


def check_inline(path: str, value: Any, budget: list[int]) -> list[str]:
    """Depth and size of one inline JSON value at ``path``; ``budget`` is bytes left (shared)."""
    depth = json_depth(value, MAX_DEPTH)
    if depth > MAX_DEPTH:
        return [
            f"{path} is nested more than {MAX_DEPTH} levels deep (lists and objects inside "
            f"each other); the limit is {MAX_DEPTH}: pass deep data as a pickled input instead"
        ]
    size = json_size(value, budget[0])
    if size > budget[0]:
        return [
            f"{path}: inline inputs exceed the limit of {_fmt(MAX_INLINE_BYTES)} bytes of JSON "
            "in total: upload large inputs to storage (inputs.count with uriPrefix) instead"
        ]
    budget[0] -= size
    return []


def _inline_values(inputs: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    items = inputs.get("items")
    if isinstance(items, list):
        for i, item in enumerate(items):
            yield f"spec.inputs.items[{i}]", item
    grid = inputs.get("grid")
    if isinstance(grid, dict):
        for key, values in grid.items():
            yield f"spec.inputs.grid.{key}", values


def spec_total(spec: dict[str, Any], cap: int) -> int:
    """A raw batch spec's input count: its jobs, else its inputs (see `input_total`)."""
    jobs = spec.get("jobs")
    if isinstance(jobs, list):
        return len(jobs)
    inputs = spec.get("inputs")
    return input_total(inputs, cap) if isinstance(inputs, dict) else 0


def input_total(inputs: dict[str, Any], cap: int) -> int:
    """The batch's input count, capped at ``cap + 1`` (raw spec; unknown shapes count 0).

    A rerun counts what it runs: its resolved ``indexes``, or the ranges its
    ``fromBatch`` names (``failed``/``all`` are known only once resolved: 0).
    """
    chosen = inputs.get("indexes")
    from_batch = inputs.get("fromBatch")
    if chosen is None and isinstance(from_batch, dict):
        chosen = from_batch.get("indexes", "failed")
        if chosen in ("failed", "all"):
            return 0
    if isinstance(chosen, str):
        try:
            return min(len(IndexSet.parse(chosen)), cap + 1)
        except RangeError:
            return 0  # malformed ranges are refused by their own check
    if isinstance(inputs.get("count"), int):
        return int(inputs["count"])
    if isinstance(inputs.get("items"), list):
        return len(inputs["items"])
    grid = inputs.get("grid")
    if isinstance(grid, dict):
        return capped_product((len(v) if isinstance(v, list) else 0 for v in grid.values()), cap)
    return 0


def _check_function_input(path: str, function: Any, budget: list[int]) -> list[str]:
    if isinstance(function, dict) and "inputJSON" in function:
        return check_inline(f"{path}.inputJSON", function["inputJSON"], budget)
    return []


def check_job_spec(spec: Any) -> list[str]:
    """What a KineticJob's spec breaks beyond its schema: its inline input's depth and size."""
    if not isinstance(spec, dict):
        return []
    problems = _check_function_input("spec.function", spec.get("function"), [MAX_INLINE_BYTES])
    return problems + check_volume_mounts("spec.volumes", spec.get("volumes"))


def check_batch_spec(
    spec: Any, *, storage_root: str | None, max_inputs: int = DEFAULT_MAX_INPUTS
) -> list[str]:
    """What a KineticBatch's spec breaks beyond its schema, one sentence per problem.

    Checks, on the raw spec as stored: the number of jobs and each job's
    inline input, inline items and grid (depth, total size), the total input
    count against ``max_inputs`` (the operator's setting), and that
    ``inputs.sha256URI`` lies under ``storage_root`` and comes with
    ``inputs.sha256``. ``storage_root`` None skips the location
    check (the client without configuration; the operator refuses anyway).
    """
    if not isinstance(spec, dict):
        return []
    problems: list[str] = _check_keys(spec.get("tags"), "spec.tags", MAX_TAG_KEY_LENGTH)
    budget = [MAX_INLINE_BYTES]
    problems += _check_jobs(spec.get("jobs"), budget, max_inputs)
    template = spec.get("template")
    if isinstance(template, dict):
        problems += _check_function_input(
            "spec.template.function", template.get("function"), budget
        )
        problems += check_volume_mounts("spec.template.volumes", template.get("volumes"))
    inputs = spec.get("inputs")
    if not isinstance(inputs, dict):
        return problems
    for path, value in _inline_values(inputs):
        found = check_inline(path, value, budget)
        if found:
            problems += found
            break  # one sentence is enough; the rest is likely the same
    problems += _check_keys(inputs.get("grid"), "spec.inputs.grid", MAX_GRID_KEY_LENGTH)
    problems += _check_count(inputs, max_inputs)
    problems += _check_hash_list(inputs, storage_root)
    return problems


def refuse(problems: list[str]) -> None:
    """Raise the problems a check found as one ValueError, before anything is uploaded."""
    if problems:
        raise ValueError("; ".join(problems))


def check_batch_form(spec: Any) -> str | None:
    """Why a raw batch spec is neither ``template`` + ``inputs`` nor ``jobs``, else None.

    Not part of `check_batch_spec`, which callers also run on partial specs
    (the client's checks before it uploads): the CRD's oneOf refuses such a
    spec at the API server, and `KineticBatchSpec` says this sentence when
    the operator parses one stored without it.
    """
    if not isinstance(spec, dict):
        return None
    has = {k for k in ("template", "inputs", "jobs") if spec.get(k) is not None}
    if "jobs" in has and has - {"jobs"}:
        both = " and ".join(f"spec.{k}" for k in sorted(has - {"jobs"}))
        return (
            f"spec.jobs cannot be combined with {both}: a batch is either one template over "
            "inputs, or a list of jobs; remove one form"
        )
    if "jobs" in has:
        return None
    inputs = spec.get("inputs")
    from_batch = isinstance(inputs, dict) and inputs.get("fromBatch") is not None
    needed = ("inputs",) if from_batch else ("template", "inputs")  # fromBatch: the source's
    missing = [f"spec.{k}" for k in needed if k not in has]
    if missing:
        return (
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required: set "
            "spec.template with spec.inputs, or list different job specs in spec.jobs"
        )
    return None


def _check_jobs(jobs: Any, budget: list[int], max_inputs: int) -> list[str]:
    """A heterogeneous batch's list: its length, each job's data volume mount paths, and each
    function job's inline input."""
    if not isinstance(jobs, list):
        return []
    cap = min(MAX_JOBS, max_inputs)
    if len(jobs) > cap:
        return [
            f"spec.jobs has {_fmt(len(jobs))} entries; the limit is {_fmt(cap)} job specs per "
            "batch: split the list into several batches, or use spec.template with spec.inputs "
            "for many inputs of one job"
        ]
    problems: list[str] = []
    for i, job in enumerate(jobs):
        if isinstance(job, dict):
            problems += check_volume_mounts(f"spec.jobs[{i}].volumes", job.get("volumes"))
            found = _check_function_input(f"spec.jobs[{i}].function", job.get("function"), budget)
            if found:
                return problems + found
    return problems


def _check_keys(mapping: Any, path: str, limit: int) -> list[str]:
    """Key lengths of a map (a structural schema cannot bound them)."""
    if not isinstance(mapping, dict):
        return []
    for key in mapping:
        if len(str(key)) > limit:
            return [f"{path} has a key of {len(str(key)):,} characters; the limit is {limit}"]
    return []


def _check_count(inputs: dict[str, Any], max_inputs: int) -> list[str]:
    total = input_total(inputs, max_inputs)
    if total <= max_inputs:
        return []
    fix = "split the work into several batches"
    limit = f"the limit is {_fmt(max_inputs)} inputs per batch (the operator's maxInputs setting)"
    grid = inputs.get("grid")
    if isinstance(grid, dict) and "count" not in inputs and "items" not in inputs:
        return [
            f"spec.inputs.grid makes more than {_fmt(max_inputs)} inputs (the product of its "
            f"{len(grid)} lists' lengths); {limit}: {fix}"
        ]
    field = "count" if isinstance(inputs.get("count"), int) else "items"
    return [f"spec.inputs.{field} is {_fmt(total)} inputs; {limit}: {fix}"]


def _check_hash_list(inputs: dict[str, Any], storage_root: str | None) -> list[str]:
    uri = inputs.get("sha256URI")
    if uri is None:
        return []
    problems = []
    if not inputs.get("sha256"):
        problems.append(
            "spec.inputs.sha256 is required with spec.inputs.sha256URI: the operator trusts "
            "the hash list only if it hashes to this"
        )
    if storage_root and not (isinstance(uri, str) and under_root(uri, storage_root)):
        problems.append(
            f"spec.inputs.sha256URI must be under the storage root {storage_root.rstrip('/')}/ "
            f"(got {str(uri)[:200]!r}): the operator reads it with its own credentials"
        )
    return problems


# --------------------------------------------------------------------------- data volumes


def mount_path_problem(path: Any) -> str | None:
    """Why ``path`` cannot be a data volume's mount path, or None when it can.

    Absolute, normalised (no ``..``), not ``/`` and not under a directory the
    container runtime owns; the same rule for ``volumes=`` and ``spec.volumes``.
    """
    if not isinstance(path, str) or not path:
        return f"mount path must be a string like '/data', got {path!r}"
    if not path.startswith("/"):
        return (
            f"mount path {path!r} is relative; use an absolute path such as "
            f"'/{path.lstrip('./') or 'data'}'"
        )
    if len(path) > MAX_MOUNT_PATH_LENGTH:
        return f"mount path is {len(path)} characters, at most {MAX_MOUNT_PATH_LENGTH} allowed"
    if ".." in path.split("/") or ":" in path or "\\" in path:
        return f"mount path {path!r} may not contain '..', ':' or backslashes"
    norm = posixpath.normpath(path)
    if norm == "/":
        return "mount path '/' would hide the whole image; mount under a folder such as /data"
    for root in RESERVED_MOUNT_ROOTS:
        if norm == root or norm.startswith(root + "/"):
            return f"mount path {path!r} is under {root}, which the container runtime owns"
    return None


def check_volume_mounts(path: str, volumes: Any) -> list[str]:
    """The mount paths of a raw ``volumes`` list: each usable, none inside another."""
    if not isinstance(volumes, list):
        return []
    problems: list[str] = []
    paths: list[str] = []
    for i, v in enumerate(volumes[:MAX_VOLUMES]):
        mount = v.get("mountPath") if isinstance(v, dict) else None
        why = mount_path_problem(mount)
        if why is not None:
            problems.append(f"{path}[{i}].mountPath: {why}")
        else:
            paths.append(str(mount))
    nested = nested_mount_paths(paths)
    if nested is not None:
        problems.append(f"{path}: {nested}")
    return problems


def nested_mount_paths(paths: list[str]) -> str | None:
    """A sentence naming two mount paths of which one contains the other, or None."""
    norm = [posixpath.normpath(p) for p in paths[:MAX_VOLUMES]]
    for i, a in enumerate(norm):
        for b in norm[i + 1 :]:
            if a == b:
                return f"mount path {a!r} is given twice"
            inner, outer = (a, b) if len(a) > len(b) else (b, a)
            if inner.startswith(outer + "/"):
                return (
                    f"mount path {inner!r} lies inside {outer!r}; give each volume its own folder"
                )
    return None


# --------------------------------------------------------------------------- defaults
# Declared once; the client's arguments and the operator's settings take them from here.

DEFAULT_MAX_CONCURRENT = 64  # `run_async_map` and `kinetic.batch`: Pods of one batch at once
DEFAULT_MAX_DISRUPTIONS = 3  # disruptions retried per job without using its retries
# How long a gang member may wait for a node before the whole gang is torn down: the
# members already placed hold accelerators that nobody else can use meanwhile.
DEFAULT_GANG_SCHEDULING_SECONDS = 300
# How long a single Pod may wait for a node before its attempt fails as Unschedulable: long
# enough for a cluster autoscaler to add a node, short enough that an accelerator the
# cluster can never offer ends the job (the chart's scheduling.unschedulableSeconds).
DEFAULT_UNSCHEDULABLE_SECONDS = 600


def check_max_concurrent(value: object) -> None:
    """Refuse a ``max_concurrent`` argument that is neither a positive integer nor None."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(
            f"max_concurrent must be a positive integer or None (no limit); got {value!r}"
        )
