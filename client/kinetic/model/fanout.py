"""From a KineticBatch's inputs to each child's KineticJob spec.

A batch names its inputs in one of three ways (`BatchInputs`): ``count``
inputs pickled by the client at ``<uriPrefix>/<index>.pkl``, inline JSON
``items``, or a ``grid`` of named lists whose cartesian product is the
inputs. This module answers, without any I/O:

* how many inputs there are (`input_count`, from `kinetic.model.inputcount`);
* what input ``i`` is (`input_at`, `grid_point`) — a grid is decoded in mixed
  radix, never materialised, so a 10^6-point sweep costs nothing;
* what input ``i`` runs with (`child_spec`: the template plus this input,
  or for a ``spec.jobs`` batch its own job spec, see `kinetic.model.batchjobs`);
* whether a spec makes sense before anything is launched
  (`validate_batch_spec`).

Grid order is ``itertools.product`` order over the keys *sorted*: the last
key in sorted order varies fastest. ``{"lr": [1, 2], "bs": [8, 16]}`` is
``bs=8,lr=1; bs=8,lr=2; bs=16,lr=1; bs=16,lr=2``. Sorted, not "as given",
because a grid is a JSON object stored by the API server, which does not
keep key order (it returns keys sorted): an index must mean the same point
whoever reads the spec.

How an input reaches its Pod
----------------------------

Function templates (the Python client, or YAML pointing at a pickled
function): the input's ``function`` is the template's, plus

* ``inputURI = <uriPrefix>/<i>.pkl`` (and ``inputSHA256`` when the operator
  has the batch's hash list) for ``count`` inputs, or
* ``inputJSON = <the item>`` for ``items`` / ``grid`` (a grid point is a dict,
  so ``inputMode: auto`` calls ``fn(**point)``);
* ``inputMode`` from the batch, and ``resultURI = <root>/jobs/<grp>-<i>/result.pkl``.

Container templates (kubectl users): the input arrives in the environment,

* ``KINETIC_INDEX``: the index, ``"0"``, ``"1"``, ...;
* ``KINETIC_INPUT``: the item as compact JSON (a grid point as an object);
* ``KINETIC_PARAM_<KEY>`` for every key of a grid point or of a dict item:
  the key upper-cased with every character outside ``[A-Za-z0-9_]`` turned
  into ``_``. Strings are passed as they are, everything else as JSON
  (``0.01``, ``true``, ``[1,2]``).

There is deliberately no template language of our own. Kubernetes already
expands ``$(VAR)`` in a container's ``command`` and ``args`` from its
environment, so ``args: ["--lr", "$(KINETIC_PARAM_LR)"]`` works everywhere,
with no shell involved and no quoting problems: a value can never become
extra arguments or code.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from kinetic.model import batchjobs, layout
from kinetic.model.data import volume_problems
from kinetic.model.inputcount import base_count, input_count
from kinetic.model.names import ENV_INDEX, ENV_INPUT, ENV_PARAM_PREFIX
from kinetic.model.ranges import IndexSet
from kinetic.model.rerun import from_batch_problems, original_index
from kinetic.model.resources import (
    SHA256_PATTERN,
    BatchInputs,
    EnvVar,
    KineticBatchSpec,
    KineticJobSpec,
    debug_problem,
)

__all__ = [
    "ENV_INDEX",
    "ENV_INPUT",
    "ENV_PARAM_PREFIX",
    "child_spec",
    "env_value",
    "grid_point",
    "input_at",
    "input_count",
    "job_template",
    "iter_inputs",
    "param_env_name",
    "parse_sha256_list",
    "validate_batch_spec",
    "foreign_batch_uris",
]


_NOT_ENV_CHAR = re.compile(r"[^A-Za-z0-9_]")
_SHA256 = re.compile(SHA256_PATTERN)


# --------------------------------------------------------------------------- inputs


def job_template(spec: KineticBatchSpec) -> KineticJobSpec:
    """The template every input runs with; only an unresolved ``fromBatch`` leaves it out."""
    if spec.template is None:
        raise ValueError(
            "spec.template is required (only a batch with spec.inputs.fromBatch may leave it "
            "out, to run the source batch's)"
        )
    return spec.template


def grid_point(grid: Mapping[str, list[Any]], index: int) -> dict[str, Any]:
    """Point ``index`` of the cartesian product of ``grid``, over the keys sorted.

    Mixed-radix decoding: the last sorted key is the fastest-moving digit,
    so this matches ``list(itertools.product(*(grid[k] for k in sorted(grid))))[index]``
    without building the product. The point's keys come in sorted order too.
    """
    keys = sorted(grid)
    total = 1
    for key in keys:
        total *= len(grid[key])
    if not 0 <= index < total:
        raise IndexError(f"grid index {index} is out of range: the grid has {total} points")
    point: dict[str, Any] = {}
    rest = index
    for key in reversed(keys):
        rest, digit = divmod(rest, len(grid[key]))
        point[key] = grid[key][digit]
    return {key: point[key] for key in keys}


def input_at(inputs: BatchInputs, index: int) -> Any:
    """The inline JSON input ``index`` of an ``items`` or ``grid`` batch.

    ``count`` inputs live in storage, so there is nothing inline to return:
    that is a `ValueError`, as is an index outside the batch.
    """
    total = base_count(inputs)
    if not 0 <= index < total:
        raise IndexError(f"input index {index} is out of range: the batch has {total} inputs")
    if inputs.items is not None:
        return inputs.items[index]
    if inputs.grid is not None:
        return grid_point(inputs.grid, index)
    raise ValueError("count inputs are pickled in storage; they have no inline value")


def iter_inputs(inputs: BatchInputs) -> Iterator[Any]:
    """Every inline input in index order (items or grid points), before ``inputs.indexes``."""
    for i in range(base_count(inputs)):
        yield input_at(inputs, i)


# --------------------------------------------------------------------------- per-input specs


def param_env_name(key: str) -> str:
    """``KINETIC_PARAM_<KEY>``: upper-cased, anything not ``[A-Za-z0-9_]`` becomes ``_``."""
    return ENV_PARAM_PREFIX + _NOT_ENV_CHAR.sub("_", key).upper()


def env_value(value: Any) -> str:
    """How a JSON value is written into an environment variable: strings raw, else JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def child_spec(
    home: layout.Home,
    spec: KineticBatchSpec,
    index: int,
    *,
    input_sha256: str | None = None,
) -> KineticJobSpec:
    """The job spec input ``index`` runs with: the template plus this input, retries, result URI.

    ``home`` is the batch's own storage prefix (namespace and UID), where the
    input's result goes whatever the template says. ``input_sha256`` is this input's hash from the
    batch's ``inputs.sha256URI`` list, when the operator has loaded it (see
    `parse_sha256_list`); the runner then verifies the input before
    unpickling it.

    The batch's ``retries`` is what every input gets; the template's own
    ``retries`` and ``cancel`` are not used (`validate_batch_spec` rejects a
    template that sets them differently). A template ``outputDir`` gets
    ``/<index>`` appended so inputs never write over each other.
    """
    if spec.jobs is not None:
        return batchjobs.job_at(home, spec, index)
    if spec.inputs is None:
        raise ValueError("spec.inputs (with spec.template) is required without spec.jobs")
    total = input_count(spec.inputs)
    if not 0 <= index < total:
        raise IndexError(f"input index {index} is out of range: the batch has {total} inputs")
    template = job_template(spec)
    original = original_index(spec.inputs.indexes, index)  # what the input is and says it is
    update: dict[str, Any] = {
        "retries": spec.retries,
        "cancel": False,
        "output_dir": home.input_output_dir(template.output_dir, original),
    }

    if template.function is not None:
        fn_update: dict[str, Any] = {
            "input_mode": spec.input_mode,
            "result_uri": home.input_result_uri(index),
        }
        if spec.inputs.count is not None:
            if not spec.inputs.uri_prefix:
                raise ValueError("spec.inputs.uriPrefix is required with spec.inputs.count")
            fn_update["input_uri"] = layout.batch_input_uri(spec.inputs.uri_prefix, original)
            fn_update["input_sha256"] = input_sha256
        else:
            fn_update["input_json"] = input_at(spec.inputs, original)
        update["function"] = template.function.model_copy(update=fn_update)
    elif template.container is not None:
        if spec.inputs.count is not None:
            raise ValueError(
                "spec.inputs.count (pickled inputs) needs spec.template.function; "
                "a container template takes spec.inputs.items or spec.inputs.grid"
            )
        item = input_at(spec.inputs, original)
        update["env"] = _with_input_env(template.env, original, item)
    else:
        raise ValueError("spec.template needs one of function or container")
    return template.model_copy(update=update, deep=True)


