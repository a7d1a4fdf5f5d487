"""The batch manifest (schema version 1) and the write debouncer."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kinetic.resources import KineticBatchSpec, Phase
from kinetic_operator.batch_logic import ChildObservation, decide_batch
from kinetic_operator.manifest import (
    MANIFEST_VERSION,
    Debouncer,
    build_manifest,
    encode_manifest,
    manifest_uri,
)

SHA = "a" * 64
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
CREATED = "2024-05-01T11:59:58Z"


def make_spec(n=6, **extra) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {
                "function": {"payloadURI": "gs://b/f.pkl", "sha256": SHA, "name": "train"}
            },
            "inputs": {"count": n, "uriPrefix": "gs://b/inputs"},
            "name": "sweep",
            "tags": {"team": "ml"},
            **extra,
        }
    )


def test_manifest_uri():
    assert manifest_uri("gs://b/root/", "grp-1a2b3c4d") == (
        "gs://b/root/batches/grp-1a2b3c4d/manifest.json"
    )


def test_first_manifest_lists_reserved_children_before_they_exist():
    spec = make_spec(6, maxConcurrent=2, submissionFailures=[{"index": 1, "message": "nope"}])
    d = decide_batch(spec, None, {}, T0)
    m = build_manifest("grp-1", spec, d.status, {}, created=CREATED, now=T0)
    assert m["version"] == MANIFEST_VERSION == 1
    assert m["groupId"] == "grp-1" and m["name"] == "sweep" and m["tags"] == {"team": "ml"}
    assert m["kind"] == "function" and m["functionName"] == "train"
    assert (
        m["total"] == 6 and m["createdAt"] == CREATED and m["updatedAt"] == "2024-05-01T12:00:00Z"
    )
    assert m["maxConcurrent"] == 2 and m["retries"] == 0 and m["failFast"] is False
    assert m["children"] == {
        "0": {"job": "grp-1-0", "attempts": None, "outcome": "PENDING"},
        "2": {"job": "grp-1-2", "attempts": None, "outcome": "PENDING"},
    }
    assert m["submissionFailures"] == [{"index": 1, "message": "nope"}]
    assert m["failedIndexes"] == "1" and m["launched"] == 3
    json.loads(encode_manifest(m))  # serialisable


def test_manifest_keeps_attempts_of_children_that_are_gone():
    spec = make_spec(3, maxConcurrent=None, retries=2)
    s = decide_batch(spec, None, {}, T0).status
    s = s.model_copy(update={"manifest_uri": "gs://b/m.json"})
    children = {
        0: ChildObservation(Phase.SUCCEEDED, attempts=3),
        1: ChildObservation(Phase.RUNNING, attempts=2),
        2: ChildObservation(Phase.FAILED, attempts=3),
    }
    s = decide_batch(spec, s, children, T0).status
    first = build_manifest("g", spec, s, children, created=CREATED, now=T0)
    assert first["children"]["0"] == {"job": "g-0", "attempts": 3, "outcome": "SUCCEEDED"}
    assert first["children"]["1"] == {"job": "g-1", "attempts": 2, "outcome": "RUNNING"}
    assert first["children"]["2"]["outcome"] == "FAILED"
    # 0 and 2 are cleaned up; the previous manifest (read back as JSON) remembers them.
    previous = json.loads(encode_manifest(first))
    later = build_manifest(
        "g",
        spec,
        s,
        {1: ChildObservation(Phase.RUNNING, attempts=3)},
        created=CREATED,
        now=T0,
        previous=previous,
    )
    assert later["children"]["0"] == {"job": "g-0", "attempts": 3, "outcome": "SUCCEEDED"}
    assert later["children"]["2"]["attempts"] == 3
    assert later["children"]["1"]["attempts"] == 3
    # A manifest of another version is not trusted.
    other = build_manifest(
        "g", spec, s, {}, created=CREATED, now=T0, previous={**previous, "version": 99}
    )
    assert other["children"]["0"]["attempts"] is None


def test_unlaunched_inputs_have_no_entry():
    spec = make_spec(6, maxConcurrent=2, failFast=True, cancelRunningOnFail=True)
    s = decide_batch(spec, None, {}, T0).status.model_copy(update={"manifest_uri": "x"})
    children = {
        0: ChildObservation(Phase.FAILED, attempts=1),
        1: ChildObservation(Phase.RUNNING, attempts=1),
    }
    s = decide_batch(spec, s, children, T0).status
    m = build_manifest("g", spec, s, children, created=None, now=T0)
    assert set(m["children"]) == {"0", "1"}
    assert m["cancelledIndexes"] == "2-5" and m["phase"] == "RUNNING"


def test_container_manifest():
    spec = KineticBatchSpec.model_validate(
        {"template": {"container": {"command": ["echo"]}}, "inputs": {"grid": {"a": [1, 2]}}}
    )
    m = build_manifest("g", spec, decide_batch(spec, None, {}, T0).status, {}, created=None, now=T0)
    assert m["kind"] == "container" and m["functionName"] is None and m["total"] == 2
    assert m["name"] is None and m["tags"] == {}


def test_manifest_of_100k_succeeded_inputs_is_compact():
    n = 100_000
    spec = make_spec(n, maxConcurrent=None)
    s = decide_batch(spec, None, {}, T0).status.model_copy(update={"manifest_uri": "x"})
    done = {i: ChildObservation(Phase.SUCCEEDED, attempts=1) for i in range(n)}
    s = decide_batch(spec, s, done, T0).status
    m = build_manifest("grp-1a2b3c4d", spec, s, done, created=CREATED, now=T0)
    data = encode_manifest(m)
    assert len(m["children"]) == n
    assert len(data) < 80 * n  # ~70 bytes per launched input


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
    d.mark(1, urgent=True)  # terminal, or the first child is about to be created
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
