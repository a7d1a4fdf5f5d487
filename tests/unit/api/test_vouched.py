"""Clients read a batch's manifest only as its status vouches for it.

The manifest is written by the operator's own `ManifestBook` into real
``file://`` storage, and the status is what the operator's status writes
carry (``manifestURI``, ``manifestSHA256``); the reader gets it through the
callable it reads a batch's status with. Storage is then changed as any Pod
or bucket writer could.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kinetic import storage
from kinetic.api.vouched import VouchedManifest
from kinetic.model import digest, layout
from kinetic.model.limits import header_max_bytes
from kinetic.model.manifest import InputRecord, ManifestShard, ShardRef
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    Condition,
    KineticBatchSpec,
    KineticBatchStatus,
    PhaseCounts,
)
from kinetic_operator.logic.batch_logic import Recorded, compact_status
from kinetic_operator.logic.batch_work import RANGE_CAP
from kinetic_operator.logic.manifest_records import build_header
from kinetic_operator.manifest import ManifestBook
from manifest_history import T0, home, make_spec, running, succeeded

HASH0 = "0" * 64


class Status:
    """What the batch's status says, as the API server would answer (None: gone)."""

    def __init__(self, book: ManifestBook) -> None:
        self.book = book
        self.now: dict[str, Any] | None = {}
        self.reads = 0

    def vouch(self) -> dict[str, Any]:
        """The operator's next status write: it vouches for what it wrote last."""
        latest = self.book.latest
        assert latest is not None
        self.book.vouched(latest.uri, latest.sha256)
        self.now = {"total": 4, "manifestURI": latest.uri, "manifestSHA256": latest.sha256}
        return self.now

    def __call__(self) -> dict[str, Any] | None:
        self.reads += 1
        return self.now


def write(book: ManifestBook, plans: dict, done: list[int]) -> None:
    spec = make_spec(4)
    book.note(plans, 1, 4, container=False)
    recorded = Recorded(IndexSet(done), IndexSet(), IndexSet())
    status = KineticBatchStatus(phase="RUNNING", launched=4)
    header = build_header(book.home, spec, status, recorded, created=None, now=T0, shards=[])
    book.write(header, recorded)


@pytest.fixture
def batch(tmp_path) -> tuple[ManifestBook, Status]:
    book = ManifestBook(home(f"file://{tmp_path}/store"))
    write(book, {0: succeeded(0, digest.with_sha256("ok", HASH0)), 1: running(1)}, [0])
    status = Status(book)
    status.vouch()
    return book, status


def reader(book: ManifestBook, status: Status) -> VouchedManifest:
    return VouchedManifest(book.home, status, sleep=lambda _: None)


def test_the_result_hash_comes_through_the_chain_the_status_vouches_for(batch) -> None:
    book, status = batch
    manifest = reader(book, status)
    assert manifest.vouched
    shard = manifest.shard(0)
    assert shard is not None and shard.inputs["0"].result_sha256 == HASH0


def test_a_forged_shard_is_refused_naming_the_uri_and_both_hashes(batch) -> None:
    """The issue's attack: input 1's recorded hash rewritten to another result's."""
    book, status = batch
    uri = book.home.manifest_shard_uri(0, book.refs[0].slot)
    doc = json.loads(storage.read_bytes(uri))
    doc["inputs"]["1"]["resultSHA256"] = HASH0
    forged = json.dumps(doc).encode()
    storage.write_bytes(uri, forged)
    with pytest.raises(digest.ResultMismatch) as err:
        reader(book, status).shard(0)
    text = str(err.value)
    assert uri in text and book.refs[0].sha256 in text and digest.sha256(forged) in text
    assert "manifest shard" in text


def test_a_forged_header_is_refused(batch) -> None:
    book, status = batch
    uri = status.now["manifestURI"]  # type: ignore[index]
    storage.write_bytes(uri, storage.read_bytes(uri).replace(b'"RUNNING"', b'"FAILED"'))
    with pytest.raises(digest.ResultMismatch, match="refusing to use the manifest header"):
        reader(book, status).header()


def test_a_newer_manifest_the_status_does_not_name_yet_is_no_forgery(batch) -> None:
    """The reader holds a status; meanwhile the operator vouches for a newer manifest, and
    writes a newer one still into the slot the reader's status named."""
    book, status = batch
    manifest = reader(book, status)
    manifest.seen(dict(status.now or {}))  # e.g. from a watch event
    write(book, {1: succeeded(1, digest.with_sha256("ok", "1" * 64))}, [0, 1])
    status.vouch()
    write(book, {2: running(2)}, [0, 1])  # into the slot the reader's status names
    shard = manifest.shard(0)
    assert shard is not None and shard.inputs["1"].result_sha256 == "1" * 64


def test_once_the_batch_is_gone_nothing_is_vouched_for(batch) -> None:
    book, status = batch
    status.now = None
    manifest = reader(book, status)
    assert not manifest.vouched
    assert "no longer exists" in manifest.why_not()
    header = manifest.header()  # still read, for what it says
    assert header is not None and header.succeeded_indexes == "0"


# --------------------------------------------------------------------------- at size