def _with_input_env(base: list[EnvVar], index: int, item: Any) -> list[EnvVar]:
    """The template's env plus the input variables, which win over same-named ones."""
    ours = [
        EnvVar(name=ENV_INDEX, value=str(index)),
        EnvVar(name=ENV_INPUT, value=env_value(item)),
    ]
    if isinstance(item, dict):
        ours.extend(EnvVar(name=param_env_name(k), value=env_value(v)) for k, v in item.items())
    taken = {e.name for e in ours}
    return [e for e in base if e.name not in taken] + ours


# --------------------------------------------------------------------------- hashes


def parse_sha256_list(data: bytes, *, expected_sha256: str | None, count: int) -> list[str | None]:
    """Read the ``inputs.sha256URI`` object: a JSON list of ``count`` hex SHA-256s.

    ``expected_sha256`` is ``inputs.sha256`` from the spec; when given, the
    list itself must hash to it, so a tampered list is refused before any
    of its hashes is trusted. An entry may be ``null``: the client writes
    that for an input it could not pickle (a submission failure, never
    launched). Raises `ValueError` with a readable reason.
    """
    if expected_sha256 is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected_sha256:
            raise ValueError(
                f"the input hash list has SHA-256 {actual}, but spec.inputs.sha256 "
                f"says {expected_sha256}"
            )
    try:
        hashes = json.loads(data)
    except ValueError as e:
        raise ValueError(f"the input hash list is not JSON: {e}") from None
    if not isinstance(hashes, list) or len(hashes) != count:
        got = f"{len(hashes)} entries" if isinstance(hashes, list) else type(hashes).__name__
        raise ValueError(f"the input hash list must be a list of {count} hashes, got {got}")
    for i, h in enumerate(hashes):
        if h is not None and (not isinstance(h, str) or not _SHA256.match(h)):
            raise ValueError(f"the input hash list entry {i} is not a hex SHA-256: {h!r}")
    return hashes


