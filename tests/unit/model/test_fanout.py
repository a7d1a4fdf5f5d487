"""Batch inputs: counts, grid decoding, child specs and spec validation."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest
from kinetic.model import layout
from kinetic.model.fanout import (
    child_spec,
    env_value,
    grid_point,
    input_at,
    input_count,
    iter_inputs,
    param_env_name,
    parse_sha256_list,
    validate_batch_spec,
)
from kinetic.model.resources import (
    BatchInputs,
    KineticBatchSpec,
    KineticJobSpec,
)

SHA = "a" * 64
ROOT = "gs://bucket/kinetic"


def home(batch: str) -> layout.Home:
    """The batch's own storage prefix: namespace ns, UID u-1."""
    return layout.batch_home(ROOT, "ns", batch, "u-1")


def function_template(**extra) -> dict:
    return {
        "function": {
            "payloadURI": f"{ROOT}/batches/grp-1/function.pkl",
            "sha256": SHA,
            "name": "train",
        },
        **extra,
    }


def container_template(**extra) -> dict:
    return {
        "container": {"command": ["python", "-c", "print(1)"], "args": ["$(KINETIC_PARAM_LR)"]},
        **extra,
    }


def batch(inputs: dict, template: dict | None = None, **extra) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {"template": template or function_template(), "inputs": inputs, **extra}
    )


# --------------------------------------------------------------------------- counts


def test_input_count_for_each_kind():
    assert input_count(BatchInputs(count=7, uri_prefix="gs://b/in")) == 7
    assert input_count(BatchInputs(count=0, uri_prefix="gs://b/in")) == 0
    assert input_count(BatchInputs(items=[1, "a", None])) == 3
    assert input_count(BatchInputs(items=[])) == 0
    assert input_count(BatchInputs(grid={"a": [1, 2, 3], "b": [1, 2]})) == 6
    assert input_count(BatchInputs(grid={"a": [1, 2, 3], "b": []})) == 0
    assert input_count(BatchInputs(grid={})) == 1  # like itertools.product()
    with pytest.raises(ValueError, match="one of count, items or grid"):
        input_count(BatchInputs())


# --------------------------------------------------------------------------- grid


GRIDS = [
    {"lr": [0.1, 0.01], "bs": [8, 16, 32]},
    {"a": [1], "b": [2], "c": [3]},
    {"x": list(range(5)), "y": ["p", "q"], "z": [True, False, None]},
    {"only": ["one", "two", "three"]},
]


@pytest.mark.parametrize("grid", GRIDS)
def test_grid_matches_itertools_product(grid):
    keys = sorted(grid)  # the API server does not keep JSON key order, so neither do we
    expected = [
        dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))
    ]
    got = [grid_point(grid, i) for i in range(len(expected))]
    assert got == expected
    assert all(list(p) == keys for p in got)
    reordered = dict(reversed(list(grid.items())))
    assert [grid_point(reordered, i) for i in range(len(expected))] == expected
    assert list(iter_inputs(BatchInputs(grid=grid))) == expected


def test_grid_point_without_materialising_a_huge_product():
    grid = {f"k{i:02}": list(range(10)) for i in range(12)}  # 10^12 points
    assert grid_point(grid, 0) == {f"k{i:02}": 0 for i in range(12)}
    assert grid_point(grid, 10**12 - 1) == {f"k{i:02}": 9 for i in range(12)}
    assert grid_point(grid, 123456789012) == {
        f"k{i:02}": int(d) for i, d in enumerate("123456789012")
    }


def test_grid_point_out_of_range():
    with pytest.raises(IndexError, match="6 points"):
        grid_point({"a": [1, 2, 3], "b": [1, 2]}, 6)
    with pytest.raises(IndexError):
        grid_point({"a": [1, 2]}, -1)


def test_input_at_items_and_errors():
    inputs = BatchInputs(items=[{"lr": 1}, [1, 2], "x"])
    assert [input_at(inputs, i) for i in range(3)] == [{"lr": 1}, [1, 2], "x"]
    with pytest.raises(IndexError, match="3 inputs"):
        input_at(inputs, 3)
    with pytest.raises(ValueError, match="pickled in storage"):
        input_at(BatchInputs(count=2, uri_prefix="gs://b/in"), 0)


# --------------------------------------------------------------------------- per-input specs