def test_the_chain_stays_bounded_at_a_million_inputs() -> None:
    """1,000,000 inputs in 1,000 shards: the status (ranges cut at their cap, every
    condition, every digest) is under 64 KiB; the header listing every shard's digest is
    under the bound readers allow it; a full shard of 1,000 records is a few hundred KB."""
    n = 1_000_000
    every_other = ",".join(str(i) for i in range(0, n // 2, 2))
    message = "Done with failures: 500000/1000000 succeeded, 500000 failed, 0 cancelled."
    conditions = [
        Condition(
            type=t,
            status="True",
            reason="InputsFailed",
            message=message,
            last_transition_time="2026-01-01T00:00:00Z",
        )  # fmt: skip
        for t in (
            "Running",
            "Complete",
            "Failed",
            "Ready",
            "Reconciling",
            "Stalled",
            "ManifestWritten",
            "SpecAccepted",
            "ReconcileFailed",
        )  # fmt: skip
    ]
    status = compact_status(
        KineticBatchStatus(
            phase="FAILED",
            total=n,
            counts=PhaseCounts(succeeded=n // 2, failed=n // 2),
            progress=f"{n // 2}/{n}",
            launched=n,
            active_indexes=every_other,
            succeeded_indexes=every_other,
            failed_indexes=every_other,
            cancelled_indexes=every_other,
            manifest_uri="gs://kinetic-bucket/root/namespaces/team-research-a/batches/"
            "grp-0a1b2c3d/0d1c2b3a-0000-4000-8000-000000000001/manifest.1.json",
            manifest_sha256="a" * 64,
            accepted_spec_sha256="b" * 64,
            start_time="2026-01-01T00:00:00Z",
            completion_time="2026-01-02T00:00:00Z",
            message=message,
            conditions=conditions,
            observed_generation=12,
        )
    )
    size = len(json.dumps(status.wire(), separators=(",", ":")))
    assert status.truncated and len(status.succeeded_indexes) <= RANGE_CAP
    assert size < 64 * 1024, size

    spec = KineticBatchSpec.model_validate(
        {
            "template": {"function": {"payloadURI": "gs://b/f.pkl", "sha256": "c" * 64}},
            "inputs": {"count": n, "uriPrefix": "gs://b/in"},
        }
    )
    alternate = IndexSet.parse(",".join(str(i) for i in range(0, n, 2)))
    recorded = Recorded(alternate, IndexSet.range(0, n) - alternate, IndexSet())
    book = ManifestBook(layout.batch_home("gs://b", "ns", "grp-0a1b2c3d", "u"))
    header = build_header(book.home, spec, status, recorded, created=None, now=T0, shards=[])
    header.shards = list(range(1000))
    header.shard_refs = {str(s): ShardRef(slot=s % 2, sha256="d" * 64) for s in range(1000)}
    assert len(header.encode()) < header_max_bytes(n)

    record = InputRecord.model_validate(
        {
            "outcome": "SUCCEEDED",
            "resultSHA256": "e" * 64,
            "attempts": [
                {
                    "attempt": 1,
                    "pod": "grp-0a1b2c3d-999999-1",
                    "outcome": "success",
                    "startTime": "2026-01-01T00:00:00Z",
                    "endTime": "2026-01-01T00:00:01Z",
                    "exitCode": 0,
                    "reason": "Completed",
                    "message": f"ok sha256={'e' * 64}",
                }  # fmt: skip
            ],
        }
    )
    shard = ManifestShard(group_id="grp-0a1b2c3d", shard=999, inputs={
        str(999_000 + i): record for i in range(1000)
    })  # fmt: skip
    assert len(shard.encode()) < 512 * 1024


# --------------------------------------------------------------------------- end to end


def test_what_the_operator_writes_the_client_reads_through_restarts(tmp_path) -> None:
    """The batch reconcile writes (fake API, real storage), restarting between writes; at
    every step a client reading through the batch's status finds every recorded result
    hash, and never a mismatch."""
    from kinetic_operator.logic.manifest_records import Debouncer
    from kinetic_operator.settings import OperatorSettings
    from kinetic_testing.bodies import GRP
    from kinetic_testing.fake_kube import FakeKube
    from kinetic_testing.reconcilers import Batch

    settings = OperatorSettings(
        storage_root=f"file://{tmp_path}/store", default_image="img:1", status_interval=0
    )
    spec = {
        "template": {
            "function": {
                "payloadURI": f"{settings.storage_root}/namespaces/ns/u/f.pkl",
                "sha256": "a" * 64,
            }
        },
        "inputs": {"items": list(range(6))},
        "maxConcurrent": 2,
    }
    kube = FakeKube()
    batch = Batch(kube, settings, spec)
    reported: dict[int, str] = {}

    def read_back() -> None:
        manifest = VouchedManifest(batch.home, lambda: kube.status_of("kineticbatches", GRP))
        assert manifest.vouched
        shard = manifest.shard(0)
        for i, sha in reported.items():
            record = shard.inputs.get(str(i)) if shard is not None else None
            if record is not None and record.result_sha256 is not None:
                assert record.result_sha256 == sha

    for step in range(12):
        batch.reconcile()
        batch.mem.debouncer = Debouncer(interval=0)
        batch.deliver()
        for name, pod in list(kube.pods.items()):
            if pod["status"]["phase"] == "Pending":
                i = int(pod["metadata"]["labels"]["kinetic.dev/index"])
                reported[i] = f"{i:064x}"
                kube.end_pod(name, message=digest.with_sha256(f"ok {i}", reported[i]))
        batch.reconcile()
        read_back()
        if step % 3 == 1:
            batch.restart()
        if batch.status.get("phase") == "SUCCEEDED":
            break
    batch.reconcile()
    assert batch.status["phase"] == "SUCCEEDED"
    manifest = VouchedManifest(batch.home, lambda: kube.status_of("kineticbatches", GRP))
    shard = manifest.shard(0)
    assert shard is not None
    assert {int(k): r.result_sha256 for k, r in shard.inputs.items()} == reported
    assert all(storage.exists(batch.home.header_uri(slot)) for slot in (0, 1))  # both in use
