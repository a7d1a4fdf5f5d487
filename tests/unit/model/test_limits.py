"""The bounds every party checks: table tests of the pure functions in `kinetic.model.limits`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kinetic.model import limits as L
from kinetic.model.resources import BatchInputs, KineticBatchSpec
from pydantic import ValidationError

ROOT = "gs://bucket/kinetic"
SHA = "a" * 64


def nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value,depth",
    [
        (1, 0),
        ("x", 0),
        ([], 1),
        ({"a": 1}, 1),
        ([[1], {"a": [2]}], 3),
        (nested(32), 32),
        (nested(33), 33),
        (nested(100_000), 33),  # capped at limit + 1, without recursion
    ],
)
def test_json_depth(value: Any, depth: int) -> None:
    assert L.json_depth(value, 32) == depth


@pytest.mark.parametrize(
    "value",
    [0, -1.5, True, None, "", "héllo", [1, "a", None], {"k": [1, {"n": False}]}, {"": ""}],
)
def test_json_size_is_the_compact_encoding(value: Any) -> None:
    exact = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    assert L.json_size(value, 10_000) == exact


def test_json_size_stops_at_the_limit() -> None:
    assert L.json_size(["x" * 100] * 10_000, 1000) == 1001


@pytest.mark.parametrize(
    "lengths,cap,product",
    [
        ([], 10, 1),
        ([3, 4], 100, 12),
        ([3, 0, 10**9], 100, 0),  # a zero anywhere: no points
        ([2] * 63, 1_000_000, 1_000_001),  # 2^63 never computed
        ([10**6], 1_000_000, 1_000_000),
        ([10**6, 2], 1_000_000, 1_000_001),
    ],
)
def test_capped_product(lengths: list[int], cap: int, product: int) -> None:
    assert L.capped_product(lengths, cap) == product


@pytest.mark.parametrize(
    "uri,ok",
    [
        (f"{ROOT}/batches/x/hashes.json", True),
        (f"{ROOT}/ns/a/b", True),
        (ROOT, False),
        (f"{ROOT}/", False),
        (f"{ROOT}-other/x", False),  # a sibling sharing the prefix
        (f"{ROOT}/../secrets/x", False),
        (f"{ROOT}/a/./b", False),
        (f"{ROOT}/a//b", False),
        ("gs://bucket/other/x", False),
        ("file:///dev/zero", False),
    ],
)
def test_under_root(uri: str, ok: bool) -> None:
    assert L.under_root(uri, ROOT) is ok
    assert L.under_root(uri, ROOT + "/") is ok


def batch(**inputs: Any) -> dict[str, Any]:
    return {"template": {"container": {"command": ["true"]}}, "inputs": inputs}


@pytest.mark.parametrize(
    "spec,expected",
    [
        (batch(items=[1, 2, 3]), []),
        (batch(items=[nested(32)]), []),
        (batch(items=[1, nested(33)]), ["spec.inputs.items[1] is nested more than 32 levels deep"]),
        (batch(items=[nested(3000)]), ["spec.inputs.items[0] is nested more than 32 levels deep"]),
        (batch(grid={"a": [nested(40)]}), ["spec.inputs.grid.a is nested more than 32 levels"]),
        (
            batch(items=["x" * 600_000, "y" * 600_000]),
            ["spec.inputs.items[1]: inline inputs exceed"],
        ),
        (
            batch(grid={f"k{i}": [0, 1] for i in range(63)}),
            ["spec.inputs.grid makes more than 1,000,000 inputs (the product of its 63 lists'"],
        ),
        (batch(grid={"a": list(range(1000)), "b": list(range(1000))}), []),
        (
            batch(grid={"a": list(range(1000)), "b": list(range(1001))}),
            ["spec.inputs.grid makes more than 1,000,000 inputs"],
        ),
        (
            batch(count=1_000_001, uriPrefix=f"{ROOT}/in"),
            ["spec.inputs.count is 1,000,001 inputs; the limit is 1,000,000 inputs per batch"],
        ),
        (batch(count=5, uriPrefix=f"{ROOT}/in", sha256URI=f"{ROOT}/h.json", sha256=SHA), []),
        (
            batch(count=5, uriPrefix=f"{ROOT}/in", sha256URI=f"{ROOT}/h.json"),
            ["spec.inputs.sha256 is required with spec.inputs.sha256URI"],
        ),
        (
            batch(count=5, uriPrefix=f"{ROOT}/in", sha256URI="file:///dev/zero", sha256=SHA),
            ["spec.inputs.sha256URI must be under the storage root gs://bucket/kinetic/"],
        ),
        (
            batch(grid={"k" * 129: [1]}),
            ["spec.inputs.grid has a key of 129 characters; the limit is 128"],
        ),
        ({**batch(items=[1]), "tags": {"t" * 254: "v"}}, ["spec.tags has a key of 254 characters"]),
        (
            {"template": {"function": {"inputJSON": nested(33)}}, "inputs": {"items": [1]}},
            ["spec.template.function.inputJSON is nested more than 32 levels"],
        ),
        ("not a spec", []),  # the schema's business, not this module's
    ],
)
def test_check_batch_spec(spec: Any, expected: list[str]) -> None:
    found = L.check_batch_spec(spec, storage_root=ROOT, max_inputs=1_000_000)
    assert len(found) == len(expected), found
    for sentence, start in zip(found, expected, strict=True):
        assert sentence.startswith(start), sentence


def test_the_input_cap_is_the_setting() -> None:
    spec = batch(items=list(range(11)))
    assert L.check_batch_spec(spec, storage_root=ROOT, max_inputs=11) == []
    [problem] = L.check_batch_spec(spec, storage_root=ROOT, max_inputs=10)
    assert "spec.inputs.items is 11 inputs; the limit is 10 inputs per batch" in problem
    assert "split the work into several batches" in problem


def test_without_a_root_the_location_is_not_judged() -> None:
    spec = batch(count=1, uriPrefix="gs://b/in", sha256URI="file:///dev/zero", sha256=SHA)
    assert L.check_batch_spec(spec, storage_root=None) == []


@pytest.mark.parametrize(
    "spec,expected",
    [
        ({"function": {"inputJSON": {"a": [1, 2]}}}, 0),
        ({"function": {"inputJSON": nested(33)}}, 1),
        ({"function": {"inputJSON": "z" * (L.MAX_INLINE_BYTES + 1)}}, 1),
        ({"container": {"command": ["true"]}}, 0),
        (None, 0),
    ],
)
def test_check_job_spec(spec: Any, expected: int) -> None:
    assert len(L.check_job_spec(spec)) == expected


def test_hash_list_cap_fits_what_the_client_writes() -> None:
    hashes = [SHA] * 1000
    written = json.dumps(hashes).encode()  # what kinetic.api.batches uploads
    assert len(written) <= L.hash_list_max_bytes(1000) < len(written) + L.HASH_LIST_SLACK + 10


@pytest.mark.parametrize(
    "field,value",
    [
        ("maxConcurrent", L.MAX_CONCURRENT + 1),
        ("retries", L.MAX_RETRIES + 1),
        ("name", "n" * (L.MAX_NAME_LENGTH + 1)),
        ("tags", {f"k{i}": "v" for i in range(L.MAX_TAGS + 1)}),
        ("submissionFailures", [{"index": 0, "message": "x"}] * (L.MAX_SUBMISSION_FAILURES + 1)),
        ("chunkSize", L.MAX_CHUNK_SIZE + 1),
    ],
)
def test_the_models_carry_the_schema_bounds(field: str, value: Any) -> None:
    spec = batch(items=[1]) | {field: value}
    with pytest.raises(ValidationError) as err:
        KineticBatchSpec.model_validate(spec)
    assert field in str(err.value)


def test_inputs_bounds() -> None:
    with pytest.raises(ValidationError, match="count"):
        BatchInputs.model_validate({"count": L.MAX_INPUTS_CEILING + 1})
    with pytest.raises(ValidationError, match="grid"):
        BatchInputs.model_validate({"grid": {f"k{i}": [1] for i in range(L.MAX_GRID_KEYS + 1)}})


@pytest.mark.parametrize(
    ("inputs", "total"),
    [
        ({"items": [1, 2, 3]}, 3),
        ({"count": 7, "uriPrefix": "x"}, 7),
        ({"grid": {"a": [1, 2], "b": [1, 2, 3]}}, 6),
        # A rerun counts what it runs: its resolved indexes, or the ranges it names.
        ({"items": list(range(100)), "indexes": "3,5-9"}, 6),
        ({"fromBatch": {"name": "grp-a", "indexes": "0-9"}}, 10),
        ({"fromBatch": {"name": "grp-a", "indexes": "failed"}}, 0),  # known once resolved
        ({"fromBatch": {"name": "grp-a", "indexes": "0-99999999999"}}, 1_000_001),  # capped
        ({"fromBatch": {"name": "grp-a", "indexes": "9-1"}}, 0),  # malformed: its own check
    ],
)
def test_input_total_counts_what_a_batch_runs(inputs: dict, total: int) -> None:
    assert L.input_total(inputs, 1_000_000) == total
