"""The KineticJob and KineticBatch resources, as pydantic models.

These models are the single source of truth for the API: `kinetic.model.crdgen`
turns them into the CRDs in `crds/`, the operator validates what it reads
with them, and the client builds what it creates with them. Field names are
snake_case in Python and camelCase on the wire, as Kubernetes expects.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonValue

from kinetic.model import limits as L

# Re-exported for callers that import every API fact from here; they live in kinetic.model.names.
from kinetic.model.names import LABEL_ATTEMPT as LABEL_ATTEMPT
from kinetic.model.names import LABEL_BATCH as LABEL_BATCH
from kinetic.model.names import LABEL_CHUNK as LABEL_CHUNK
from kinetic.model.names import LABEL_INDEX as LABEL_INDEX
from kinetic.model.names import LABEL_JOB as LABEL_JOB

GROUP = "kinetic.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

JOB_KIND, JOB_PLURAL = "KineticJob", "kineticjobs"
BATCH_KIND, BATCH_PLURAL = "KineticBatch", "kineticbatches"


ACCELERATOR_PATTERN = r"^(cpu|gpu-[a-z0-9]+(x[0-9]+)?|tpu-[a-z0-9]+-[0-9]+)$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
STORAGE_URI_PATTERN = r"^(gs|file)://.+"
RANGES_PATTERN = r"^([0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)?$"
MAX_CHUNK_SIZE = L.MAX_CHUNK_SIZE


class Wire(BaseModel):
    """Base for every API object: camelCase on the wire, strict about unknown keys."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def wire(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Phase(StrEnum):
    """Lifecycle of a job or a batch, as `kubectl get` shows it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


InputMode = Literal["auto", "single", "args", "kwargs"]
ChunkSize = int | Literal["auto"]  # "auto": the operator sizes each unit from measured durations
AUTO_CHUNK: Literal["auto"] = "auto"


# --------------------------------------------------------------------------- spec


class EnvVar(Wire):
    """One environment variable for the job's process."""

    name: str = Field(
        pattern=ENV_NAME_PATTERN,
        max_length=L.MAX_ENV_NAME_LENGTH,
        description="Variable name, a shell identifier.",
    )
    value: str = Field("", max_length=L.MAX_ENV_VALUE_LENGTH, description="Literal value.")


class FunctionSpec(Wire):
    """A pickled Python call that the runner downloads, verifies and executes."""

    payload_uri: str = Field(
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        alias="payloadURI",
        description="gs:// or file:// URI of the cloudpickled call (or a batch's function.pkl).",
    )
    sha256: str = Field(
        pattern=SHA256_PATTERN,
        max_length=64,
        description="Hex SHA-256 of the payload; the runner refuses to unpickle anything else.",
    )
    result_uri: str | None = Field(
        None,
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        alias="resultURI",
        description="Not used: results always go to the object's own storage prefix "
        "(status.resultURI). Set, it must lie under the namespace's prefix.",
    )
    name: str | None = Field(
        None, max_length=L.MAX_NAME_LENGTH, description="The function's name, for display."
    )
    input_uri: str | None = Field(
        None,
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        alias="inputURI",
        description="Batch children: the pickled input this call receives.",
    )
    input_sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        max_length=64,
        alias="inputSHA256",
        description="Batch children: hex SHA-256 of the pickled input.",
    )
    input_json: Any = Field(
        None,
        alias="inputJSON",
        description="Batch children: an inline JSON input (from items or grid), nested at "
        f"most {L.MAX_DEPTH} levels deep.",
    )
    input_mode: InputMode | None = Field(
        None, description="How the input is passed: auto, single, args or kwargs."
    )
    python: str | None = Field(
        None,
        pattern=r"^3\.[0-9]{1,2}$",
        max_length=5,
        description="The Python version that pickled the call (3.X): without an image, the "
        "job runs in the operator's runner image for that version.",
    )


Arg = Annotated[str, Field(max_length=L.MAX_ARG_LENGTH)]