# --------------------------------------------------------------------------- validation


def foreign_batch_uris(root: str, namespace: str, spec: KineticBatchSpec) -> list[str]:
    """Why each storage URI of a batch spec is refused: outside the namespace's prefix.

    The URIs the operator and runner read (and the result URI a template
    might name) must be in the prefix; data volumes and ``outputDir``, which
    the Pod reads or writes with its own credentials, may not point into
    storage the namespace does not own (`layout.outside_own_storage`).
    Every form: the template, or each of ``spec.jobs``.
    """
    if spec.jobs is not None:
        refused = batchjobs.foreign_job_uris(root, namespace, spec)
        for i, job in enumerate(spec.jobs):
            refused += _own_storage_problems(root, namespace, job, f"spec.jobs[{i}]")
        return refused
    if spec.inputs is None:
        return []
    fn = spec.template.function if spec.template is not None else None
    named = {
        "spec.inputs.uriPrefix": spec.inputs.uri_prefix,
        "spec.inputs.sha256URI": spec.inputs.sha256_uri,
    }
    if fn is not None:
        named |= {
            "spec.template.function.payloadURI": fn.payload_uri,
            "spec.template.function.resultURI": fn.result_uri,
            "spec.template.function.inputURI": fn.input_uri,
        }
    found = (
        layout.outside_namespace(root, namespace, uri, field) for field, uri in named.items() if uri
    )
    refused = [why for why in found if why is not None]
    if spec.template is not None:
        refused += _own_storage_problems(root, namespace, spec.template, "spec.template")
    return refused


def _own_storage_problems(root: str, namespace: str, job: KineticJobSpec, at: str) -> list[str]:
    """A job spec's data volumes and outputDir, judged by `layout.outside_own_storage`."""
    refused = volume_problems(root, namespace, job.volumes, at) if job.volumes else []
    if job.output_dir:
        why = layout.outside_own_storage(root, namespace, job.output_dir, f"{at}.outputDir")
        if why is not None:
            refused.append(why)
    return refused


def validate_batch_spec(spec: KineticBatchSpec) -> list[str]:
    """What is wrong with a batch spec beyond its schema, one sentence per problem.

    The CRD schema checks types and patterns; this checks what spans fields
    (template kind vs inputs kind, submission failures vs the input count,
    grid keys that would collide as environment variables). An empty list
    means the batch can run. The operator should fail a batch with these
    messages rather than launch anything.
    """
    if spec.jobs is not None:
        return batchjobs.validate_jobs(spec)
    if spec.inputs is None:
        return ["spec.inputs (with spec.template) is required without spec.jobs"]
    if spec.inputs.from_batch is not None:  # as written: the operator resolves it (model.rerun)
        return from_batch_problems(spec.wire())
    if spec.template is None:
        return [
            "spec.template is required (only a batch with spec.inputs.fromBatch may leave "
            "it out, to run the source batch's)"
        ]
    inputs, template = spec.inputs, spec.template
    shape = _shape_problems(inputs, template)
    if shape:
        return shape  # the checks below assume one kind of inputs and one kind of template
    return (
        _input_storage_problems(inputs, template)
        + _parameter_name_problems(inputs, template)
        + _input_index_problems(spec, inputs)
        + _batch_owned_template_problems(spec, template)
    )


