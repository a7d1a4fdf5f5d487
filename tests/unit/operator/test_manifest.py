"""The batch manifest as the operator keeps it: a header and shards, in real storage.

Every test writes to a ``file://`` storage root under ``tmp_path`` through
`kinetic.storage`, and reads back what a client would read: the header
(`decode_header`) and the shards (`decode_shard`). A file's generation
(`storage.stat`) tells whether it was rewritten.
"""

from __future__ import annotations

import pytest
from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.limits import MAX_SHARD_BYTES, SHARD_BUDGET
from kinetic.model.manifest import (
    MANIFEST_VERSION,
    Anchor,
    ManifestHeader,
    ManifestShard,
    decode_shard,
    shard_bytes,
)
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import KineticBatchSpec, KineticBatchStatus
from kinetic_operator.logic.attempts import UnitPlan
from kinetic_operator.logic.batch_logic import Recorded, compact_status, decide_batch
from kinetic_operator.logic.manifest_records import Debouncer, build_header, recorded_from
from kinetic_operator.manifest import ManifestBook, read_header
from manifest_history import BATCH, T0, UID, home, make_spec, plan, pod, running, succeeded

SHA = "c" * 64
CREATED = "2024-05-01T11:59:58Z"


@pytest.fixture
def root(tmp_path) -> str:
    return f"file://{tmp_path}/store"


def container_spec(n: int = 3) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {"template": {"container": {"command": ["echo"]}}, "inputs": {"items": list(range(n))}}
    )


def failed(unit: int) -> UnitPlan:
    p = pod(unit, phase="Failed", exit_code=2, terminated_reason="Error", termination_message="x")
    return plan(unit, p)


def header_for(spec: KineticBatchSpec, recorded: Recorded, phase: str = "RUNNING"):
    status = KineticBatchStatus(phase=phase, launched=len(recorded.terminal))
    return build_header(
        home("file:///unused"), spec, status, recorded, created=CREATED, now=T0, shards=[]
    )


def newest_header(root: str) -> ManifestHeader:
    """The header written last, whichever slot it is in."""
    found = [h for h in (read_header(home(root), slot) for slot in (0, 1)) if h is not None]
    assert found
    return max(found, key=lambda h: h.revision)


def shard_uri(root: str, shard: int) -> str:
    """Where the newest header says the shard's newest version is."""
    ref = newest_header(root).shard_ref(shard)
    assert ref is not None
    return home(root).manifest_shard_uri(shard, ref.slot)


def read_shard(root: str, shard: int) -> ManifestShard:
    found = decode_shard(storage.read_bytes(shard_uri(root, shard)))
    assert found is not None
    return found


def generation(root: str, shard: int) -> int | None:
    return storage.stat(shard_uri(root, shard))


def vouch(book: ManifestBook) -> Anchor:
    """What the batch status says once its next write records the book's newest header."""
    assert book.latest is not None
    book.vouched(book.latest.uri, book.latest.sha256)
    return Anchor(book.latest.uri, book.latest.sha256)


# --------------------------------------------------------------------------- header


def test_the_header_describes_the_batch_and_holds_the_complete_ranges(root):
    spec = make_spec(6, maxConcurrent=2, submissionFailures=[{"index": 1, "message": "nope"}])
    d = decide_batch(spec, None, {}, T0, batch=BATCH)
    header = build_header(
        home("file:///unused"), spec, d.status, d.recorded, created=CREATED, now=T0, shards=[]
    )
    ManifestBook(home(root)).write(header, d.recorded)
    got = read_header(home(root))
    assert got is not None and got.version == MANIFEST_VERSION
    assert (got.group_id, got.namespace, got.uid, got.name, got.tags) == (
        BATCH,
        "ns",
        UID,
        "sweep",
        {"team": "ml"},
    )
    assert (got.kind, got.function_name, got.total, got.chunk_size) == ("function", "train", 6, 1)
    assert (got.max_concurrent, got.retries, got.fail_fast) == (2, 0, False)
    assert got.created_at == CREATED and got.updated_at == "2024-05-01T12:00:00Z"
    assert got.failed_indexes == "1" and got.launched == 3 and got.phase == "PENDING"
    assert [(f.index, f.message) for f in got.submission_failures] == [(1, "nope")]
    assert got.shards == []  # nothing ran yet