class ContainerSpec(Wire):
    """A plain container command; its termination message becomes the job's result."""

    image: str | None = Field(
        None, max_length=L.MAX_IMAGE_LENGTH, description="Container image. Defaults to the job's."
    )
    command: list[Arg] = Field(
        default_factory=list,
        max_length=L.MAX_COMMAND_ITEMS,
        description="Command to run (the entrypoint). Empty or left out: the image's own "
        "entrypoint runs, with args as its arguments.",
    )
    args: list[Arg] = Field(
        default_factory=list,
        max_length=L.MAX_COMMAND_ITEMS,
        description="Arguments to the command.",
    )


class ResourceOverrides(Wire):
    """Resource requests for the job's container, on top of what the accelerator implies."""

    cpu: str | None = Field(
        None, max_length=L.MAX_QUANTITY_LENGTH, description="CPU request, e.g. '500m' or '2'."
    )
    memory: str | None = Field(
        None, max_length=L.MAX_QUANTITY_LENGTH, description="Memory request and limit, e.g. '4Gi'."
    )


DATA_URI_PATTERN = r"^(gs|file|hf)://.+"
MOUNT_PATH_PATTERN = r"^/[^:\\]*$"


class DataVolume(Wire):
    """Data put at `mountPath` before the job's command or function starts.

    Downloaded into an emptyDir by the runner (function jobs) or by an init
    container running the runner image (container jobs).
    """

    mount_path: str = Field(
        pattern=MOUNT_PATH_PATTERN,
        max_length=L.MAX_MOUNT_PATH_LENGTH,
        description="Absolute folder the data appears in (not /, /dev, /proc or /sys).",
    )
    uri: str = Field(
        pattern=DATA_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        description="gs:// object, or prefix ending in '/' (a folder); hf://dataset; or a "
        "file:// path under the namespace's storage prefix. A gs:// URI under the storage "
        "root must be in the namespace's prefix; other buckets are read with the pod's "
        "own credentials.",
    )
    manifest_uri: str | None = Field(
        None,
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        alias="manifestURI",
        description="Set by the client for uploaded data: each file's sha256, checked after "
        "download. Must be in the namespace's prefix.",
    )
    file_name: str | None = Field(
        None,
        pattern=r"^[^/]+$",
        max_length=255,
        description="A single uploaded file's name inside mountPath (default: the object's).",
    )
    fuse: bool = Field(False, description="Mount lazily via the GCS FUSE CSI driver.")
    hf_trust_remote_code: bool = Field(
        False, description="hf:// only: let the dataset run its loading script."
    )


JOB_SPEC_ONE_OF: list[JsonValue] = [{"required": ["function"]}, {"required": ["container"]}]


class KineticJobSpec(Wire):
    """What one job runs and how. Exactly one of `function` or `container` is set."""

    model_config = ConfigDict(json_schema_extra={"oneOf": JOB_SPEC_ONE_OF})

    function: FunctionSpec | None = Field(
        None, description="Run a pickled Python call with the kinetic runner."
    )
    container: ContainerSpec | None = Field(None, description="Run a container command.")
    accelerator: str = Field(
        "cpu",
        pattern=ACCELERATOR_PATTERN,
        max_length=L.MAX_ACCELERATOR_LENGTH,
        description="cpu, gpu-<type>[x<count>] (gpu-l4, gpu-a100x8) or tpu-<type>-<chips> "
        "(tpu-v5e-1). The operator's catalog maps it to resources and node selectors.",
    )
    image: str | None = Field(
        None,
        max_length=L.MAX_IMAGE_LENGTH,
        description="Container image. Defaults to the operator's.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=L.MAX_ENV, description="Extra environment variables."
    )
    spot: bool = Field(False, description="Schedule on spot (preemptible) capacity.")
    hosts: int | None = Field(
        None,
        ge=1,
        le=L.MAX_HOSTS,
        description="Pods per attempt, started together as a gang that finds its rank 0 "
        "through MASTER_ADDR; unset: the accelerator's own (1, or a multi-host TPU slice's).",
    )
    debug: bool = Field(
        False,
        description="Function jobs only: the runner starts debugpy on the Pod's loopback "
        "(port 5678) and waits for a debugger to attach before calling the function "
        "(kinetic jobs debug, JobHandle.debug_attach).",
    )
    output_dir: str | None = Field(
        None,
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        description="Exported to the job as KINETIC_OUTPUT_DIR. Defaults to <root>/outputs/<name>.",
    )
    retries: int = Field(
        0, ge=0, le=L.MAX_RETRIES, description="Extra attempts after an application failure."
    )
    deadline_seconds: int | None = Field(
        None,
        ge=1,
        le=L.MAX_DEADLINE_SECONDS,
        description="Wall-clock limit per attempt; exceeding it fails the attempt.",
    )
    resources: ResourceOverrides | None = Field(
        None, description="Resource requests on top of what the accelerator implies."
    )
    cancel: bool = Field(False, description="Set to true to stop the job; it ends CANCELLED.")
    volumes: list[DataVolume] | None = Field(
        None,
        max_length=L.MAX_VOLUMES,
        description="Data present at each mountPath before the job starts.",
    )