def _shape_problems(inputs: BatchInputs, template: KineticJobSpec) -> list[str]:
    """Exactly one of count, items or grid, and a template of exactly one kind."""
    kinds = [k for k in ("count", "items", "grid") if getattr(inputs, k) is not None]
    if len(kinds) != 1:
        return [
            "spec.inputs needs exactly one of count, items or grid"
            + (f" (got {', '.join(kinds)})" if kinds else "")
        ]
    if (template.function is None) == (template.container is None):
        return ["spec.template needs exactly one of function or container"]
    debug = debug_problem(template, "spec.template")
    return [debug] if debug else []


def _input_storage_problems(inputs: BatchInputs, template: KineticJobSpec) -> list[str]:
    """Pickled (``count``) inputs need a function template and a prefix; the storage
    fields mean nothing for inline inputs; a list hash needs its list."""
    problems: list[str] = []
    if inputs.count is not None:
        if template.container is not None:
            problems.append(
                "spec.inputs.count (pickled inputs) needs spec.template.function; "
                "a container template takes spec.inputs.items or spec.inputs.grid"
            )
        if not inputs.uri_prefix:
            problems.append("spec.inputs.uriPrefix is required with spec.inputs.count")
    else:
        stray = [f for f in ("uri_prefix", "sha256_uri", "sha256") if getattr(inputs, f)]
        if stray:
            names = ", ".join("spec.inputs." + _camel(f) for f in stray)
            problems.append(f"{names} only apply to spec.inputs.count")
    if inputs.sha256 is not None and inputs.sha256_uri is None:
        problems.append("spec.inputs.sha256 is the hash of spec.inputs.sha256URI, which is missing")
    return problems


def _parameter_name_problems(inputs: BatchInputs, template: KineticJobSpec) -> list[str]:
    """A grid with points and keys that stay apart as ``KINETIC_PARAM_*`` variables;
    for a container template, the same of the first dict item whose keys collide."""
    problems: list[str] = []
    if inputs.grid is not None:
        if not inputs.grid:
            problems.append("spec.inputs.grid needs at least one key")
        for key, values in inputs.grid.items():
            if not values:
                problems.append(f"spec.inputs.grid.{key} is empty, so the grid has no points")
        problems.extend(_env_collisions("spec.inputs.grid", list(inputs.grid)))
    if inputs.items is not None and template.container is not None:
        problems.extend(_first_item_collisions(inputs.items))
    return problems


def _first_item_collisions(items: list[Any]) -> list[str]:
    """The key collisions of the first dict item that has any (one item says enough)."""
    for i, item in enumerate(items):
        if isinstance(item, dict):
            found = _env_collisions(f"spec.inputs.items[{i}]", list(item))
            if found:
                return found
    return []


def _input_index_problems(spec: KineticBatchSpec, inputs: BatchInputs) -> list[str]:
    """``inputs.indexes`` and the submission failures must name inputs that exist."""
    problems: list[str] = []
    if inputs.indexes is not None:
        top, whole = IndexSet.parse(inputs.indexes).max(), base_count(inputs)
        if top is not None and top >= whole:
            problems.append(
                f"spec.inputs.indexes names input {top}, but the inputs above have only {whole}"
            )
    total = input_count(inputs)
    problems += batchjobs.submission_failure_problems(
        spec, total, f"the batch has only {total} input{'' if total == 1 else 's'}"
    )
    return problems


def _batch_owned_template_problems(spec: KineticBatchSpec, template: KineticJobSpec) -> list[str]:
    """Retries, cancel and chunking are the batch's: the template must not say otherwise."""
    problems: list[str] = []
    if template.retries not in (0, spec.retries):
        problems.append(
            f"spec.template.retries ({template.retries}) differs from spec.retries "
            f"({spec.retries}); set spec.retries, which is what every input gets"
        )
    if template.cancel:
        problems.append("spec.template.cancel must be false; set spec.cancel to stop the batch")
    if spec.fixed_chunk > 1 and template.function is None:
        problems.append(
            f"spec.chunkSize is {spec.chunk_size}, but only function templates run several "
            "inputs per Pod: set spec.chunkSize to 1 for a container template"
        )
    return problems


def _env_collisions(where: str, keys: list[str]) -> list[str]:
    by_env: dict[str, str] = {}
    problems = []
    for key in keys:
        env = param_env_name(key)
        if not key:
            problems.append(f"{where} has an empty key")
        elif env in by_env:
            problems.append(
                f"{where} keys {by_env[env]!r} and {key!r} would both be exported as {env}"
            )
        by_env.setdefault(env, key)
    return problems


def _camel(field: str) -> str:
    return {"uri_prefix": "uriPrefix", "sha256_uri": "sha256URI"}.get(field, field)
