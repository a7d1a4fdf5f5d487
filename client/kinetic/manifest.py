"""The batch manifest's schema: what the operator writes and every client reads.

A batch's manifest outlives its Kubernetes objects (finished Pods are
deleted after a TTL, the KineticBatch may be deleted), so it is where the
complete per-input record lives. It is two kinds of JSON object in storage
(see `kinetic.layout`):

* the **header** (`ManifestHeader`, ``manifest.json``): the batch's
  definition and outcome, with the complete index ranges (the batch status
  may cap them);
* **shards** (`ManifestShard`, ``manifest/<s>.json``): the attempt history
  of inputs ``[s*SHARD_SIZE, (s+1)*SHARD_SIZE)``, one `InputRecord` per
  input that had a Pod. Only shards that changed are rewritten, so keeping
  the record current costs the same at 100 or 100,000 inputs.

The operator writes the header before it creates the first Pod, then
shards and header together, debounced, and at the end; a Pod is deleted
only once its outcome is in a written shard.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kinetic.rerun import original_index
from kinetic.resources import AttemptRecord

MANIFEST_VERSION = 2

InputOutcome = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def encode(self) -> bytes:
        """Compact UTF-8 JSON, unset fields left out."""
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


class InputRecord(_Doc):
    """Everything known about one input that had a Pod."""

    outcome: InputOutcome = "PENDING"
    attempts: list[AttemptRecord] = Field(default_factory=list)
    result: str | None = Field(None, description="Container inputs: the termination message.")
    result_sha256: str | None = Field(
        None,
        alias="resultSHA256",
        description="Function inputs: hex SHA-256 of the result as the runner reported it.",
    )
    message: str | None = Field(None, max_length=4096)


class ManifestShard(_Doc):
    """Attempt history of one range of inputs."""

    version: int = MANIFEST_VERSION
    group_id: str
    shard: int = Field(ge=0)
    inputs: dict[str, InputRecord] = Field(default_factory=dict)


class SubmissionFailureRecord(_Doc):
    index: int
    message: str
    error_type: str | None = None


class RerunOf(_Doc):
    """The batch a rerun took its inputs from (`kinetic.rerun`)."""

    name: str
    uid: str | None = None
    selected: str = Field("failed", description="failed, all, or the source's index ranges.")


class ManifestHeader(_Doc):
    """A batch's definition and outcome; the complete index ranges."""

    version: int = MANIFEST_VERSION
    group_id: str
    namespace: str | None = None
    uid: str | None = None
    name: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    kind: Literal["function", "container", "mixed"] = "function"
    container_indexes: str = Field(
        "", description="A mixed (spec.jobs) batch: the inputs that run containers, as ranges."
    )
    function_name: str | None = None
    total: int = 0
    chunk_size: int = 1
    input_mode: str = "auto"
    max_concurrent: int | None = None
    retries: int = 0
    fail_fast: bool = False
    cancel_running_on_fail: bool = False
    created_at: str | None = None
    updated_at: str | None = None
    phase: str = "PENDING"
    launched: int = 0
    succeeded_indexes: str = ""
    failed_indexes: str = ""
    cancelled_indexes: str = ""
    shard_size: int = 1000
    shards: list[int] = Field(default_factory=list, description="Shards written so far.")
    submission_failures: list[SubmissionFailureRecord] = Field(default_factory=list)
    rerun_of: RerunOf | None = Field(None, description="A rerun: the batch its inputs are from.")
    original_indexes: str | None = Field(
        None,
        description="Input p of this batch is the p-th of these original indexes (ranges, "
        "ascending): the index it ran as (KINETIC_INDEX) and had in the source batch.",
    )

    def original_index(self, position: int) -> int:
        """The original index of input ``position`` (itself when this is no rerun)."""
        return original_index(self.original_indexes, position)


def decode_header(data: bytes) -> ManifestHeader | None:
    """The header, or None for a manifest of another version (never misread)."""
    raw: Any = json.loads(data)
    if not isinstance(raw, dict) or raw.get("version") != MANIFEST_VERSION:
        return None
    return ManifestHeader.model_validate(raw)


def decode_shard(data: bytes) -> ManifestShard | None:
    raw: Any = json.loads(data)
    if not isinstance(raw, dict) or raw.get("version") != MANIFEST_VERSION:
        return None
    return ManifestShard.model_validate(raw)