def test_the_header_is_complete_when_the_status_ranges_were_cut(root):
    n = 20_000
    evens, odds = IndexSet(range(0, n, 2)), IndexSet(range(1, n, 2))
    recorded = Recorded(evens, odds, IndexSet())
    status = compact_status(
        KineticBatchStatus(
            phase="FAILED", total=n, succeeded_indexes=str(evens), failed_indexes=str(odds)
        ),
        cap=100,
    )
    assert status.truncated
    header = build_header(
        home("file:///unused"), make_spec(n), status, recorded, created=None, now=T0, shards=[]
    )
    ManifestBook(home(root)).write(header, recorded)
    back = recorded_from(read_header(home(root)))
    assert back is not None
    assert back.succeeded == evens and back.failed == odds and back.cancelled == IndexSet()


def test_a_header_of_another_version_or_none_at_all_reads_as_none(root):
    assert read_header(home(root)) is None and recorded_from(None) is None
    storage.write_bytes(home(root).manifest_uri, b'{"version": 1, "groupId": "x"}')
    assert read_header(home(root)) is None


def test_a_container_header(root):
    spec = container_spec(2)
    h = header_for(spec, Recorded())
    assert h.kind == "container" and h.function_name is None and h.total == 2
    assert h.name is None and h.tags == {}


# --------------------------------------------------------------------------- shards


def test_each_input_gets_its_attempt_history_in_its_shard(root):
    book = ManifestBook(home(root))
    retry = plan(
        1,
        pod(1, phase="Failed", exit_code=1, terminated_reason="Error", termination_message="e"),
        pod(1, 2),
        retries=1,
    )
    book.note({0: succeeded(0, "ok"), 1: retry, 2: failed(2)}, 1, 6, container=True)
    recorded = Recorded(IndexSet([0]), IndexSet([2]), IndexSet())
    book.write(header_for(container_spec(6), recorded), recorded)
    shard = read_shard(root, 0)
    assert shard.group_id == BATCH and shard.shard == 0 and set(shard.inputs) == {"0", "1", "2"}
    zero, one, two = shard.inputs["0"], shard.inputs["1"], shard.inputs["2"]
    assert (zero.outcome, zero.result) == ("SUCCEEDED", "ok")
    assert [(a.attempt, a.pod, a.outcome) for a in zero.attempts] == [
        (1, f"{BATCH}-i0-1", "success")
    ]
    assert one.outcome == "RUNNING" and [a.outcome for a in one.attempts] == ["failure", "running"]
    assert two.outcome == "FAILED" and "no retries" in two.message and two.result is None


def test_function_inputs_keep_no_inline_result(root):
    book = ManifestBook(home(root))
    book.note({0: succeeded(0, "ok: returned int")}, 1, 1, container=False)
    recorded = Recorded(IndexSet([0]), IndexSet(), IndexSet())
    book.write(header_for(make_spec(1), recorded), recorded)
    assert read_shard(root, 0).inputs["0"].result is None


def test_a_chunk_plan_records_every_input_of_the_chunk(root):
    book = ManifestBook(home(root))
    book.note({0: running(0), 3: running(3)}, 3, 5, container=False)
    book.write(header_for(make_spec(5, chunkSize=3), Recorded()), Recorded())
    shard = read_shard(root, 0)
    assert sorted(shard.inputs, key=int) == ["0", "1", "2", "3", "4"]
    assert shard.inputs["4"].attempts[0].pod == f"{BATCH}-i3-1"


def test_outcomes_the_batch_recorded_win_over_the_last_plan(root):
    """Input 1 was cancelled (spec.cancelIndexes) while its Pod ran: the shard says so."""
    book = ManifestBook(home(root))
    book.note({0: running(0), 1: running(1)}, 1, 2, container=False)
    book.write(header_for(make_spec(2), Recorded()), Recorded())
    assert read_shard(root, 0).inputs["1"].outcome == "RUNNING"
    recorded = Recorded(IndexSet(), IndexSet(), IndexSet([1]))
    book.write(header_for(make_spec(2), recorded), recorded)
    assert read_shard(root, 0).inputs["1"].outcome == "CANCELLED"
    assert read_shard(root, 0).inputs["0"].outcome == "RUNNING"


