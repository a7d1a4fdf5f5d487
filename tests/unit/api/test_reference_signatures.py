"""Every reference function and method in the reference's positional order (issue 32, item 1).

`REFERENCE` is the reference API's parameter names in their order, as its
documents give them, kept here: a signature that drifts from it fails. After
them come only this client's own parameters, keyword-only. Callers of this
client's order before this release are warned where a position changed
meaning (`ArgumentMoved`), never rebound in silence. The same signatures are
called positionally and by keyword on the real cluster in
tests/integration/test_reference_signatures_live.py.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import kinetic
import kinetic.debug
import kinetic.jobs
import pytest
from kinetic.api import reference
from kinetic.api.batches import BatchHandle
from kinetic.api.handle import JobHandle
from kinetic.api.inputs import InputHandle
from kinetic.api.remote import RemoteFunction
from kinetic_testing.warned import moved

# What the reference documents, in order. `*` starts its keyword-only parameters.
REFERENCE: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "kinetic.run": (
        kinetic.run,
        (
            "accelerator",
            "container_image",
            "base_image_repo",
            "zone",
            "project",
            "capture_env_vars",
            "cluster",
            "backend",
            "namespace",
            "volumes",
            "spot",
            "output_dir",
            "debug",
        ),
    ),
    "kinetic.Data": (kinetic.Data.__init__, ("self", "path", "fuse", "hf_trust_remote_code")),
    "kinetic.attach": (kinetic.attach, ("job_id", "project", "cluster")),
    "kinetic.list_jobs": (kinetic.list_jobs, ("project", "zone", "cluster", "namespace")),
    "kinetic.attach_batch": (
        kinetic.attach_batch,
        ("group_id", "project", "cluster", "poll_interval", "poll_timeout"),
    ),
    "RemoteFunction.run_async_map": (
        RemoteFunction.run_async_map,
        (
            "self",
            "inputs",
            "*",
            "input_mode",
            "max_concurrent",
            "retries",
            "fail_fast",
            "cancel_running_on_fail",
            "name",
            "tags",
        ),
    ),
    "JobHandle.from_job_context": (
        JobHandle.from_job_context,
        ("ctx", "backend_name", "namespace", "k8s_name"),
    ),
    "JobHandle.from_dict": (JobHandle.from_dict, ("d",)),
    "BatchError": (
        kinetic.BatchError.__init__,
        ("self", "group_id", "failures", "partial_results"),
    ),
    "BatchHandle.statuses": (BatchHandle.statuses, ("self",)),
    "BatchHandle.status_counts": (BatchHandle.status_counts, ("self",)),
    "BatchHandle.wait": (BatchHandle.wait, ("self", "*", "timeout")),
    "BatchHandle.as_completed": (
        BatchHandle.as_completed,
        ("self", "*", "poll_interval", "timeout"),
    ),
    "BatchHandle.results": (
        BatchHandle.results,
        ("self", "*", "timeout", "ordered", "cleanup", "return_exceptions"),
    ),
    "BatchHandle.failures": (BatchHandle.failures, ("self",)),
    "BatchHandle.cancel": (BatchHandle.cancel, ("self",)),
    "BatchHandle.cleanup": (BatchHandle.cleanup, ("self", "*", "k8s", "gcs")),
    "kinetic.jobs.attach_remote_traceback": (
        kinetic.jobs.attach_remote_traceback,
        ("exception", "remote_traceback"),
    ),
    # kinetic.debug: the names its own jobs module calls, with as many positional arguments.
    "kinetic.debug.start_port_forward": (
        kinetic.debug.start_port_forward,
        ("pod", "namespace", "local_port", "remote_port"),
    ),
    "kinetic.debug.print_attach_instructions": (
        kinetic.debug.print_attach_instructions,
        ("local_port", "working_dir"),
    ),
    "kinetic.debug.wait_for_debug_server": (kinetic.debug.wait_for_debug_server, ("handle",)),
    "kinetic.debug.cleanup_port_forward": (kinetic.debug.cleanup_port_forward, ("proc",)),
}

# A job's handle and an input's (`batch.jobs[i]`) have the reference JobHandle's methods.
HANDLE_METHODS: dict[str, tuple[str, ...]] = {
    "to_dict": ("self",),
    "status": ("self",),
    "logs": ("self", "follow"),
    "tail": ("self", "n"),
    "debug_attach": ("self", "local_port", "working_dir"),
    "result": (
        "self",
        "timeout",
        "cleanup",
        "cleanup_timeout",
        "cleanup_poll_interval",
        "stream_logs",
        "on_status_change",
    ),
    "cancel": ("self", "cleanup_timeout", "cleanup_poll_interval"),
    "cleanup": ("self", "k8s", "gcs", "cleanup_timeout", "cleanup_poll_interval"),
}
for _cls in (JobHandle, InputHandle):
    for _method, _names in HANDLE_METHODS.items():
        REFERENCE[f"{_cls.__name__}.{_method}"] = (getattr(_cls, _method), _names)

# Parameters a reference signature may have beyond its own: none but this client's, which
# are keyword-only, and ``ready_timeout``/``context`` of start_port_forward, after the four.
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def split(names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    if "*" in names:
        i = names.index("*")
        return list(names[:i]), list(names[i + 1 :])
    return list(names), []


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_every_reference_signature_keeps_the_reference_order(name: str) -> None:
    fn, names = REFERENCE[name]
    positional, keyword_only = split(names)
    params = list(inspect.signature(fn).parameters.values())
    leading = [p.name for p in params[: len(positional)]]
    assert leading == positional, f"{name}: positional order {leading} != {positional}"
    assert all(p.kind in POSITIONAL for p in params[: len(positional)]), name
    for extra in params[len(positional) :]:
        if extra.name in keyword_only:
            assert extra.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {extra.name}"
        elif name != "kinetic.debug.start_port_forward":
            assert extra.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD), (
                f"{name}: this client's own {extra.name!r} must be keyword-only"
            )
    missing = set(keyword_only) - {p.name for p in params}
    assert not missing, f"{name}: the reference's {sorted(missing)} are not accepted"


# --------------------------------------------------------------------------- old callers


def test_run_in_the_old_order_warns_naming_each_moved_argument() -> None:
    """Before: run(accelerator, image, container_image, namespace, context, env, ...)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = kinetic.run("cpu", None, None, "team-a", "ctx-a")(lambda: 1)
    message = moved(caught, __file__)
    assert "'team-a' is zone= (it was namespace= before this release" in message
    assert "'ctx-a' is project= (it was context= before this release" in message
    assert fn.options["namespace"] is None and fn.options["zone"] == "team-a"


