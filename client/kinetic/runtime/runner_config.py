"""What the operator told a runner's Pod to do: its environment, read and checked
(`RunnerConfig.from_env`), one input or a chunk's (`parse_chunk`).

`kinetic.runtime.runner` runs it and re-exports these names. Kept to the
modules the runner loads anyway, so reading the configuration adds nothing
to a Pod's start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kinetic import storage
from kinetic.model.names import ENV_FAIL_FAST, ENV_STOP_URI
from kinetic.model.payload import INPUT_MODES
from kinetic.runtime import debugger
from kinetic.runtime.termination import termination_log_path

_MAX_CHUNK_PROBLEMS = 10  # more would only bury the first ones in the termination message


class ConfigError(Exception):
    """The runner's environment variables are missing or contradictory."""


@dataclass(frozen=True)
class InputSpec:
    """One unit of work: where its input comes from and where its result goes.

    ``index`` is set for the inputs of a chunk (it prefixes their log lines)
    and ``input_json`` holds an inline input as JSON text. Without
    ``input_uri`` and ``input_json`` the payload is a whole call (a KineticJob).
    """

    result_uri: str
    index: int | None = None
    output_dir: str | None = None
    input_uri: str | None = None
    input_sha256: str | None = None
    input_json: str | None = None
    result_sha256: str | None = None  # a recorded result the operator vouches for
    original_index: int | None = None  # a rerun's input: its index in the batch it reruns

    @property
    def has_input(self) -> bool:
        """Whether this is a batch input (the payload is a function, not a call)."""
        return self.input_uri is not None or self.input_json is not None

    @property
    def log_prefix(self) -> str:
        return "" if self.index is None else f"input {self.index}: "


@dataclass(frozen=True)
class RunnerConfig:
    """What the operator told this pod to do, read from its environment.

    ``inputs`` holds one spec, or a chunk's specs in index order (``chunked``).
    """

    payload_uri: str
    payload_sha256: str
    inputs: tuple[InputSpec, ...]
    chunked: bool = False
    input_mode: str = "auto"
    termination_log: str | None = None
    report_uri: str | None = None
    stop_uri: str | None = None  # a unit: stop before the next input once this exists
    fail_fast: bool = False  # a unit: a failed input is final and stops the batch: stop too
    debug_port: int | None = None  # a debug job: wait for a debugger on this port first

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunnerConfig:
        """Read and check the env contract; ConfigError lists every problem at once."""

        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        problems: list[str] = []
        payload_uri, payload_sha = get("KINETIC_PAYLOAD_URI"), get("KINETIC_PAYLOAD_SHA256")
        problems += [
            f"{name} is not set"
            for name, value in (
                ("KINETIC_PAYLOAD_URI", payload_uri),
                ("KINETIC_PAYLOAD_SHA256", payload_sha),
            )
            if value is None
        ]
        problems += _uri_problem("KINETIC_PAYLOAD_URI", payload_uri)
        problems += _uri_problem("KINETIC_REPORT_URI", get("KINETIC_REPORT_URI"))
        mode = get("KINETIC_INPUT_MODE") or "auto"
        if mode not in INPUT_MODES:
            problems.append(
                f"KINETIC_INPUT_MODE must be one of {', '.join(INPUT_MODES)}; got {mode!r}"
            )
        chunk_text = environ.get("KINETIC_CHUNK")
        inputs: tuple[InputSpec, ...] = ()
        if chunk_text is not None:
            clashing = [
                name
                for name in (
                    "KINETIC_RESULT_URI",
                    "KINETIC_INPUT_URI",
                    "KINETIC_INPUT_SHA256",
                    "KINETIC_INPUT_JSON",
                )
                if environ.get(name, "").strip()  # empty counts as unset, as everywhere
            ]
            if clashing:
                problems.append(
                    f"KINETIC_CHUNK names each input's result and input; do not also set "
                    f"{', '.join(clashing)}"
                )
            try:
                inputs = parse_chunk(chunk_text, default_output_dir=get("KINETIC_OUTPUT_DIR"))
            except ConfigError as e:
                problems.append(str(e))
        else:
            spec, single_problems = _single_input(environ, get)
            problems += single_problems
            inputs = (spec,) if spec is not None else ()
        port, port_problem = debugger.debug_port(environ)
        problems += [port_problem] if port_problem else []
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(
            payload_uri=str(payload_uri),
            payload_sha256=str(payload_sha),
            inputs=inputs,
            chunked=chunk_text is not None,
            input_mode=mode,
            termination_log=termination_log_path(environ),
            report_uri=get("KINETIC_REPORT_URI"),
            stop_uri=get(ENV_STOP_URI),
            fail_fast=get(ENV_FAIL_FAST) == "1",
            debug_port=port,
        )


def _uri_problem(name: str, value: str | None) -> list[str]:
    if value is None:
        return []
    try:
        storage.validate_uri(value)
    except ValueError as e:
        return [f"{name}: {e}"]
    return []


