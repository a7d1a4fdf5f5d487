"""Inside a job's Pod, `JobHandle.from_job_context()` names the running job; `group_kind` says
what group a handle belongs to, as the reference names it.

The environments are the ones the operator builds (`kinetic_operator.logic.podspec`,
`kinetic_operator.logic.batch_pods`), so the client reads what the operator writes.
"""

from __future__ import annotations

from typing import Any

import kinetic
import pytest
from kinetic.api.batches import BatchHandle
from kinetic.api.handle import JobHandle
from kinetic.api.inputs import InputHandle
from kinetic.model import layout
from kinetic.model.resources import KineticBatchSpec, KineticJobSpec
from kinetic_operator.logic.batch_pods import SizedUnit, build_unit_pod
from kinetic_operator.logic.podspec import Owner, job_env
from kinetic_operator.settings import OperatorSettings

ROOT = "gs://kinetic/root"
SHA = "ab" * 32
SETTINGS = OperatorSettings(
    storage_root=ROOT,
    default_image="runner:1",
    runner_service_account="kinetic-runner",
    runner_command=["python", "-m", "kinetic.runtime.runner"],
)
FUNCTION = {"payloadURI": f"{ROOT}/uploads/f.pkl", "sha256": SHA, "name": "train"}


def pod_env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def unit_env(spec: dict[str, Any], unit: int, batch: str = "grp-1a2b3c4d") -> dict[str, str]:
    parsed = KineticBatchSpec.model_validate(spec)
    return pod_env(build_unit_pod(batch, "team-a", "uid-9", parsed, SETTINGS, unit, 0, None))


def function_batch(count: int, **extra: Any) -> dict[str, Any]:
    inputs = {"count": count, "uriPrefix": f"{ROOT}/uploads/inputs"}
    return {"template": {"function": FUNCTION}, "inputs": inputs, **extra}


def test_a_jobs_pod_gives_the_jobs_handle() -> None:
    spec = KineticJobSpec.model_validate({"function": FUNCTION})
    env = job_env(Owner("train-1a2b", "team-a", "uid-1"), spec, SETTINGS, 0)
    handle = kinetic.JobHandle.from_job_context(env)
    assert type(handle) is JobHandle
    assert (handle.job_id, handle.namespace, handle.function) == ("train-1a2b", "team-a", True)
    assert handle.result_uri == layout.job_home(ROOT, "team-a", "train-1a2b", "uid-1").result_uri
    assert handle.group_kind is None and handle.group_id is None
    assert "group_kind" not in handle.to_dict()


def test_a_container_jobs_pod_gives_a_handle_without_a_result_location() -> None:
    spec = KineticJobSpec.model_validate({"container": {"command": ["echo"]}})
    handle = JobHandle.from_job_context(job_env(Owner("echo-1", "ns", "u"), spec, SETTINGS, 1))
    assert (handle.job_id, handle.function, handle.result_uri) == ("echo-1", False, None)


def test_an_inputs_pod_gives_the_inputs_handle() -> None:
    handle = JobHandle.from_job_context(unit_env(function_batch(5), 3))
    assert isinstance(handle, InputHandle)
    assert (handle.job_id, handle.group_id, handle.group_index) == (
        "grp-1a2b3c4d-3",
        "grp-1a2b3c4d",
        3,
    )
    assert handle.group_kind == "map"
    home = layout.batch_home(ROOT, "team-a", "grp-1a2b3c4d", "uid-9")
    assert handle.result_uri == home.input_result_uri(3)
    assert not handle.container and handle.chunk_size == 1


def test_a_batch_named_by_hand_and_a_container_input() -> None:
    spec = {"template": {"container": {"command": ["echo"]}}, "inputs": {"items": ["a", "b"]}}
    handle = JobHandle.from_job_context(unit_env(spec, 1, batch="sweep"))
    assert isinstance(handle, InputHandle)
    assert (handle.group_id, handle.group_index, handle.container) == ("sweep", 1, True)