def test_the_reference_order_binds_the_reference_way() -> None:
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        fn = kinetic.run(
            "cpu", "img:1", None, None, None, ["HOME"], None, "gke", "team-a", None, True, None
        )(lambda: 1)
    assert fn.options["image"] == "img:1" and fn.options["capture_env_vars"] == ["HOME"]
    assert fn.options["namespace"] == "team-a" and fn.options["spot"] is True


def test_rank_of_logs_and_tail_is_keyword_only() -> None:
    handle = JobHandle(job_id="train-1", namespace="team-a")
    with pytest.raises(TypeError, match="positional argument"):
        handle.tail(20, 1)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        handle.logs(False, 1)  # type: ignore[misc]


def test_the_reference_constructor_of_a_handle_is_refused_not_misread() -> None:
    """The reference's JobHandle(job_id, backend, project, ...) would bind "gke" to the
    namespace here; every field after job_id is keyword-only instead."""
    with pytest.raises(TypeError, match="positional argument"):
        JobHandle("train-1", "gke", "my-proj")  # type: ignore[misc]
    with pytest.raises(TypeError, match="keyword-only argument: 'namespace'"):
        InputHandle("grp-1a2b3c4d-0", "team-a")  # type: ignore[misc]
    saved = {"job_id": "train-1", "backend": "gke", "project": "p", "namespace": "team-a"}
    assert JobHandle.from_dict(saved).namespace == "team-a"  # the reference's saved form


# --------------------------------------------------------------------------- import paths


def test_the_reference_module_paths_import_with_their_names() -> None:
    from kinetic.debug import (
        DEBUGPY_PORT,
        cleanup_port_forward,
        print_attach_instructions,
        start_port_forward,
        wait_for_debug_server,
    )
    from kinetic.job_status import JobStatus
    from kinetic.jobs import JobHandle as Handle
    from kinetic.jobs import JobStatus as Status
    from kinetic.jobs import attach, attach_remote_traceback, list_jobs

    assert (Handle, attach, list_jobs) == (kinetic.JobHandle, kinetic.attach, kinetic.list_jobs)
    assert Status is JobStatus is kinetic.JobStatus
    assert DEBUGPY_PORT == 5678 and kinetic.jobs is __import__("kinetic.jobs").jobs
    assert all(
        callable(f)
        for f in (
            cleanup_port_forward,
            print_attach_instructions,
            start_port_forward,
            wait_for_debug_server,
            attach_remote_traceback,
        )
    )


def test_attach_remote_traceback_adds_the_remote_lines_once() -> None:
    error = ValueError("bad lr")
    same = kinetic.jobs.attach_remote_traceback(error, 'File "train.py", line 3\n')
    kinetic.jobs.attach_remote_traceback(error, 'File "train.py", line 3\n')
    assert same is error
    assert error.__notes__ == ['Remote traceback:\nFile "train.py", line 3']
    untouched = RuntimeError("x")
    assert kinetic.jobs.attach_remote_traceback(untouched, None) is untouched
    assert not hasattr(untouched, "__notes__")


def test_wait_for_debug_server_asks_the_handle() -> None:
    class Handle:
        def wait_for_debug_server(self, timeout: float | None = 600.0) -> str:
            return f"pod-after-{timeout}"

    assert kinetic.debug.wait_for_debug_server(Handle()) == "pod-after-600.0"
    assert reference.ArgumentMoved.__mro__[1] is FutureWarning  # shown by default


# --------------------------------------------------------------------------- small differences


def test_the_default_accelerator_is_cpu_not_the_references_tpu() -> None:
    fn = kinetic.run()(lambda: 1)
    assert fn.options["accelerator"] == "cpu"
    assert inspect.signature(kinetic.run).parameters["accelerator"].default == "cpu"


def test_a_handle_keeps_no_image_uri() -> None:
    """The reference's JobHandle.image_uri: the spec's image is in `kinetic jobs status`."""
    assert not hasattr(JobHandle(job_id="train-1", namespace="team-a"), "image_uri")