def _single_input(
    environ: Mapping[str, str], get: Callable[[str], str | None]
) -> tuple[InputSpec | None, list[str]]:
    """The one-input contract. KINETIC_INDEX is accepted and ignored: the URIs say it all."""
    problems: list[str] = []
    result_uri = get("KINETIC_RESULT_URI")
    if result_uri is None:
        problems.append("KINETIC_RESULT_URI is not set")
    input_uri, input_json = get("KINETIC_INPUT_URI"), environ.get("KINETIC_INPUT_JSON")
    problems += _uri_problem("KINETIC_RESULT_URI", result_uri)
    problems += _uri_problem("KINETIC_INPUT_URI", input_uri)
    if input_uri is not None and input_json is not None:
        problems.append("set only one of KINETIC_INPUT_URI and KINETIC_INPUT_JSON")
    if input_uri is not None and get("KINETIC_INPUT_SHA256") is None:
        problems.append("KINETIC_INPUT_SHA256 is not set (required with KINETIC_INPUT_URI)")
    if result_uri is None:
        return None, problems
    spec = InputSpec(
        result_uri=result_uri,
        output_dir=get("KINETIC_OUTPUT_DIR"),
        input_uri=input_uri,
        input_sha256=get("KINETIC_INPUT_SHA256"),
        input_json=input_json,
    )
    return spec, problems


_CHUNK_KEYS = (
    "index",
    "resultURI",
    "outputDir",
    "inputURI",
    "inputSHA256",
    "inputJSON",
    "resultSHA256",
    "originalIndex",
)


def parse_chunk(text: str, default_output_dir: str | None = None) -> tuple[InputSpec, ...]:
    """The inputs of ``KINETIC_CHUNK``; ConfigError names the variable, the entry and the fix.

    Entries must be in strictly increasing index order, each with a
    ``resultURI`` and exactly one of ``inputURI`` (with ``inputSHA256``) or
    ``inputJSON`` (any JSON value, null included). Unknown keys are refused,
    so a misspelt ``outputDir`` cannot silently drop a user's outputs.
    An entry without ``outputDir`` gets ``default_output_dir``.
    """
    try:
        entries = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"KINETIC_CHUNK is not valid JSON: {e}") from None
    if not isinstance(entries, list):
        raise ConfigError(f"KINETIC_CHUNK must be a JSON list of inputs, got {_json_type(entries)}")
    if not entries:
        raise ConfigError("KINETIC_CHUNK is an empty list: a chunk needs at least one input")
    problems: list[str] = []
    specs: list[InputSpec] = []
    previous: int | None = None
    for n, entry in enumerate(entries):
        where = f"KINETIC_CHUNK[{n}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be an object, got {_json_type(entry)}")
            continue
        index, where, index_problems = _chunk_index(entry, where, previous)
        previous = previous if index is None else index
        entry_problems = index_problems + _chunk_entry_problems(entry, where)
        problems += entry_problems
        if index is not None and not entry_problems:
            specs.append(_chunk_spec(entry, index, default_output_dir))
    if problems:
        shown = problems[:_MAX_CHUNK_PROBLEMS]
        if len(problems) > len(shown):
            shown.append(f"and {len(problems) - len(shown)} more problem(s)")
        raise ConfigError("; ".join(shown))
    return tuple(specs)


def _chunk_index(
    entry: dict[str, Any], where: str, previous: int | None
) -> tuple[int | None, str, list[str]]:
    """An entry's index (None when it is not a non-negative integer), the place to name in
    its problems from then on, and what is wrong with the index: an index that does not
    follow the previous entry's is named, and still taken as the one to follow."""
    index = entry.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        return None, where, [f"{where}.index must be a non-negative integer, got {index!r}"]
    where = f"{where} (index {index})"
    if previous is not None and index <= previous:
        return (
            index,
            where,
            [f"{where}: indexes must increase (the entry before has index {previous})"],
        )
    return index, where, []


def _chunk_spec(entry: dict[str, Any], index: int, default_output_dir: str | None) -> InputSpec:
    """The input a checked chunk entry describes."""
    has_json = "inputJSON" in entry
    return InputSpec(
        result_uri=entry["resultURI"],
        index=index,
        output_dir=entry.get("outputDir") or default_output_dir,
        input_uri=entry.get("inputURI"),
        input_sha256=entry.get("inputSHA256"),
        input_json=json.dumps(entry["inputJSON"]) if has_json else None,
        result_sha256=entry.get("resultSHA256"),
        original_index=entry.get("originalIndex"),
    )


def _chunk_entry_problems(entry: dict[str, Any], where: str) -> list[str]:
    """What is wrong with a chunk entry's keys and values, its index aside."""
    problems: list[str] = []
    unknown = sorted(k for k in entry if k not in _CHUNK_KEYS)
    if unknown:
        problems.append(
            f"{where} has unknown key(s) {', '.join(map(repr, unknown))} "
            f"(allowed: {', '.join(_CHUNK_KEYS)})"
        )
    problems += _chunk_string_problems(entry, where)
    if "resultURI" not in entry:
        problems.append(f"{where}.resultURI is missing: every input needs its own result URI")
    if ("inputURI" in entry) == ("inputJSON" in entry):
        problems.append(f"{where}: set exactly one of inputURI and inputJSON")
    if "inputURI" in entry and "inputSHA256" not in entry:
        problems.append(f"{where}.inputSHA256 is missing (required with inputURI)")
    original = entry.get("originalIndex", 0)
    if isinstance(original, bool) or not isinstance(original, int) or original < 0:
        problems.append(f"{where}.originalIndex must be a non-negative integer, got {original!r}")
    return problems


def _chunk_string_problems(entry: dict[str, Any], where: str) -> list[str]:
    """The entry's strings that are empty or not strings, and its URIs storage would refuse."""
    problems: list[str] = []
    for key in ("resultURI", "outputDir", "inputURI", "inputSHA256", "resultSHA256"):
        value = entry.get(key)
        if key in entry and (not isinstance(value, str) or not value.strip()):
            problems.append(f"{where}.{key} must be a non-empty string, got {value!r}")
        elif key in ("resultURI", "inputURI") and isinstance(value, str):
            problems += _uri_problem(f"{where}.{key}", value)
    return problems


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )
