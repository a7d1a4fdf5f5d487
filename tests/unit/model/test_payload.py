"""Payload and result formats: what the client uploads and what the runner sends back."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kinetic.model import payload
from kinetic.model.payload import (
    RESULT_HEADER,
    PayloadError,
    RemoteError,
    Result,
    RunnerError,
    build_function_payload,
    build_input_payload,
    build_job_payload,
    call_with_input,
    capture_env,
    dump_result,
    load_result,
    raise_remote,
    result_outcome,
    runner_failure,
    success,
)
from kinetic.runtime.outcome import user_failure
from kinetic.runtime.unpickle import load_call_payload, load_input_payload


def roundtrip(result: Result) -> Result:
    return load_result(dump_result(result))


def failure_of(fn: Any, *args: Any) -> Result:
    try:
        fn(*args)
    except BaseException as e:
        return user_failure(e)
    raise AssertionError("expected the function to raise")


# --------------------------------------------------------------------------- call payloads


def test_sha256_is_hex_of_the_bytes() -> None:
    assert payload.sha256(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_job_payload_roundtrips_a_closure_with_args_kwargs_and_env() -> None:
    offset = 10

    def add(a: int, b: int = 0) -> int:
        return a + b + offset

    data = build_job_payload(add, (1,), {"b": 2}, {"WANDB_MODE": "offline"})
    call = load_call_payload(data)
    assert call.fn(*call.args, **call.kwargs) == 13
    assert call.env == {"WANDB_MODE": "offline"}
    assert call.name.endswith("add")
    assert call.python_version.count(".") == 2


def test_lambda_payload_and_function_payload_without_args() -> None:
    call = load_call_payload(build_function_payload(lambda x: x * 2, {"A": "1"}))
    assert call.args == () and call.kwargs == {}
    assert call_with_input(call.fn, 21) == 42
    assert call.name == "<lambda>"


def test_installed_functions_are_pickled_by_reference() -> None:
    call = load_call_payload(build_job_payload(textwrap.dedent, ("  x",)))
    assert call.fn is textwrap.dedent


def test_non_callable_is_rejected() -> None:
    with pytest.raises(TypeError, match="expected a callable, got int"):
        build_job_payload(3)  # type: ignore[arg-type]


def test_unpicklable_argument_names_the_function() -> None:
    def f(x: Any) -> Any:
        return x

    with pytest.raises(PayloadError, match=r"could not pickle function '.*f' and its arguments"):
        build_job_payload(f, (threading.Lock(),))


def test_input_payload_roundtrip() -> None:
    value = {"lr": 0.1, "layers": [1, 2, 3]}
    assert load_input_payload(build_input_payload(value)) == value


@pytest.fixture
def local_module(tmp_path: Path) -> Iterator[Path]:
    """A user module outside site-packages, importable only in this process."""
    src = tmp_path / "userpkg_kinetic_test"
    src.mkdir()
    (src / "__init__.py").write_text("")
    (src / "helpers.py").write_text("def scale(x):\n    return x * 3\n")
    (src / "model.py").write_text(
        "from userpkg_kinetic_test.helpers import scale\n"
        "class Config:\n    def __init__(self, n):\n        self.n = n\n"
        "def train(cfg):\n    return scale(cfg.n)\n"
        "def explode():\n    raise RuntimeError('kaboom in user code')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("userpkg_kinetic_test")]:
            del sys.modules[name]


def _run_in_fresh_python(
    code: str, data: bytes, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """Load ``data`` in a new interpreter that cannot import the user's modules."""
    blob = tmp_path / "blob.pkl"
    blob.write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code, str(blob)],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=60,
    )