def debug_problem(spec: KineticJobSpec, path: str) -> str | None:
    """Why `debug` cannot be set on this spec, or None: a debugger attaches to the kinetic
    runner, which only function jobs run."""
    if spec.debug and spec.container is not None:
        return (
            f"{path}.debug: a debugger attaches to the kinetic runner, and a container job runs "
            "its own command; set debug only on function jobs (or start debugpy in your own image)"
        )
    return None


class BatchJobSpec(KineticJobSpec):
    """One job of a heterogeneous batch: its own function or container, image, env, retries."""

    # Everything a KineticJob says applies to this one input. `retries` is optional here so
    # that "not set" means "the batch's spec.retries", while a set value (0 included)
    # overrides it for this job alone.

    retries: int | None = Field(  # type: ignore[assignment]  # optional: unset = spec.retries
        None,
        ge=0,
        le=L.MAX_RETRIES,
        description="Extra attempts for this job after an application failure; unset, the "
        "batch's spec.retries applies.",
    )


class SubmissionFailure(Wire):
    """An input the client could not package; it counts as a failure of the batch."""

    index: int = Field(ge=0, le=L.MAX_INPUTS_CEILING, description="Index of the input.")
    message: str = Field(
        max_length=L.MAX_MESSAGE_LENGTH, description="Why it could not be submitted."
    )
    error_type: str | None = Field(
        None,
        max_length=L.MAX_MESSAGE_LENGTH,
        description="Type of the exception the client raised (TypeError, mod.Error), so "
        "readers rebuild the same exception.",
    )


GridKey = Annotated[str, Field(max_length=L.MAX_GRID_KEY_LENGTH)]
GridValues = Annotated[list[Any], Field(max_length=L.MAX_GRID_VALUES)]
TagKey = Annotated[str, Field(max_length=L.MAX_TAG_KEY_LENGTH)]
TagValue = Annotated[str, Field(max_length=L.MAX_TAG_VALUE_LENGTH)]

INPUTS_ONE_OF: list[JsonValue] = [
    {"required": ["count"]},
    {"required": ["items"]},
    {"required": ["grid"]},
    {"required": ["fromBatch"]},
]
DNS_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
UID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"
RERUN_SELECTOR_PATTERN = r"^(failed|all|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)$"


class FromBatch(Wire):
    """Rerun inputs of an earlier batch of the same namespace (see `kinetic.model.rerun`)."""

    name: str = Field(
        pattern=DNS_NAME_PATTERN,
        max_length=63,
        description="The source batch's name (group id); it may have been deleted since, "
        "its manifest in storage is what is read.",
    )
    uid: str | None = Field(
        None,
        pattern=UID_PATTERN,
        max_length=64,
        description="The source batch's UID; defaults to the last batch of that name. "
        "The operator fills it in when it resolves the source.",
    )
    indexes: str = Field(
        "failed",
        pattern=RERUN_SELECTOR_PATTERN,
        max_length=L.MAX_CANCEL_INDEXES_LENGTH,
        description="failed (its failed inputs), all, or ranges of its indexes ('1,4-6').",
    )