@pytest.mark.parametrize(
    ("count", "unit", "size"), [(10, 4, 4), (10, 0, 4), (11, 8, 4), (10, 8, 2)]
)
def test_a_chunks_pod_gives_its_first_inputs_handle(count: int, unit: int, size: int) -> None:
    env = unit_env(function_batch(count, chunkSize=4), unit)
    handle = JobHandle.from_job_context(env)
    assert isinstance(handle, InputHandle)
    assert handle.group_index == unit
    assert handle.unit == unit  # the Pod it looks for is this one's
    # The Pod does not carry chunkSize; the last unit may hold fewer inputs, and any size
    # that starts a unit at this input and covers its inputs selects the same Pod.
    assert handle.chunk_size == size
    home = layout.batch_home(ROOT, "team-a", "grp-1a2b3c4d", "uid-9")
    assert handle.result_uri == home.input_result_uri(unit)


def test_the_environment_is_read_by_default_and_the_names_can_be_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KINETIC_JOB_NAME", "train-1")
    monkeypatch.setenv("KINETIC_JOB_NAMESPACE", "team-a")
    assert JobHandle.from_job_context().job_id == "train-1"
    handle = JobHandle.from_job_context(
        {}, backend_name="gke", namespace="team-b", k8s_name="grp-1a2b3c4d-7"
    )
    assert (handle.namespace, handle.group_index, handle.group_kind) == ("team-b", 7, "map")


def test_outside_a_pod_it_says_what_is_missing_and_what_to_use() -> None:
    with pytest.raises(RuntimeError) as refused:
        JobHandle.from_job_context({})
    message = str(refused.value)
    assert message.startswith(
        "JobHandle.from_job_context(): KINETIC_JOB_NAME and KINETIC_JOB_NAMESPACE are not set."
    )
    assert "use kinetic.attach(job_id), or pass k8s_name= and namespace=" in message
    with pytest.raises(RuntimeError, match=r"\(\): KINETIC_JOB_NAMESPACE is not set"):
        JobHandle.from_job_context({"KINETIC_JOB_NAME": "x"})


def test_pathways_is_refused_there_too() -> None:
    with pytest.raises(ValueError, match=r"from_job_context\(backend='pathways'\): Pathways is"):
        JobHandle.from_job_context({}, backend_name="pathways")


def test_every_input_handle_of_a_batch_is_of_the_map_group() -> None:
    batch = BatchHandle(
        group_id="grp-1a2b3c4d", namespace="ns", name=None, tags={}, total=3, storage_root=ROOT
    )
    child = batch.child(2)
    assert child.group_kind == "map"
    saved = child.to_dict()
    assert saved["group_kind"] == "map"
    again = JobHandle.from_dict(saved)  # the key is read back as what it is: derived
    assert isinstance(again, InputHandle) and again.group_kind == "map"


def test_inside_a_chunk_the_running_input_names_itself() -> None:
    """The runner renames the Pod's job to the input running now (`runner._name_input`)."""
    env = unit_env(function_batch(10, chunkSize=4), 4) | {"KINETIC_JOB_NAME": "grp-1a2b3c4d-6"}
    handle = JobHandle.from_job_context(env)
    assert isinstance(handle, InputHandle)
    assert (handle.group_index, handle.unit, handle.chunk_size) == (6, 4, 4)
    home = layout.batch_home(ROOT, "team-a", "grp-1a2b3c4d", "uid-9")
    assert handle.result_uri == home.input_result_uri(6)


def test_a_sized_units_pod_gives_the_running_inputs_handle() -> None:
    """A unit the operator sized says no chunk size: the handle asks the batch's grid."""
    parsed = KineticBatchSpec.model_validate(function_batch(40, chunkSize="auto"))
    unit = SizedUnit(size=8, inputs=(18, 19, 20, 21, 22, 23))  # 16-17 settled already
    pod = build_unit_pod("grp-1a2b3c4d", "team-a", "uid-9", parsed, SETTINGS, 16, 2, None,
                         sized=unit)  # fmt: skip
    env = pod_env(pod) | {"KINETIC_JOB_NAME": "grp-1a2b3c4d-20"}
    handle = JobHandle.from_job_context(env)
    assert isinstance(handle, InputHandle) and handle.sized
    assert handle.group_index == 20
    home = layout.batch_home(ROOT, "team-a", "grp-1a2b3c4d", "uid-9")
    assert handle.result_uri == home.input_result_uri(20)