def test_functions_from_local_modules_are_pickled_by_value(local_module: Path) -> None:
    from userpkg_kinetic_test import model  # type: ignore[import-not-found]

    data = build_job_payload(model.train, (model.Config(5),))
    proc = _run_in_fresh_python(
        "import sys\n"
        "from kinetic.runtime.unpickle import load_call_payload\n"
        "call = load_call_payload(open(sys.argv[1], 'rb').read())\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('userpkg_kinetic_test') is None\n"
        "print(call.fn(*call.args))\n",
        data,
        local_module,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "15"
    # registration is scoped to one dump: later pickles of the module go by reference again
    import cloudpickle

    assert model.__name__ not in cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES


def test_functions_from_main_are_pickled_by_value(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "from kinetic.model.payload import build_job_payload\n"
        "FACTOR = 7\n"
        "def work(x):\n    return x * FACTOR\n"
        "sys.stdout.buffer.write(build_job_payload(work, (6,)))\n"
    )
    made = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    proc = _run_in_fresh_python(
        "import sys\nfrom kinetic.runtime.unpickle import load_call_payload\n"
        "c = load_call_payload(open(sys.argv[1], 'rb').read())\nprint(c.fn(*c.args))\n",
        made.stdout,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_loading_garbage_or_a_newer_format_explains_itself() -> None:
    with pytest.raises(PayloadError, match="not a Kinetic payload"):
        load_call_payload(b"definitely not a pickle")
    with pytest.raises(PayloadError, match="no kinetic_payload marker"):
        load_call_payload(pickle.dumps({"fn": print}))
    newer = pickle.dumps({"kinetic_payload": payload.PAYLOAD_FORMAT + 1, "body": b""})
    with pytest.raises(PayloadError, match="newer than this runner understands"):
        load_call_payload(newer)


def _missing_module_payload(python: str) -> bytes:
    """A payload whose function lives in a module the loading side does not have."""
    mod = types.ModuleType("kinetic_test_vanished_module")
    exec("def f():\n    return 1\n", mod.__dict__)
    mod.f.__module__ = mod.__name__
    sys.modules[mod.__name__] = mod
    try:
        data = build_job_payload(mod.f)
    finally:
        del sys.modules[mod.__name__]
    envelope = pickle.loads(data)
    envelope["python"] = python
    return pickle.dumps(envelope)


def test_missing_module_in_the_image_is_named_with_the_fix() -> None:
    import platform

    with pytest.raises(PayloadError) as info:
        load_call_payload(_missing_module_payload(platform.python_version()))
    msg = str(info.value)
    assert "'kinetic_test_vanished_module' is not installed in this image" in msg
    assert "Python" not in msg.split("—", 1)[1]


def test_python_version_mismatch_is_pointed_out() -> None:
    with pytest.raises(PayloadError, match=r"pickled it with Python 3\.1\.0 but this image has"):
        load_call_payload(_missing_module_payload("3.1.0"))


def test_capture_env_takes_names_and_star_prefixes() -> None:
    environ = {"WANDB_KEY": "k", "WANDB_MODE": "m", "HF_TOKEN": "t", "HOME": "/h"}
    assert capture_env(["WANDB_*", "HF_TOKEN", "UNSET"], environ) == {
        "WANDB_KEY": "k",
        "WANDB_MODE": "m",
        "HF_TOKEN": "t",
    }
    assert capture_env([], environ) == {}


# --------------------------------------------------------------------------- results


def test_success_roundtrip_and_raise_remote_returns_the_value() -> None:
    result = roundtrip(success({"acc": 0.9}))
    assert result.ok and result.phase is None
    assert raise_remote(result) == {"acc": 0.9}
    assert result.summary() == "ok"


def _train(lr: float) -> None:
    raise ValueError(f"bad lr {lr}")


def test_user_exception_is_reraised_with_the_remote_traceback_as_a_note() -> None:
    result = roundtrip(failure_of(call_with_input, _train, [0.5]))
    assert not result.ok and result.phase == "call" and not result.is_runner_failure
    assert result.summary() == "ValueError: bad lr 0.5"
    with pytest.raises(ValueError, match="bad lr 0.5") as info:
        raise_remote(result)
    notes = info.value.__notes__
    assert len(notes) == 1 and notes[0].startswith("Remote traceback:\n")
    assert "in _train" in notes[0] and 'raise ValueError(f"bad lr {lr}")' in notes[0]
    # the traceback starts in the user's code, not in kinetic's plumbing
    assert payload.__file__ not in notes[0] and "test_payload.py" in notes[0]
    assert "in failure_of" not in notes[0]
    # raising the same result twice does not stack the note
    with pytest.raises(ValueError) as again:
        raise_remote(result)
    assert len(again.value.__notes__) == 1


class NeedsTwoArgs(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"a={a} b={b}")


class HoldsALock(Exception):
    def __init__(self) -> None:
        super().__init__("locked")
        self.lock = threading.Lock()


@pytest.mark.parametrize(
    ("exc", "type_suffix", "text"),
    [(NeedsTwoArgs(1, 2), "NeedsTwoArgs", "a=1 b=2"), (HoldsALock(), "HoldsALock", "locked")],
)
def test_exceptions_that_do_not_survive_pickling_become_remote_errors(
    exc: BaseException, type_suffix: str, text: str
) -> None:
    def boom() -> None:
        raise exc

    result = roundtrip(failure_of(boom))
    assert isinstance(result.exception, RemoteError)
    assert result.exception.type_name.endswith(type_suffix)
    with pytest.raises(RemoteError) as info:
        raise_remote(result)
    assert str(info.value) == f"{result.exception.type_name}: {text}"
    assert info.value.__notes__[0].startswith("Remote traceback:")


def test_exception_class_missing_on_the_client_becomes_a_remote_error() -> None:
    mod = types.ModuleType("kinetic_test_gone_errors")
    exec("class GoneError(Exception):\n    pass\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    try:
        data = dump_result(failure_of(lambda: (_ for _ in ()).throw(mod.GoneError("gone"))))
    finally:
        del sys.modules[mod.__name__]
    result = load_result(data)
    assert isinstance(result.exception, RemoteError)
    assert str(result.exception) == "kinetic_test_gone_errors.GoneError: gone"


def test_system_exit_from_user_code_is_a_user_failure() -> None:
    result = roundtrip(failure_of(sys.exit, 3))
    assert result.phase == "call" and result.summary() == "SystemExit: 3"
    with pytest.raises(SystemExit):
        raise_remote(result)


def test_runner_failure_raises_runner_error_naming_the_phase() -> None:
    result = roundtrip(runner_failure("verify", "payload hash mismatch: expected a, got b"))
    assert result.is_runner_failure
    assert (
        result.summary()
        == "runner failed in phase verify: payload hash mismatch: expected a, got b"
    )
    with pytest.raises(RunnerError) as info:
        raise_remote(result)
    assert info.value.phase == "verify"
    assert str(info.value).startswith("runner failed in phase verify: payload hash mismatch")


def test_runner_failure_keeps_the_cause_traceback() -> None:
    try:
        raise KeyError("x")
    except KeyError as e:
        result = roundtrip(runner_failure("unpickle", "cannot unpickle", e))
    with pytest.raises(RunnerError) as info:
        raise_remote(result)
    assert "KeyError: 'x'" in info.value.__notes__[0]


def test_runner_failure_rejects_call_and_unknown_phases() -> None:
    with pytest.raises(ValueError, match="runner phase must be one of"):
        runner_failure("call", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'later'"):
        runner_failure("later", "x")  # type: ignore[arg-type]


def test_unpicklable_return_value_names_its_type() -> None:
    with pytest.raises(PayloadError) as info:
        dump_result(success(threading.Lock()))
    assert str(info.value).startswith("the return value could not be pickled: _thread.lock")


def test_load_result_rejects_garbage_and_foreign_pickles() -> None:
    with pytest.raises(PayloadError, match="cannot unpickle the result"):
        load_result(RESULT_HEADER + b"ok\n\x80\x05garbage")
    with pytest.raises(PayloadError, match="not a Kinetic result"):
        load_result(RESULT_HEADER + b"ok\n" + pickle.dumps({"ok": True}))
    with pytest.raises(PayloadError, match="no result header"):
        load_result(pickle.dumps(success(1)))  # a bare pickle is never loaded


def test_the_outcome_is_read_from_the_header_without_unpickling() -> None:
    assert result_outcome(dump_result(success(1))) is True
    assert result_outcome(dump_result(runner_failure("download", "gone"))) is False
    # Bytes that would run code if unpickled are never loaded to find out.
    assert result_outcome(b"cos\nsystem\n(S'touch /tmp/pwned'\ntR.") is None
    assert result_outcome(RESULT_HEADER + b"maybe\n") is None


def test_remote_tracebacks_show_the_users_source_even_without_the_file(
    local_module: Path,
) -> None:
    from userpkg_kinetic_test import model  # type: ignore[import-not-found]

    data = build_job_payload(model.explode)
    # the pod has no copy of the user's tree: the source travels in the payload
    moved = local_module.rename(local_module.parent / (local_module.name + "-gone"))
    proc = _run_in_fresh_python(
        "import sys\n"
        "from kinetic.runtime.outcome import user_failure\n"
        "from kinetic.runtime.unpickle import load_call_payload\n"
        "call = load_call_payload(open(sys.argv[1], 'rb').read())\n"
        "try:\n    call.fn()\nexcept Exception as e:\n    print(user_failure(e).traceback)\n",
        data,
        moved,
    )
    local_module.mkdir()  # let the fixture clean up as usual
    assert proc.returncode == 0, proc.stderr
    assert f'{local_module}/userpkg_kinetic_test/model.py", line 8, in explode' in proc.stdout
    assert "raise RuntimeError('kaboom in user code')" in proc.stdout


def test_the_runner_and_the_schema_agree_on_input_modes() -> None:
    """Two spellings of one fact: the runner must not import pydantic (start-up cost per Pod)."""
    from typing import get_args

    from kinetic.model import payload, resources

    assert get_args(resources.InputMode) == payload.INPUT_MODES