class BatchInputs(Wire):
    """Where a batch's inputs come from. Exactly one of count, items or grid is set."""

    model_config = ConfigDict(json_schema_extra={"oneOf": INPUTS_ONE_OF})

    count: int | None = Field(
        None,
        ge=0,
        le=L.MAX_INPUTS_CEILING,
        description="Number of inputs pickled in storage (the operator's maxInputs setting "
        "caps it further).",
    )
    uri_prefix: str | None = Field(
        None,
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        alias="uriPrefix",
        description="With count: folder holding <index>.pkl for each input.",
    )
    sha256_uri: str | None = Field(
        None,
        pattern=STORAGE_URI_PATTERN,
        max_length=L.MAX_URI_LENGTH,
        alias="sha256URI",
        description="With count: JSON list of each input's hex SHA-256, under the storage "
        "root; needs sha256.",
    )
    sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        max_length=64,
        description="With count: hex SHA-256 of sha256URI (required with it).",
    )
    items: list[Any] | None = Field(
        None,
        max_length=L.MAX_ITEMS,
        description="Inline JSON inputs, one child per item; each nested at most "
        f"{L.MAX_DEPTH} levels deep, {L.MAX_INLINE_BYTES} bytes of JSON in all.",
    )
    grid: dict[GridKey, GridValues] | None = Field(
        None,
        max_length=L.MAX_GRID_KEYS,
        description="Named lists; one child per combination (cartesian product, "
        "last key in sorted order varies fastest).",
    )
    from_batch: FromBatch | None = Field(
        None,
        alias="fromBatch",
        description="Take the inputs (and, without spec.template, the template) of an earlier "
        "batch in this namespace; the operator resolves it once, when it accepts the batch.",
    )
    indexes: str | None = Field(
        None,
        pattern=RANGES_PATTERN,
        max_length=L.MAX_CANCEL_INDEXES_LENGTH,
        description="Run only these of the inputs above (original indexes, as ranges): input "
        "p of this batch is the p-th of them and keeps it as KINETIC_INDEX.",
    )


# template may be left out with inputs.fromBatch (the source batch's), so the schema asks
# for inputs or jobs; `limits.check_batch_form` says the rest in a sentence.
BATCH_FORM_ONE_OF: list[JsonValue] = [{"required": ["inputs"]}, {"required": ["jobs"]}]