def test_only_shards_that_changed_are_written(root):
    n = 3 * layout.SHARD_SIZE
    spec = make_spec(n)
    book = ManifestBook(home(root))
    units = [5, layout.SHARD_SIZE + 5, 2 * layout.SHARD_SIZE + 5]
    book.note({u: running(u) for u in units}, 1, n, container=False)
    book.write(header_for(spec, Recorded()), Recorded())
    before = [generation(root, s) for s in range(3)]
    assert all(before)
    # Nothing new: nothing is rewritten but the header.
    book.note({u: running(u) for u in units}, 1, n, container=False)
    book.write(header_for(spec, Recorded()), Recorded())
    assert [generation(root, s) for s in range(3)] == before
    # Input 1005 ends: only shard 1 is rewritten.
    book.note({units[1]: succeeded(units[1])}, 1, n, container=False)
    recorded = Recorded(IndexSet([units[1]]), IndexSet(), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    after = [generation(root, s) for s in range(3)]
    assert after[0] == before[0] and after[2] == before[2] and after[1] != before[1]
    assert read_shard(root, 1).inputs[str(units[1])].outcome == "SUCCEEDED"


def test_a_new_book_after_a_restart_merges_what_was_written_before(root):
    spec = make_spec(10)
    first = ManifestBook(home(root))
    first.note({i: succeeded(i) for i in range(3)} | {3: running(3)}, 1, 10, container=False)
    recorded = Recorded(IndexSet.range(0, 3), IndexSet(), IndexSet())
    first.write(header_for(spec, recorded), recorded)
    # The operator restarts: a new book knows only what the status vouches for, and
    # input 4 starts, 3 fails.
    second = ManifestBook(home(root))
    assert second.load(vouch(first), 10) is not None
    second.note({3: failed(3), 4: running(4)}, 1, 10, container=False)
    recorded = Recorded(IndexSet.range(0, 3), IndexSet([3]), IndexSet())
    second.write(header_for(spec, recorded), recorded)
    inputs = read_shard(root, 0).inputs
    assert {k: v.outcome for k, v in inputs.items()} == {
        "0": "SUCCEEDED",
        "1": "SUCCEEDED",
        "2": "SUCCEEDED",
        "3": "FAILED",
        "4": "RUNNING",
    }
    assert inputs["0"].attempts[0].outcome == "success"  # the earlier history, intact


def test_settled_shards_are_dropped_from_memory_and_read_back_when_needed(root):
    n = 2 * layout.SHARD_SIZE
    spec = make_spec(n)
    book = ManifestBook(home(root))
    book.note(
        {0: succeeded(0), 1: failed(1), layout.SHARD_SIZE: running(layout.SHARD_SIZE)},
        1,
        n,
        container=False,
    )
    recorded = Recorded(IndexSet([0]), IndexSet([1]), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    assert set(book.shards) == {1}  # shard 0 has nothing left to change
    assert read_shard(root, 0).inputs.keys() == {"0", "1"}
    # Later, more of shard 0 runs: the shard is read back, nothing written before is lost.
    book.note({2: succeeded(2)}, 1, n, container=False)
    recorded = Recorded(IndexSet([0, 2]), IndexSet([1]), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    assert {k: v.outcome for k, v in read_shard(root, 0).inputs.items()} == {
        "0": "SUCCEEDED",
        "1": "FAILED",
        "2": "SUCCEEDED",
    }
    assert set(book.shards) == {1}


def test_the_header_lists_every_shard_written_even_after_a_restart(root):
    n = 3 * layout.SHARD_SIZE
    spec = make_spec(n)
    first = ManifestBook(home(root))
    first.note(
        {0: succeeded(0), layout.SHARD_SIZE: running(layout.SHARD_SIZE)}, 1, n, container=False
    )
    recorded = Recorded(IndexSet([0]), IndexSet(), IndexSet())
    first.write(header_for(spec, recorded), recorded)
    assert newest_header(root).shards == [0, 1]
    second = ManifestBook(home(root))  # a restart; only shard 2 changes from now on
    second.load(vouch(first), n)
    second.note({2 * layout.SHARD_SIZE: running(2 * layout.SHARD_SIZE)}, 1, n, container=False)
    second.write(header_for(spec, recorded), recorded)
    assert newest_header(root).shards == [0, 1, 2]
    assert sorted(int(k) for k in newest_header(root).shard_refs) == [0, 1, 2]


def test_a_failed_storage_write_raises_and_keeps_the_shard_dirty(root, tmp_path):
    blocked = tmp_path / "store" / "namespaces" / "ns" / "batches" / BATCH / UID / "manifest"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the shard directory should be")
    book = ManifestBook(home(root))
    book.note({0: running(0)}, 1, 1, container=False)
    with pytest.raises(storage.StorageError):
        book.write(header_for(make_spec(1), Recorded()), Recorded())
    assert book.dirty == {0}
    blocked.unlink()
    book.write(header_for(make_spec(1), Recorded()), Recorded())
    assert book.dirty == set() and read_shard(root, 0).inputs["0"].outcome == "RUNNING"


def test_ten_thousand_inputs_cost_one_shard_write_per_change(root):
    n = 10 * layout.SHARD_SIZE
    spec = make_spec(n)
    book = ManifestBook(home(root))
    book.note(
        {i: succeeded(i) for i in range(n - 1)} | {n - 1: running(n - 1)}, 1, n, container=False
    )
    recorded = Recorded(IndexSet.range(0, n - 1), IndexSet(), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    before = [generation(root, s) for s in range(10)]
    assert set(book.shards) == {9}  # only the shard still changing is held in memory
    book.note({n - 1: succeeded(n - 1)}, 1, n, container=False)
    recorded = Recorded(IndexSet.range(0, n), IndexSet(), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    after = [generation(root, s) for s in range(10)]
    assert after[:9] == before[:9] and after[9] != before[9]
    assert book.shards == {} and len(read_shard(root, 9).inputs) == layout.SHARD_SIZE


# --------------------------------------------------------------------------- Debouncer


def test_first_write_is_immediate_then_at_most_every_interval():
    d = Debouncer(interval=10)
    assert not d.due(0) and d.delay(0) is None
    d.mark(0)
    assert d.due(0) and d.delay(0) == 0  # first write: at once
    d.written(0)
    d.mark(1)
    assert not d.due(1) and d.delay(1) == 9
    d.mark(5)
    assert not d.due(9.9)
    assert d.due(10)
    d.written(10)
    assert not d.dirty and not d.due(100)


def test_urgent_writes_bypass_the_debounce():
    d = Debouncer(interval=10)
    d.mark(0)
    d.written(0)
    d.mark(1, urgent=True)  # terminal, or the first Pod is about to be created
    assert d.due(1)
    d.written(1)
    d.mark(2)
    assert not d.due(2)


def test_failed_writes_are_retried_with_backoff_and_never_dropped():
    d = Debouncer(interval=8, retry=1)
    d.mark(0, urgent=True)
    d.failed(0)
    assert d.dirty and not d.due(0.5) and d.due(1)
    d.failed(1)
    assert d.delay(1) == 2
    d.failed(3)
    assert d.delay(3) == 4
    d.failed(7)
    d.failed(15)
    assert d.delay(15) == 8  # capped at the interval
    d.mark(16)  # more changes while failing: still one pending write
    d.written(23)
    assert not d.dirty and d.failures == 0
    d.mark(24)
    assert d.delay(24) == 7


def test_a_succeeded_input_never_carries_a_failed_attempts_hash() -> None:
    """Seen in CI: the operator was killed while input 5's retry ran; the plan knew the
    input succeeded (from the status) but not the retry's report, and recorded the failed
    attempt's hash, so the client refused the real result. Now no hash is better than that:
    the succeeded Pod's termination message fills it before the shard is written."""
    from kinetic.model.resources import AttemptRecord
    from kinetic_operator.logic.job_logic import reported_result

    failed_hash, ok_hash = "a" * 64, "b" * 64
    first = AttemptRecord(
        attempt=1, pod="g-5-1", outcome="failure", message=f"boom sha256={failed_hash}"
    )
    retry = AttemptRecord(attempt=2, pod="g-5-2", outcome="pending")
    plan = UnitPlan("succeeded", 2, "Succeeded", "", records=(first, retry))
    assert reported_result(plan) is None
    done = AttemptRecord(
        attempt=2, pod="g-5-2", outcome="success", message=f"ok bytes=70 sha256={ok_hash}"
    )
    assert reported_result(UnitPlan("succeeded", 2, "", "", records=(first, done))) == (
        digest.Reported(ok_hash, 70)
    )
    # a failed input keeps its last failure's hash (the failure payload is its result)
    assert reported_result(UnitPlan("failed", 1, "", "", records=(first,))) == digest.Reported(
        failed_hash
    )


def test_checking_settled_inputs_of_a_written_shard_does_not_hold_it_again(root):
    """The next reconcile asks whether inputs that just ended are recorded: a shard
    already written and dropped answers from memory, without being read back and kept."""
    spec = make_spec(4)
    book = ManifestBook(home(root))
    book.note({0: succeeded(0), 1: failed(1)}, 1, 4, container=False)
    recorded = Recorded(IndexSet([0]), IndexSet([1]), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    assert book.shards == {}
    assert not book.note_missing({0: succeeded(0), 1: failed(1)}, 1, 4, container=False)
    assert book.shards == {} and book.dirty == set()
    # An input the written shard does not hold is still added (and the shard read back).
    assert book.note_missing({2: succeeded(2)}, 1, 4, container=False)
    recorded = Recorded(IndexSet([0, 2]), IndexSet([1]), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    assert {k: v.outcome for k, v in read_shard(root, 0).inputs.items()} == {
        "0": "SUCCEEDED",
        "1": "FAILED",
        "2": "SUCCEEDED",
    }
    assert book.shards == {}


# --------------------------------------------------------------------------- what is vouched for


def _first_write(root: str, n: int = 4) -> tuple[ManifestBook, KineticBatchSpec]:
    spec = make_spec(n)
    book = ManifestBook(home(root))
    book.note({0: succeeded(0, digest.with_sha256("ok", "1" * 64)), 1: running(1)}, 1, n,
              container=False)  # fmt: skip
    recorded = Recorded(IndexSet([0]), IndexSet(), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    return book, spec


def test_a_new_version_never_overwrites_the_one_the_status_vouches_for(root):
    book, spec = _first_write(root)
    anchor = vouch(book)
    vouched_header = storage.read_bytes(anchor.uri or "")
    vouched_shard = storage.read_bytes(home(root).manifest_shard_uri(0, 0))
    book.note({1: succeeded(1)}, 1, 4, container=False)
    recorded = Recorded(IndexSet([0, 1]), IndexSet(), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    # The new versions are in slot 1; what the status still vouches for is untouched.
    assert book.latest is not None and book.latest.slot == 1
    assert storage.read_bytes(anchor.uri or "") == vouched_header
    assert storage.read_bytes(home(root).manifest_shard_uri(0, 0)) == vouched_shard
    assert read_shard(root, 0).inputs["1"].outcome == "SUCCEEDED"
    # Until the status records the new header, the old one stays vouched for (and Pods of
    # inputs only the new one holds stay); once it does, the next version goes to slot 0.
    assert book.anchored is not None and book.anchored.slot == 0
    assert book.vouched(book.latest.uri, book.latest.sha256)
    assert book._free_slot(0) == 0


def test_a_restart_reads_back_only_what_the_status_vouches_for(root):
    book, _ = _first_write(root)
    anchor = vouch(book)
    # Someone rewrites shard 0 in storage, claiming another result for input 0.
    uri = home(root).manifest_shard_uri(0, 0)
    forged = read_shard(root, 0)
    forged.inputs["0"] = forged.inputs["0"].model_copy(update={"result_sha256": "f" * 64})
    storage.write_bytes(uri, forged.encode())
    again = ManifestBook(home(root))
    header = again.load(anchor, 4)
    assert header is not None and again.anchored is not None
    assert again._merged(0) == {}  # the forgery is not taken, nor its records
    assert len(again.tampered) == 1 and uri in again.tampered[0]
    assert digest.sha256(forged.encode()) in again.tampered[0]


def test_a_forged_header_is_not_used(root):
    book, _ = _first_write(root)
    anchor = vouch(book)
    header = newest_header(root)
    header.succeeded_indexes = "0-3"
    storage.write_bytes(anchor.uri or "", header.encode())
    again = ManifestBook(home(root))
    assert again.load(anchor, 4) is None and again.anchored is None
    assert "status.manifestSHA256" in again.tampered[0]


def test_without_a_vouching_status_nothing_stored_is_believed(root):
    book, _ = _first_write(root)  # written, but the status never recorded it
    again = ManifestBook(home(root))
    assert again.load(Anchor(), 4) is None
    assert again._merged(0) == {} and again.tampered == []


def test_a_manifest_from_before_digests_is_taken_once_and_then_vouched_for(root):
    book, spec = _first_write(root)
    legacy = ManifestBook(home(root))
    header = legacy.load(Anchor(home(root).manifest_uri, None), 4)
    assert header is not None and legacy.legacy
    shard = storage.read_bytes(home(root).manifest_shard_uri(0))
    assert legacy.refs[0].sha256 == digest.sha256(shard)
    assert legacy._merged(0).keys() == {0, 1}


def test_a_shard_a_pod_could_inflate_is_kept_under_its_budget() -> None:
    """Pods can make records grow: a hundred attempts with 4 KB termination messages each.
    Past its budget a shard keeps each record's last ten attempts, messages cut; the worst
    such record, a thousand times over, stays under the budget readers allow for."""
    attempt = {"attempt": 1, "pod": "p" * 63, "message": "m" * 4096, "outcome": "failure"}
    record = {
        "outcome": "SUCCEEDED",
        "attempts": [{**attempt, "attempt": k} for k in range(1, 101)],
        "message": "f" * 4096,
        "result": "r" * 4096,
        "resultSHA256": "a" * 64,
    }

    def shard(n: int) -> ManifestShard:
        inputs = {str(i): record for i in range(n)}
        return ManifestShard.model_validate({"groupId": "g", "shard": 0, "inputs": inputs})

    doc = shard(20)
    assert len(doc.encode()) > 8 << 20
    lean = decode_shard(shard_bytes(doc, budget=1 << 20))
    assert lean is not None
    kept = lean.inputs["7"]
    assert [a.attempt for a in kept.attempts] == list(range(91, 101))
    assert {len(a.message or "") for a in kept.attempts} == {512}
    assert (kept.message, kept.result, kept.result_sha256) == ("f" * 4096, "r" * 4096, "a" * 64)
    one = len(shard_bytes(shard(1), budget=0))
    assert 1000 * one < SHARD_BUDGET < MAX_SHARD_BYTES
    small = ManifestShard(group_id="g", shard=0)
    assert shard_bytes(small) == small.encode()


def test_an_ended_input_stored_as_running_is_recorded_again(root):
    """The manifest is written debounced: an operator that stopped after the status said an
    input ended, but before the manifest did, left it RUNNING there. The next one to see
    the input settled writes how it ended, its result's hash with it."""
    spec = make_spec(2)
    book = ManifestBook(home(root))
    book.note({0: running(0)}, 1, 2, container=False)
    book.write(header_for(spec, Recorded()), Recorded())
    again = ManifestBook(home(root))  # the next operator process
    again.load(Anchor(None, None), 2)
    from kinetic.model.resources import AttemptRecord

    ok = AttemptRecord(attempt=1, pod="g-i0-1", outcome="success", message=f"ok sha256={SHA}")
    assert again.note_missing({0: UnitPlan("succeeded", 1, "", "", records=(ok,))}, 1, 2,
                              container=False)  # fmt: skip
    recorded = Recorded(IndexSet([0]), IndexSet(), IndexSet())
    again.write(header_for(spec, recorded), recorded)
    stored = read_shard(root, 0).inputs["0"]
    assert (stored.outcome, stored.result_sha256) == ("SUCCEEDED", SHA)


def test_each_record_keeps_the_size_its_runner_reported_beside_the_hash(root):
    """What the client bounds its read of a result by: from a one-input Pod's termination
    message, and from a chunk's report (only for the inputs of the report's own unit)."""
    spec = make_spec(4)
    book = ManifestBook(home(root))
    book.note({0: succeeded(0, digest.with_sha256("ok", SHA, size=77))}, 1, 4, container=False)
    book.note({1: succeeded(1), 2: succeeded(2)}, 1, 4, container=False)
    book.take_report(
        2,
        "g-i2-1",
        {2: digest.Reported("d" * 64, 5), 3: digest.Reported("e" * 64, 6)},
        {2: 2, 3: 9},  # input 3 is another unit's: this report may not speak for it
    )
    recorded = Recorded(IndexSet([0, 1, 2]), IndexSet(), IndexSet())
    book.write(header_for(spec, recorded), recorded)
    inputs = read_shard(root, 0).inputs
    assert (inputs["0"].result_sha256, inputs["0"].result_bytes) == (SHA, 77)
    assert inputs["1"].result_bytes is None  # a runner that predates sizes: none recorded
    assert (inputs["2"].result_sha256, inputs["2"].result_bytes) == ("d" * 64, 5)
    assert "3" not in inputs
    assert '"resultBytes":77' in storage.read_bytes(shard_uri(root, 0)).decode()