def test_function_child_for_pickled_inputs():
    spec = batch(
        {"count": 3, "uriPrefix": f"{ROOT}/batches/grp-1/inputs/"},
        function_template(accelerator="gpu-l4", spot=True),
        inputMode="args",
        retries=2,
    )
    child = child_spec(home("grp-1"), spec, 2, input_sha256="b" * 64)
    assert isinstance(child, KineticJobSpec)
    fn = child.function
    assert fn.input_uri == f"{ROOT}/batches/grp-1/inputs/2.pkl"
    assert fn.input_sha256 == "b" * 64
    assert fn.input_json is None
    assert fn.input_mode == "args"
    assert fn.result_uri == f"{ROOT}/namespaces/ns/batches/grp-1/u-1/results/2.pkl"
    assert fn.payload_uri == spec.template.function.payload_uri and fn.sha256 == SHA
    assert fn.name == "train"
    assert child.retries == 2 and child.cancel is False
    assert child.accelerator == "gpu-l4" and child.spot is True
    # The template itself is untouched, and the child round-trips through the schema.
    assert spec.template.function.input_uri is None and spec.template.retries == 0
    assert KineticJobSpec.model_validate(child.wire()) == child
    assert "inputSHA256" not in child_spec(home("grp-1"), spec, 0).wire()["function"]


def test_function_child_for_items_and_grid():
    spec = batch({"items": [{"lr": 0.1}, [1, 2], 3]})
    assert child_spec(home("g"), spec, 0).function.input_json == {"lr": 0.1}
    assert child_spec(home("g"), spec, 1).function.input_json == [1, 2]
    assert child_spec(home("g"), spec, 2).function.input_json == 3
    assert child_spec(home("g"), spec, 2).function.input_uri is None
    grid = batch({"grid": {"lr": [0.1, 0.01], "bs": [8, 16]}}, inputMode="kwargs")
    c = child_spec(home("g"), grid, 1)
    assert c.function.input_json == {"bs": 8, "lr": 0.01}  # keys sorted: lr varies fastest
    assert c.function.input_mode == "kwargs"
    with pytest.raises(IndexError):
        child_spec(home("g"), grid, 4)


def test_container_child_env():
    spec = batch(
        {"grid": {"lr": [0.1, 0.01], "batch-size": [8, 16], "opt": ["adam"], "cfg": [{"a": 1}]}},
        container_template(
            env=[{"name": "KINETIC_INDEX", "value": "stale"}, {"name": "KEEP", "value": "me"}]
        ),
    )
    c = child_spec(home("g"), spec, 3)
    env = {e.name: e.value for e in c.env}
    assert env["KEEP"] == "me"
    assert env["KINETIC_INDEX"] == "3"
    assert json.loads(env["KINETIC_INPUT"]) == {
        "lr": 0.01,
        "batch-size": 16,
        "opt": "adam",
        "cfg": {"a": 1},
    }
    assert env["KINETIC_PARAM_LR"] == "0.01"
    assert env["KINETIC_PARAM_BATCH_SIZE"] == "16"
    assert env["KINETIC_PARAM_OPT"] == "adam"  # strings raw, not JSON-quoted
    assert env["KINETIC_PARAM_CFG"] == '{"a":1}'
    assert [e.name for e in c.env].count("KINETIC_INDEX") == 1
    # The command is passed through untouched: Kubernetes expands $(VAR) itself.
    assert c.container.args == ["$(KINETIC_PARAM_LR)"]
    assert c.function is None
    assert KineticJobSpec.model_validate(c.wire()) == c


def test_container_child_env_for_plain_items():
    spec = batch({"items": ["a b; rm -rf /", 3, None, [1, "x"]]}, container_template())
    envs = [{e.name: e.value for e in child_spec(home("g"), spec, i).env} for i in range(4)]
    assert envs[0]["KINETIC_INPUT"] == "a b; rm -rf /"  # a value, never a command
    assert envs[1]["KINETIC_INPUT"] == "3"
    assert envs[2]["KINETIC_INPUT"] == "null"
    assert envs[3]["KINETIC_INPUT"] == '[1,"x"]'
    assert not any(k.startswith("KINETIC_PARAM_") for e in envs for k in e)


def test_output_dir_is_per_input():
    spec = batch({"items": [1, 2]}, function_template(outputDir="gs://b/out/"))
    assert child_spec(home("g"), spec, 1).output_dir == "gs://b/out/1"
    # Without one in the template, each input still gets its own under the storage root.
    outputs = f"{ROOT}/namespaces/ns/outputs/g/u-1"  # the batch's UID: never another's
    assert child_spec(home("g"), batch({"items": [1]}), 0).output_dir == f"{outputs}/0"
    containers = batch({"items": [1, 2]}, container_template())
    assert child_spec(home("g"), containers, 1).output_dir == f"{outputs}/1"


def test_container_template_with_pickled_inputs_is_refused():
    spec = batch({"count": 2, "uriPrefix": "gs://b/in"}, container_template())
    with pytest.raises(ValueError, match="needs spec.template.function"):
        child_spec(home("g"), spec, 0)