class KineticBatchSpec(Wire):
    """A fan-out: one Pod per attempt of each input, orchestrated by the operator."""

    # Two forms, exactly one of which is set: template + inputs (one job spec over many
    # inputs), or jobs (a different job spec per input; input i runs jobs[i]). Everything
    # else means the same in both.

    model_config = ConfigDict(json_schema_extra={"oneOf": BATCH_FORM_ONE_OF})

    @property
    def sized_units(self) -> bool:
        """chunkSize auto: the operator sizes each unit (`kinetic.model.grid`)."""
        return self.chunk_size == "auto"

    @property
    def fixed_chunk(self) -> int:
        """The inputs each Pod runs when that is fixed (1 with chunkSize auto: each unit's
        size is the grid's)."""
        return self.chunk_size if isinstance(self.chunk_size, int) else 1

    template: KineticJobSpec | None = Field(
        None,
        description="The job spec every input runs with (with inputs; not with jobs); with "
        "inputs.fromBatch it defaults to the source batch's.",
    )
    inputs: BatchInputs | None = Field(
        None, description="The inputs (with template; not with jobs)."
    )
    jobs: list[BatchJobSpec] | None = Field(
        None,
        min_length=1,
        max_length=L.MAX_JOBS,
        description="A heterogeneous batch: one job spec per input (input i runs jobs[i]), "
        "instead of template and inputs.",
    )
    input_mode: InputMode = Field(
        "auto", description="How each input is passed to the function: auto, single, args, kwargs."
    )
    max_concurrent: int | None = Field(
        64,
        ge=1,
        le=L.MAX_CONCURRENT,
        description="Most Pods running at once; null starts every input at once.",
    )
    chunk_size: Annotated[int, Field(ge=1, le=MAX_CHUNK_SIZE)] | Literal["auto"] = Field(
        1,
        description="Function templates: consecutive inputs each Pod runs (each input is "
        "still recorded, retried and reported on its own); auto: the operator decides, unit "
        "by unit, from the inputs' measured durations.",
    )
    target_unit_seconds: float | None = Field(
        None,
        gt=0,
        le=L.MAX_TARGET_UNIT_SECONDS,
        description="chunkSize auto: about how many seconds of work one Pod is given (the "
        "operator's default when unset).",
    )
    cancel_indexes: str | None = Field(
        None,
        pattern=RANGES_PATTERN,
        max_length=L.MAX_CANCEL_INDEXES_LENGTH,
        description="Inputs to cancel, as ranges ('3,7-9'); may grow on a running batch.",
    )
    retries: int = Field(
        0, ge=0, le=L.MAX_RETRIES, description="Extra attempts per input after a failure."
    )
    fail_fast: bool = Field(False, description="Launch no new inputs after the first failure.")
    cancel_running_on_fail: bool = Field(
        False, description="With failFast: also cancel running inputs on the first failure."
    )
    cancel: bool = Field(False, description="Set to true to stop launching and cancel every Pod.")
    name: str | None = Field(
        None, max_length=L.MAX_NAME_LENGTH, description="A human-readable name."
    )
    tags: dict[TagKey, TagValue] = Field(
        default_factory=dict, max_length=L.MAX_TAGS, description="Free-form labels for the batch."
    )
    submission_failures: list[SubmissionFailure] = Field(
        default_factory=list,
        max_length=L.MAX_SUBMISSION_FAILURES,
        description="Inputs the client could not package.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data: Any) -> Any:
        """Exactly one of template + inputs, or jobs (the CRD's oneOf, said in a sentence)."""
        problem = L.check_batch_form(data)
        if problem is not None:
            raise ValueError(problem)
        return data


# --------------------------------------------------------------------------- status


class Condition(Wire):
    """A Kubernetes-style condition."""

    type: str = Field(description="Condition type, e.g. Running, Complete, Failed.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str | None = Field(None, description="One CamelCase word saying why.")
    message: str | None = Field(None, description="A sentence for people.")
    last_transition_time: str | None = Field(None, description="When status last changed.")


AttemptKind = Literal["pending", "running", "success", "failure", "disruption", "cancelled"]


class MemberRecord(Wire):
    """One member of a multi-host attempt: its rank, its Pod and how that Pod ended."""

    rank: int = Field(ge=0, description="The member's rank (RANK); rank 0 is the coordinator.")
    pod: str = Field(description="Name of the member's Pod.")
    pod_uid: str | None = Field(
        None,
        alias="podUID",
        max_length=64,
        description="The UID of the Pod the operator made: a Pod of that name with another UID "
        "is not this member's.",
    )
    outcome: str = Field(
        description="pending, running, succeeded, failed, gone (lost to a disruption) or "
        "stopped (deleted with its gang)."
    )
    exit_code: int | None = Field(None, description="Exit code of its main container.")
    reason: str | None = Field(None, max_length=256, description="Why it ended, briefly.")


class AttemptRecord(Wire):
    """One attempt: the Pod that ran it and how it ended."""

    attempt: int = Field(ge=1, description="Attempt number, from 1.")
    pod: str = Field(description="Name of the attempt's Pod.")
    pod_uid: str | None = Field(
        None,
        alias="podUID",
        max_length=64,
        description="The UID of the Pod the operator made for it (once seen): a Pod of that "
        "name with another UID is not this attempt's, whatever its labels say.",
    )
    start_time: str | None = Field(None, description="When the pod started.")
    end_time: str | None = Field(None, description="When the attempt ended.")
    exit_code: int | None = Field(None, description="Exit code of the main container.")
    reason: str | None = Field(
        None, description="Completed, Error, OOMKilled, DeadlineExceeded, Evicted, Deleted, ..."
    )
    message: str | None = Field(None, max_length=4096, description="What went wrong, briefly.")
    outcome: AttemptKind = Field(
        "running",
        description="pending, running, success, failure (uses a retry), disruption (does not) "
        "or cancelled.",
    )
    members: list[MemberRecord] | None = Field(
        None,
        max_length=L.MAX_HOSTS,
        description="A multi-host attempt's members by rank (pod is then the attempt's name).",
    )


class KineticJobStatus(Wire):
    """What the operator observed; written only by the operator."""

    phase: Phase = Field(
        Phase.PENDING, description="PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED."
    )
    attempt: int = Field(0, ge=0, description="Number of the current (or last) attempt.")
    failures: int = Field(
        0, ge=0, description="Application failures so far (count against retries)."
    )
    disruptions: int = Field(
        0, ge=0, description="Disruptions so far (do not count against retries)."
    )
    attempts: list[AttemptRecord] = Field(
        default_factory=list, description="The most recent attempts, oldest first (bounded)."
    )
    result_uri: str | None = Field(None, alias="resultURI", description="Where result.pkl is.")
    result_sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        alias="resultSHA256",
        description="Hex SHA-256 of result.pkl as the runner reported it; clients refuse "
        "to unpickle other bytes.",
    )
    result_bytes: int | None = Field(
        None,
        ge=0,
        alias="resultBytes",
        description="Size of result.pkl in bytes as the runner reported it; clients read "
        "no more than this.",
    )
    result: str | None = Field(
        None, max_length=4096, description="Container jobs: the termination message."
    )
    accepted_spec_sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        alias="acceptedSpecSHA256",
        description="Hex SHA-256 of the spec the operator accepted (all but spec.cancel); a "
        "later change is judged against the policy again before another Pod starts.",
    )
    message: str | None = Field(None, description="A sentence about the current state.")
    start_time: str | None = Field(None, description="When the first attempt started.")
    completion_time: str | None = Field(None, description="When the job ended.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Running, Complete, Failed."
    )
    observed_generation: int | None = Field(None, description="The spec generation last acted on.")


