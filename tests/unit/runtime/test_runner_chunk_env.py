"""The runner's env contract for chunks (KINETIC_CHUNK) and its termination message.

Pure: nothing here touches storage or starts a process, except the import
check at the end, which is what every function Pod pays before user code runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from kinetic.model.ranges import IndexSet
from kinetic.runtime.runner import (
    ConfigError,
    InputSpec,
    RunnerConfig,
    chunk_termination_message,
    parse_chunk,
)

SHA = "a" * 64
ROOT = "gs://bucket/kinetic"


def entry(i: int, **extra: Any) -> dict[str, Any]:
    """A valid chunk entry for input ``i`` with a pickled input; ``extra`` overrides."""
    e: dict[str, Any] = {
        "index": i,
        "resultURI": f"{ROOT}/jobs/grp-0a1b2c3d-{i}/result.pkl",
        "inputURI": f"{ROOT}/batches/grp-0a1b2c3d/inputs/{i}.pkl",
        "inputSHA256": SHA,
    }
    e.update(extra)
    return {k: v for k, v in e.items() if v is not _DROP}


_DROP = object()


def chunk_env(entries: Any, **extra: str) -> dict[str, str]:
    env = {
        "KINETIC_PAYLOAD_URI": f"{ROOT}/batches/grp-0a1b2c3d/function.pkl",
        "KINETIC_PAYLOAD_SHA256": SHA,
        "KINETIC_CHUNK": entries if isinstance(entries, str) else json.dumps(entries),
    }
    env.update(extra)
    return env


def config_error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        RunnerConfig.from_env(env)
    return str(info.value)


# --------------------------------------------------------------------------- valid chunks


def test_chunk_becomes_one_spec_per_input_in_order() -> None:
    entries = [
        entry(4, outputDir=f"{ROOT}/outputs/grp-0a1b2c3d/4"),
        entry(5),
        {"index": 6, "resultURI": f"{ROOT}/jobs/grp-0a1b2c3d-6/result.pkl", "inputJSON": [1, 2]},
    ]
    cfg = RunnerConfig.from_env(chunk_env(entries, KINETIC_INPUT_MODE="args"))
    assert cfg.chunked and cfg.input_mode == "args"
    assert [s.index for s in cfg.inputs] == [4, 5, 6]
    first, second, third = cfg.inputs
    assert first == InputSpec(
        result_uri=entries[0]["resultURI"],
        index=4,
        output_dir=f"{ROOT}/outputs/grp-0a1b2c3d/4",
        input_uri=entries[0]["inputURI"],
        input_sha256=SHA,
    )
    assert second.output_dir is None and second.has_input
    assert third.input_uri is None and json.loads(third.input_json or "") == [1, 2]
    assert third.log_prefix == "input 6: "


@pytest.mark.parametrize("value", [None, 0, "", {}, [], {"a": [1, None]}])
def test_any_json_value_is_an_inline_input_even_null(value: Any) -> None:
    (spec,) = parse_chunk(
        json.dumps([{"index": 0, "resultURI": f"{ROOT}/r.pkl", "inputJSON": value}])
    )
    assert spec.has_input and json.loads(spec.input_json or "") == value


def test_indexes_may_skip_but_must_increase() -> None:
    specs = parse_chunk(json.dumps([entry(0), entry(2), entry(7)]))
    assert [s.index for s in specs] == [0, 2, 7]


def test_pod_level_output_dir_is_the_default_for_entries_without_one() -> None:
    env = chunk_env([entry(0, outputDir="file:///o/0"), entry(1)], KINETIC_OUTPUT_DIR="file:///o")
    cfg = RunnerConfig.from_env(env)
    assert [s.output_dir for s in cfg.inputs] == ["file:///o/0", "file:///o"]


def test_kinetic_index_is_accepted_and_ignored() -> None:
    single = {
        "KINETIC_PAYLOAD_URI": f"{ROOT}/f.pkl",
        "KINETIC_PAYLOAD_SHA256": SHA,
        "KINETIC_RESULT_URI": f"{ROOT}/r.pkl",
        "KINETIC_INPUT_JSON": "3",
        "KINETIC_INDEX": "12",
    }
    cfg = RunnerConfig.from_env(single)
    assert not cfg.chunked and len(cfg.inputs) == 1
    assert cfg.inputs[0].index is None and cfg.inputs[0].log_prefix == ""
    assert RunnerConfig.from_env(chunk_env([entry(0)], KINETIC_INDEX="0")).chunked
    cfg = RunnerConfig.from_env({**single, "KINETIC_INDEX": "not a number"})
    assert cfg.inputs[0].result_uri == f"{ROOT}/r.pkl"


# --------------------------------------------------------------------------- malformed chunks


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        ("[{", "KINETIC_CHUNK is not valid JSON: "),
        ("{}", "KINETIC_CHUNK must be a JSON list of inputs, got an object"),
        ('"x"', "KINETIC_CHUNK must be a JSON list of inputs, got a string"),
        ("[]", "KINETIC_CHUNK is an empty list: a chunk needs at least one input"),
        ("[3]", "KINETIC_CHUNK[0] must be an object, got a number"),
        (
            [{**entry(0), "index": "0"}],
            "KINETIC_CHUNK[0].index must be a non-negative integer, got '0'",
        ),
        ([entry(-1)], "KINETIC_CHUNK[0].index must be a non-negative integer, got -1"),
        ([entry(True)], "KINETIC_CHUNK[0].index must be a non-negative integer, got True"),
        (
            [entry(0, index=_DROP)],
            "KINETIC_CHUNK[0].index must be a non-negative integer, got None",
        ),
        (
            [entry(3), entry(3)],
            "KINETIC_CHUNK[1] (index 3): indexes must increase (the entry before has index 3)",
        ),
        (
            [entry(5), entry(4)],
            "KINETIC_CHUNK[1] (index 4): indexes must increase (the entry before has index 5)",
        ),
        (
            [entry(2, resultURI=_DROP)],
            "KINETIC_CHUNK[0] (index 2).resultURI is missing: every input needs its own result URI",
        ),
        (
            [entry(2, resultURI="")],
            "KINETIC_CHUNK[0] (index 2).resultURI must be a non-empty string, got ''",
        ),
        (
            [entry(2, resultURI="s3://b/r.pkl")],
            "KINETIC_CHUNK[0] (index 2).resultURI: unsupported storage URI 's3://b/r.pkl'",
        ),
        (
            [entry(2, inputURI="gs://b/../x")],
            "KINETIC_CHUNK[0] (index 2).inputURI: invalid storage URI",
        ),
        (
            [entry(2, inputSHA256=_DROP)],
            "KINETIC_CHUNK[0] (index 2).inputSHA256 is missing (required with inputURI)",
        ),
        (
            [entry(2, inputJSON=1)],
            "KINETIC_CHUNK[0] (index 2): set exactly one of inputURI and inputJSON",
        ),
        (
            [entry(2, inputURI=_DROP, inputSHA256=_DROP)],
            "KINETIC_CHUNK[0] (index 2): set exactly one of inputURI and inputJSON",
        ),
        (
            [entry(2, outputdir="gs://b/o")],
            "KINETIC_CHUNK[0] (index 2) has unknown key(s) 'outputdir' (allowed: index, resultURI,",
        ),
        (
            [entry(2, outputDir=7)],
            "KINETIC_CHUNK[0] (index 2).outputDir must be a non-empty string, got 7",
        ),
    ],
)
def test_malformed_chunk_names_the_variable_and_the_entry(chunk: Any, expected: str) -> None:
    message = config_error(chunk_env(chunk))
    assert expected in message, message


def test_every_bad_entry_is_reported_at_once_up_to_a_cap() -> None:
    message = config_error(chunk_env([entry(i, resultURI=_DROP) for i in range(15)]))
    assert "KINETIC_CHUNK[0] (index 0).resultURI is missing" in message
    assert "KINETIC_CHUNK[9] (index 9).resultURI is missing" in message
    assert "KINETIC_CHUNK[10]" not in message
    assert message.endswith("and 5 more problem(s)")


def test_chunk_problems_come_with_the_other_env_problems() -> None:
    env = chunk_env([entry(0, inputJSON=1)], KINETIC_INPUT_MODE="positional")
    del env["KINETIC_PAYLOAD_SHA256"]
    message = config_error(env)
    assert "KINETIC_PAYLOAD_SHA256 is not set" in message
    assert "KINETIC_INPUT_MODE must be one of auto, single, args, kwargs" in message
    assert "KINETIC_CHUNK[0] (index 0): set exactly one of inputURI and inputJSON" in message


@pytest.mark.parametrize(
    "name",
    ["KINETIC_RESULT_URI", "KINETIC_INPUT_URI", "KINETIC_INPUT_SHA256", "KINETIC_INPUT_JSON"],
)
def test_chunk_refuses_the_single_input_variables(name: str) -> None:
    message = config_error(chunk_env([entry(0)], **{name: "x"}))
    assert f"KINETIC_CHUNK names each input's result and input; do not also set {name}" in message


def test_an_empty_chunk_variable_is_still_a_chunk() -> None:
    """Set but empty must not silently fall back to the single-input contract."""
    message = config_error(chunk_env("", KINETIC_RESULT_URI=f"{ROOT}/r.pkl"))
    assert "KINETIC_CHUNK is not valid JSON" in message


# --------------------------------------------------------------------------- termination message


def test_termination_message_is_compact_json_of_ranges() -> None:
    message = chunk_termination_message([0, 1, 2, 3, 5], [4])
    assert message == '{"succeeded":"0-3,5","failed":"4"}'
    assert "\n" not in message
    parsed = json.loads(message)
    assert list(IndexSet.parse(parsed["succeeded"])) == [0, 1, 2, 3, 5]
    assert list(IndexSet.parse(parsed["failed"])) == [4]


def test_termination_message_with_nothing_failed() -> None:
    assert json.loads(chunk_termination_message(list(range(256)), [])) == {
        "succeeded": "0-255",
        "failed": "",
    }


def test_worst_case_termination_message_fits_the_kubelet_limit() -> None:
    """256 inputs alternating at the largest index the pod names allow stay under 4096 bytes."""
    base = 999_999_000
    succeeded = [base + i for i in range(0, 512, 2)][:128]
    failed = [base + i for i in range(1, 512, 2)][:128]
    assert len(chunk_termination_message(succeeded, failed).encode()) <= 4096


# --------------------------------------------------------------------------- lean start


def test_the_runner_imports_nothing_heavy() -> None:
    """Every function Pod pays for these imports before the user's code runs.

    Compared with what the interpreter loaded before (site hooks such as an
    editable install's finder are not the runner's doing).
    """
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import kinetic.runtime.runner\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "kinetic.runtime.runner" in out
    top = {m.split(".")[0] for m in out}
    heavy = {
        "google",
        "requests",
        "urllib3",
        "kubernetes",
        "pydantic",
        "yaml",
        "rich",
        "typer",
        "http",
        "email",
        "ssl",
        "socket",
        "pathlib",
        "tempfile",
    }
    assert not top & heavy, sorted(top & heavy)


def test_a_rerun_input_in_a_chunk_carries_its_original_index() -> None:
    (spec,) = parse_chunk(json.dumps([entry(0, originalIndex=17)]))
    assert (spec.index, spec.original_index) == (0, 17)
    (plain,) = parse_chunk(json.dumps([entry(3)]))
    assert plain.original_index is None
    assert "originalIndex must be a non-negative integer" in config_error(
        chunk_env([entry(0, originalIndex=-1)])
    )


def test_while_an_input_of_a_unit_runs_the_environment_names_it(monkeypatch) -> None:
    """`JobHandle.from_job_context()` and KINETIC_INDEX answer for the input running now."""
    from kinetic.runtime import runner

    monkeypatch.setenv("KINETIC_JOB_NAME", "sweep-4")
    monkeypatch.delenv("KINETIC_INDEX", raising=False)
    runner._name_input(6, None)
    assert (os.environ["KINETIC_JOB_NAME"], os.environ["KINETIC_INDEX"]) == ("sweep-6", "6")
    runner._name_input(7, 40)  # a rerun's input: its index in the batch it reruns
    assert (os.environ["KINETIC_JOB_NAME"], os.environ["KINETIC_INDEX"]) == ("sweep-7", "40")


def test_a_unit_that_fails_fast_is_told_so() -> None:
    assert RunnerConfig.from_env(chunk_env([entry(0)], KINETIC_FAIL_FAST="1")).fail_fast
    assert not RunnerConfig.from_env(chunk_env([entry(0)])).fail_fast