def test_env_helpers():
    assert param_env_name("learning-rate") == "KINETIC_PARAM_LEARNING_RATE"
    assert param_env_name("a.b c") == "KINETIC_PARAM_A_B_C"
    assert env_value("x") == "x"
    assert env_value(1.5) == "1.5"
    assert env_value(True) == "true"
    assert env_value("é") == "é" and env_value(["é"]) == '["é"]'


# --------------------------------------------------------------------------- hashes


def test_parse_sha256_list():
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3)]
    data = json.dumps(hashes).encode()
    digest = hashlib.sha256(data).hexdigest()
    assert parse_sha256_list(data, expected_sha256=digest, count=3) == hashes
    assert parse_sha256_list(data, expected_sha256=None, count=3) == hashes
    with pytest.raises(ValueError, match="spec.inputs.sha256 says"):
        parse_sha256_list(data, expected_sha256="0" * 64, count=3)
    with pytest.raises(ValueError, match="list of 4 hashes, got 3 entries"):
        parse_sha256_list(data, expected_sha256=None, count=4)
    with pytest.raises(ValueError, match="not JSON"):
        parse_sha256_list(b"nope", expected_sha256=None, count=1)
    with pytest.raises(ValueError, match="entry 1 is not a hex SHA-256"):
        parse_sha256_list(json.dumps([hashes[0], "XYZ"]).encode(), expected_sha256=None, count=2)
    with pytest.raises(ValueError, match="got dict"):
        parse_sha256_list(b"{}", expected_sha256=None, count=1)


def test_parse_sha256_list_allows_null_for_inputs_that_failed_at_submission():
    """The client writes null where it could not pickle an input; that input never launches."""
    data = json.dumps([SHA, None]).encode()
    assert parse_sha256_list(data, expected_sha256=None, count=2) == [SHA, None]


# --------------------------------------------------------------------------- validation


def test_valid_specs_have_no_problems():
    assert validate_batch_spec(batch({"count": 3, "uriPrefix": "gs://b/in"})) == []
    assert validate_batch_spec(batch({"count": 3, "uriPrefix": "gs://b/in"}, chunkSize=2)) == []
    assert validate_batch_spec(batch({"items": [1]}, container_template(), cancelIndexes="0")) == []
    assert validate_batch_spec(batch({"items": [1, {"a": 1}]}, container_template())) == []
    assert validate_batch_spec(batch({"grid": {"a": [1]}}, container_template())) == []
    assert (
        validate_batch_spec(
            batch({"items": [1, 2]}, submissionFailures=[{"index": 1, "message": "x"}])
        )
        == []
    )


@pytest.mark.parametrize(
    ("inputs", "template", "extra", "problem"),
    [
        ({"count": 2}, None, {}, "spec.inputs.uriPrefix is required"),
        ({"count": 2, "uriPrefix": "gs://b/i"}, "container", {}, "needs spec.template.function"),
        ({"items": [1], "count": 1}, None, {}, "exactly one of count, items or grid (got count"),
        ({"items": [1], "uriPrefix": "gs://b/i"}, None, {}, "spec.inputs.uriPrefix only apply"),
        ({"grid": {}}, None, {}, "at least one key"),
        ({"grid": {"a": [1], "b": []}}, None, {}, "spec.inputs.grid.b is empty"),
        ({"grid": {"a-b": [1], "a_b": [2]}}, None, {}, "both be exported as KINETIC_PARAM_A_B"),
        ({"items": [{"x": 1, "X": 2}]}, "container", {}, "spec.inputs.items[0] keys"),
        ({"count": 1, "uriPrefix": "gs://b/i", "sha256": SHA}, None, {}, "sha256URI, which"),
        (
            {"items": [1]},
            None,
            {"submissionFailures": [{"index": 1, "message": "m"}]},
            "index 1, but the batch has only 1 input",
        ),
        (
            {"items": [1, 2]},
            None,
            {"submissionFailures": [{"index": 1, "message": "m"}, {"index": 1, "message": "n"}]},
            "lists index 1 twice",
        ),
        ({"items": [1]}, "retries", {"retries": 1}, "set spec.retries"),
        ({"items": [1]}, "cancel", {}, "spec.template.cancel must be false"),
        (
            {"items": [1, 2]},
            "container",
            {"chunkSize": 2},
            "spec.chunkSize is 2, but only function",
        ),
    ],
)
def test_validation_problems_name_the_field(inputs, template, extra, problem):
    tmpl = {
        None: function_template(),
        "container": container_template(),
        "retries": function_template(retries=3),
        "cancel": function_template(cancel=True),
    }[template]
    problems = validate_batch_spec(batch(inputs, tmpl, **extra))
    assert any(problem in p for p in problems), problems


def test_validation_of_template_kind():
    spec = batch({"items": [1]})
    both = spec.model_copy(deep=True)
    both.template.container = KineticJobSpec.model_validate(container_template()).container
    assert "exactly one of function or container" in validate_batch_spec(both)[0]