class PhaseCounts(Wire):
    """How many inputs are in each phase; `pending` includes inputs not launched yet."""

    pending: int = Field(0, ge=0, description="Not launched yet, or launched and not running.")
    running: int = Field(0, ge=0, description="Running now.")
    succeeded: int = Field(0, ge=0, description="Succeeded.")
    failed: int = Field(0, ge=0, description="Failed after their retries, or at submission.")
    cancelled: int = Field(0, ge=0, description="Cancelled, or never launched after a stop.")


class UnitDurations(Wire):
    """How long the batch's inputs took so far, as the units' Pods measured them: what the
    operator sizes the next units from (three numbers, so a restarted operator goes on)."""

    count: int = Field(0, ge=0, description="Inputs measured.")
    total_seconds: float = Field(0.0, ge=0, description="Their durations added up.")
    longest_seconds: float = Field(0.0, ge=0, description="The longest of them.")


class KineticBatchStatus(Wire):
    """A batch's progress, compact at any size: counts and index ranges, not per-child lists."""

    phase: Phase = Field(
        Phase.PENDING, description="PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED."
    )
    total: int = Field(0, ge=0, description="Number of inputs.")
    counts: PhaseCounts = Field(default_factory=PhaseCounts, description="Inputs per phase.")
    progress: str | None = Field(None, description="succeeded/total, for kubectl get.")
    launched: int = Field(
        0, ge=0, description="High-water mark: every index below it has been launched."
    )
    active_indexes: str = Field("", description="Launched, not finished, as ranges ('0-4,7').")
    succeeded_indexes: str = Field("", description="Succeeded inputs as ranges ('0-4,7,9-12').")
    failed_indexes: str = Field("", description="Failed inputs as ranges.")
    cancelled_indexes: str = Field("", description="Cancelled inputs as ranges.")
    truncated: bool = Field(
        False,
        description="The index ranges above were cut at the status size cap; the manifest "
        "has them complete.",
    )
    manifest_uri: str | None = Field(
        None,
        alias="manifestURI",
        description=(
            "The batch manifest's header (one of its two slots: see kinetic.model.manifest)."
        ),
    )
    manifest_sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        alias="manifestSHA256",
        description="Hex SHA-256 of the header at manifestURI. The header holds each shard's "
        "SHA-256 and each shard its inputs' result SHA-256s: readers check every step.",
    )
    accepted_spec_sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        alias="acceptedSpecSHA256",
        description="Hex SHA-256 of the accepted spec the operator stored next to the "
        "manifest; it is checked, and judged again, whenever it is read back.",
    )
    unit_grid: str | None = Field(
        None,
        max_length=L.MAX_UNIT_GRID_LENGTH,
        description="chunkSize auto: where the units start and how many inputs each holds "
        "('0:16,320:8': from input 0 units of 16, from 320 units of 8), grown as they launch.",
    )
    unit_durations: UnitDurations | None = Field(
        None, description="chunkSize auto: what the inputs' durations measured so far say."
    )
    start_time: str | None = Field(None, description="When the first input was launched.")
    completion_time: str | None = Field(None, description="When the batch ended.")
    message: str | None = Field(None, description="A sentence about the current state.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Running, Complete, Failed, ManifestWritten."
    )
    observed_generation: int | None = Field(None, description="The spec generation last acted on.")
