"""The batch manifest's schema: what the operator writes and every client reads.

A batch's manifest outlives its Kubernetes objects (finished Pods are
deleted after a TTL, the KineticBatch may be deleted), so it is where the
complete per-input record lives. It is two kinds of JSON object in storage
(see `kinetic.model.layout`):

* the **header** (`ManifestHeader`, ``manifest.json``): the batch's
  definition and outcome, with the complete index ranges (the batch status
  may cap them);
* **shards** (`ManifestShard`, ``manifest/<s>.json``): the attempt history
  of inputs ``[s*SHARD_SIZE, (s+1)*SHARD_SIZE)``, one `InputRecord` per
  input that had a Pod. Only shards that changed are rewritten, so keeping
  the record current costs the same at 100 or 100,000 inputs.

The operator writes the header before it creates the first Pod, then
shards and header together, debounced, and at the end; a Pod is deleted
only once its outcome is in a shard the batch status vouches for.

The chain of trust
------------------

Storage is writable by every Pod and by anyone with the bucket's
credentials, so nothing in it is believed on its own. What vouches for the
manifest is the batch's status, which only the operator can write:

* ``status.manifestURI`` and ``status.manifestSHA256`` name a header and its
  SHA-256 (`Anchor`);
* the header lists every shard's slot and SHA-256 (``shardRefs``);
* each shard holds its function inputs' result SHA-256s, as the runner
  reported them through the API server.

So a reader goes status -> header -> shard -> result, checking each step's
bytes against the digest the step before holds, and one bound per object
(`kinetic.model.limits`) keeps a forged object from costing more than its bound.
The status stays small at any size: one digest, however many shards.

Ordering. Each file has two slots (``layout.MANIFEST_SLOTS``). The operator
writes a new version into the slot the status does *not* vouch for, then
records its digest with a status write it makes anyway (or, when none comes
soon, one of its own); it never writes into a slot the status vouches for.
Hence a reader whose bytes differ from what the status it holds says either
holds an old status (a newer one vouches for newer bytes: read the status
again) or is looking at a forgery (the status is unchanged): there is no
third case. An operator that dies between the file write and the status
write leaves the vouched-for version untouched, so a restart loses nothing.
When a batch has ended, its final status vouches for its final manifest.

Once the batch is deleted, nothing vouches for the manifest any more: it is
still read for what it says (status, attempts, messages), but no result is
taken from storage on its word (`kinetic.model.digest.Unverifiable`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kinetic.model import digest
from kinetic.model.limits import SHARD_BUDGET
from kinetic.model.rerun import original_index
from kinetic.model.resources import SHA256_PATTERN, AttemptRecord

MANIFEST_VERSION = 2

InputOutcome = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
FINAL_OUTCOMES: tuple[InputOutcome, ...] = ("SUCCEEDED", "FAILED", "CANCELLED")  # kept for good


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
    result_bytes: int | None = Field(
        None,
        ge=0,
        alias="resultBytes",
        description="Function inputs: the result's size as the runner reported it; clients "
        "read no more (absent from runners that predate it).",
    )
    message: str | None = Field(None, max_length=4096)


class ManifestShard(_Doc):
    """Attempt history of one range of inputs."""

    version: int = MANIFEST_VERSION
    group_id: str
    shard: int = Field(ge=0)
    inputs: dict[str, InputRecord] = Field(default_factory=dict)


class ShardRef(_Doc):
    """Where a shard's current version is, and its SHA-256 (the header vouches for it)."""

    slot: int = Field(0, ge=0, le=1)
    sha256: str = Field(pattern=SHA256_PATTERN)


KEPT_ATTEMPTS = 10  # attempts a record keeps when its shard would exceed its budget
CUT_MESSAGE = 512  # and the length each kept attempt's message is cut to


def shard_bytes(doc: ManifestShard, budget: int = SHARD_BUDGET) -> bytes:
    """The shard as written: its encoding, or, past ``budget``, a leaner one.

    A Pod can make its record grow: up to 4 KB of termination message per
    attempt, and up to a hundred attempts. Past the budget each record keeps
    its last `KEPT_ATTEMPTS` attempts with messages cut to `CUT_MESSAGE`
    characters (its outcome, result, hash and final message stay whole), so
    a shard never outgrows what readers accept (``limits.MAX_SHARD_BYTES``).
    """
    data = doc.encode()
    if len(data) <= budget:
        return data
    lean = {
        key: rec.model_copy(
            update={
                "attempts": [
                    a.model_copy(update={"message": (a.message or "")[:CUT_MESSAGE] or None})
                    for a in rec.attempts[-KEPT_ATTEMPTS:]
                ]
            }
        )
        for key, rec in doc.inputs.items()
    }
    return doc.model_copy(update={"inputs": lean}).encode()


class SubmissionFailureRecord(_Doc):
    index: int
    message: str
    error_type: str | None = None


class RerunOf(_Doc):
    """The batch a rerun took its inputs from (`kinetic.model.rerun`)."""

    name: str
    uid: str | None = None
    selected: str = Field("failed", description="failed, all, or the source's index ranges.")


class ManifestHeader(_Doc):
    """A batch's definition and outcome; the complete index ranges."""

    version: int = MANIFEST_VERSION
    revision: int = Field(
        0, ge=0, description="Counts the header's writes: of two slots, the newer is higher."
    )
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
    unit_grid: str | None = Field(
        None, description="chunkSize auto: where each unit starts (the status's unitGrid)."
    )
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
    shard_refs: dict[str, ShardRef] = Field(
        default_factory=dict,
        description="Each written shard's slot and SHA-256: what vouches for its bytes.",
    )
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

    def shard_ref(self, shard: int) -> ShardRef | None:
        return self.shard_refs.get(str(shard))


@dataclass(frozen=True)
class Anchor:
    """What a batch's status vouches for: the header at ``uri``, hashing to ``sha256``.

    ``sha256`` None is a status written before digests were recorded (or none
    at all): nothing vouches for the manifest.
    """

    uri: str | None = None
    sha256: str | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any] | None) -> Anchor:
        """From a batch's status as the API server returns it."""
        raw = status or {}
        uri, sha = raw.get("manifestURI"), raw.get("manifestSHA256")
        return cls(uri if isinstance(uri, str) else None, sha if isinstance(sha, str) else None)

    @property
    def vouches(self) -> bool:
        return self.uri is not None and self.sha256 is not None


def check(data: bytes, expected: str | None, uri: str, what: str) -> None:
    """Raise `digest.ResultMismatch` unless ``data`` hashes to ``expected``."""
    actual = digest.sha256(data)
    if expected is None or actual != expected:
        raise digest.ResultMismatch(uri, expected, actual, what=what)


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
