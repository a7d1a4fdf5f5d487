"""Heterogeneous batches (spec.jobs): validation, per-input spec selection, retries, Pods."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kinetic.model import layout, limits
from kinetic.model.batchjobs import batch_total, container_indexes, is_container, job_at, retries_of
from kinetic.model.fanout import child_spec, foreign_batch_uris, validate_batch_spec
from kinetic.model.resources import KineticBatchSpec
from kinetic_operator.logic.batch_logic import UnitObservation, decide_batch
from kinetic_operator.logic.batch_pods import build_unit_pod
from kinetic_operator.logic.observed import PodView
from kinetic_operator.settings import OperatorSettings
from pydantic import ValidationError

SHA = "c" * 64
ROOT = "gs://kinetic/root"
GRP = "grp-0a0b0c0d"
HOME = layout.batch_home(ROOT, "ns", GRP, "uid-7")
SETTINGS = OperatorSettings(
    storage_root=ROOT,
    default_image="runner:1",
    runner_service_account="kinetic-runner",
    runner_command=["python", "-m", "kinetic.runtime.runner"],
)
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def fn_job(**extra: Any) -> dict[str, Any]:
    return {
        "function": {
            "payloadURI": f"{ROOT}/namespaces/ns/uploads/{GRP}-1/payload.pkl",
            "sha256": SHA,
        },
        **extra,
    }


def box_job(image: str, **extra: Any) -> dict[str, Any]:
    return {"container": {"command": ["sh", "-c", "echo $WHO"]}, "image": image, **extra}


def mixed(*jobs: dict[str, Any], **extra: Any) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate({"jobs": list(jobs), **extra})


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


# --------------------------------------------------------------------------- the two forms

TEMPLATE = {"container": {"command": ["true"]}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"jobs": [box_job("a")]}, None),
        ({"template": TEMPLATE, "inputs": {"items": [1]}}, None),
        ({"jobs": [box_job("a")], "template": TEMPLATE}, "spec.jobs cannot be combined with"),
        ({"jobs": [box_job("a")], "inputs": {"items": [1]}}, "spec.inputs: a batch is either"),
        ({"template": TEMPLATE}, "spec.inputs is required"),
        ({"inputs": {"items": [1]}}, "spec.template is required"),
        ({}, "spec.template and spec.inputs are required"),
    ],
)
def test_exactly_one_form(spec: dict[str, Any], expected: str | None) -> None:
    problem = limits.check_batch_form(spec)
    if expected is None:
        assert problem is None
        KineticBatchSpec.model_validate(spec)
        return
    assert problem is not None and expected in problem
    assert "spec.jobs" in problem  # the message names the other form: the fix
    with pytest.raises(ValidationError, match=expected.split(":")[0]):
        KineticBatchSpec.model_validate(spec)


def test_an_empty_jobs_list_is_refused_by_the_schema() -> None:
    with pytest.raises(ValidationError, match="jobs"):
        KineticBatchSpec.model_validate({"jobs": []})


def test_too_many_jobs_names_the_limit_and_the_fix() -> None:
    many = [box_job("a")] * (limits.MAX_JOBS + 1)
    (problem,) = limits.check_batch_spec({"jobs": many}, storage_root=None)
    assert f"spec.jobs has {limits.MAX_JOBS + 1:,} entries" in problem
    assert f"the limit is {limits.MAX_JOBS:,}" in problem and "split" in problem
    # the operator's maxInputs, when lower, is the limit
    (problem,) = limits.check_batch_spec(
        {"jobs": [box_job("a")] * 3}, storage_root=None, max_inputs=2
    )
    assert "the limit is 2 job specs" in problem


def test_a_deep_inline_input_of_one_job_is_refused_by_its_path() -> None:
    deep: Any = 1
    for _ in range(limits.MAX_DEPTH + 5):
        deep = [deep]
    job = fn_job()
    job["function"]["inputJSON"] = deep
    (problem,) = limits.check_batch_spec({"jobs": [box_job("a"), job]}, storage_root=None)
    assert problem.startswith("spec.jobs[1].function.inputJSON is nested more than")


@pytest.mark.parametrize(
    ("jobs", "extra", "expected"),
    [
        ([{"image": "x"}], {}, "spec.jobs[0] needs exactly one of function or container"),
        (
            [box_job("a"), {**fn_job(), "container": {"command": ["x"]}}],
            {},
            "spec.jobs[1] needs exactly one of function or container",
        ),
        ([box_job("a", cancel=True)], {}, "spec.jobs[0].cancel must be false; add 0 to"),
        ([fn_job()], {"chunkSize": 4}, "spec.chunkSize is 4, but a batch of spec.jobs"),
        ([fn_job()], {"inputMode": "args"}, "leave spec.inputMode unset"),
        (
            [fn_job()],
            {"submissionFailures": [{"index": 3, "message": "x"}]},
            "index 3, but spec.jobs has only 1 entry",
        ),
    ],
)
def test_cross_field_problems_of_jobs(jobs: list, extra: dict, expected: str) -> None:
    problems = validate_batch_spec(mixed(*jobs, **extra))
    assert any(expected in p for p in problems), problems


def test_a_valid_mixed_batch_has_no_problems() -> None:
    spec = mixed(fn_job(), box_job("alpine:3", retries=2), retries=1, failFast=True)
    assert validate_batch_spec(spec) == []
    assert foreign_batch_uris(ROOT, "ns", spec) == []


def test_a_payload_outside_the_namespace_is_refused_by_its_path() -> None:
    job = fn_job()
    job["function"]["payloadURI"] = f"{ROOT}/namespaces/other/uploads/x/payload.pkl"
    problems = foreign_batch_uris(ROOT, "ns", mixed(box_job("a"), job))
    assert len(problems) == 1 and "spec.jobs[1].function.payloadURI" in problems[0]


def test_a_data_volume_outside_the_namespace_is_refused_by_its_job() -> None:
    job = box_job("a")
    job["volumes"] = [{"mountPath": "/data", "uri": f"{ROOT}/namespaces/other/data/x/"}]
    problems = foreign_batch_uris(ROOT, "ns", mixed(box_job("b"), job))
    assert len(problems) == 1 and problems[0].startswith("spec.jobs[1]")


@pytest.mark.parametrize(
    ("output_dir", "refused"),
    [
        (f"{ROOT}/namespaces/ns/outputs/mine", False),
        ("gs://my-own-bucket/out", False),  # written with the Pod's own credentials
        (f"{ROOT}/namespaces/other/outputs/theirs", True),
        (f"{ROOT}/outputs/everyone", True),  # the root, outside any namespace
        ("file:///etc/cron.d", True),
    ],
)
def test_an_output_dir_is_judged_in_every_form(output_dir: str, refused: bool) -> None:
    """spec.jobs[i].outputDir and spec.template.outputDir, by the data volumes' rule."""
    mixed_spec = mixed(box_job("a"), fn_job(outputDir=output_dir))
    template = KineticBatchSpec.model_validate(
        {"template": fn_job(outputDir=output_dir), "inputs": {"items": [1]}}
    )
    for spec, field in (
        (mixed_spec, "spec.jobs[1].outputDir"),
        (template, "spec.template.outputDir"),
    ):
        problems = foreign_batch_uris(ROOT, "ns", spec)
        if refused:
            assert len(problems) == 1 and problems[0].startswith(f"{field}: {output_dir}")
            assert f"{ROOT}/namespaces/ns/" in problems[0]  # the allowed prefix: the fix
        else:
            assert problems == []


# --------------------------------------------------------------------------- spec selection


@pytest.mark.parametrize(
    ("batch_retries", "job_retries", "expected"),
    [(0, None, 0), (3, None, 3), (3, 0, 0), (0, 5, 5), (2, 1, 1)],
)
def test_a_jobs_own_retries_override_the_batch(batch_retries, job_retries, expected) -> None:
    job = box_job("a") if job_retries is None else box_job("a", retries=job_retries)
    spec = mixed(job, retries=batch_retries)
    assert retries_of(spec, 0) == expected
    assert job_at(HOME, spec, 0).retries == expected


def test_input_i_runs_jobs_i_with_its_own_image_env_and_accelerator() -> None:
    spec = mixed(
        box_job("alpine:3", env=[{"name": "WHO", "value": "first"}]),
        fn_job(accelerator="gpu-l4", deadlineSeconds=60, image="trainer:2"),
        box_job(
            "busybox:1",
            env=[{"name": "WHO", "value": "third"}, {"name": "KINETIC_INDEX", "value": "9"}],
        ),
    )
    assert batch_total(spec) == 3
    assert [is_container(spec, i) for i in range(3)] == [True, False, True]
    assert str(container_indexes(spec)) == "0,2"

    first, second, third = (child_spec(HOME, spec, i) for i in range(3))
    assert first.image == "alpine:3" and third.image == "busybox:1"
    assert {e.name: e.value for e in first.env} == {"WHO": "first", "KINETIC_INDEX": "0"}
    assert {e.name: e.value for e in third.env} == {"WHO": "third", "KINETIC_INDEX": "2"}
    assert second.accelerator == "gpu-l4" and second.deadline_seconds == 60
    assert second.image == "trainer:2"
    assert second.function is not None
    assert second.function.result_uri == HOME.input_result_uri(1)  # never the job's choice
    assert second.output_dir == HOME.input_output_dir(None, 1)
    with pytest.raises(IndexError, match="the batch has 3 jobs"):
        child_spec(HOME, spec, 3)


def test_selection_does_not_change_the_spec() -> None:
    spec = mixed(box_job("a", env=[{"name": "A", "value": "1"}]))
    before = spec.wire()
    job_at(HOME, spec, 0)
    assert spec.wire() == before


def test_template_batches_are_unchanged() -> None:
    spec = KineticBatchSpec.model_validate(
        {"template": TEMPLATE, "inputs": {"items": [1, 2]}, "retries": 4}
    )
    assert batch_total(spec) == 2 and retries_of(spec, 1) == 4
    assert str(container_indexes(spec)) == "0-1"


# --------------------------------------------------------------------------- pods and planning


def test_each_input_gets_its_own_pod_spec() -> None:
    spec = mixed(box_job("alpine:3", env=[{"name": "WHO", "value": "a"}]), fn_job(image="py:3"))
    box = build_unit_pod(GRP, "ns", "uid-7", spec, SETTINGS, 0, 1, None)
    fn = build_unit_pod(GRP, "ns", "uid-7", spec, SETTINGS, 1, 2, None)
    assert box["metadata"]["name"] == f"{GRP}-i0-1" and fn["metadata"]["name"] == f"{GRP}-i1-2"
    assert box["spec"]["containers"][0]["image"] == "alpine:3"
    assert box["spec"]["containers"][0]["command"] == ["sh", "-c", "echo $WHO"]
    assert env(box)["WHO"] == "a" and env(box)["KINETIC_INDEX"] == "0"
    assert "KINETIC_PAYLOAD_URI" not in env(box)
    assert fn["spec"]["containers"][0]["image"] == "py:3"
    assert fn["spec"]["containers"][0]["command"] == SETTINGS.runner_command
    assert env(fn)["KINETIC_RESULT_URI"] == HOME.input_result_uri(1)
    assert env(fn)["KINETIC_INDEX"] == "1"
    assert "KINETIC_INPUT_JSON" not in env(fn)  # the payload is the whole call


def failed(unit: int, attempt: int) -> PodView:
    return PodView(
        name=f"g-{unit}-{attempt}",
        attempt=attempt,
        index=unit,
        phase="Failed",
        exit_code=1,
        terminated_reason="Error",
        termination_message="boom",
    )


def test_the_planner_retries_each_input_by_its_own_count() -> None:
    spec = mixed(box_job("a", retries=1), box_job("b"), retries=0, maxConcurrent=None)
    d = decide_batch(spec, None, {}, T0, batch="g")
    assert sorted(d.creates) == [(0, 1), (1, 1)]
    status = d.status.model_copy(update={"manifest_uri": "gs://x/manifest.json"})
    obs = {0: UnitObservation({1: failed(0, 1)}), 1: UnitObservation({1: failed(1, 1)})}
    d = decide_batch(spec, status, obs, T0, batch="g")
    assert d.creates == [(0, 2)]  # job 0 has its retry; job 1 (the batch's 0) failed
    assert d.status.failed_indexes == "1"


# --------------------------------------------------------------------------- the Python API


def test_container_calls_are_checked_before_anything_is_uploaded() -> None:
    import kinetic

    call = kinetic.container(["sh", "-c", "echo hi"], image="busybox:1", env={"A": "1"}, retries=2)
    job = call.job_spec()
    assert job.image == "busybox:1" and job.retries == 2
    assert [(e.name, e.value) for e in job.env] == [("A", "1")]
    assert kinetic.container(["true"]).job_spec().retries is None  # the batch's retries apply
    with pytest.raises(TypeError, match="list of strings"):
        kinetic.container("echo hi")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="name"):
        kinetic.container(["true"], env={"not-a-name": "x"})
    with pytest.raises(ValidationError, match="accelerator"):
        kinetic.container(["true"], accelerator="quantum")


def test_batch_refuses_what_is_not_a_call() -> None:
    import kinetic

    with pytest.raises(ValueError, match="at least one call"):
        kinetic.batch([])
    with pytest.raises(TypeError, match=r"entry 1 is a int: pass fn.call\(...\)"):
        kinetic.batch([kinetic.container(["true"]), 3])  # type: ignore[list-item]


def test_call_and_with_options() -> None:
    import kinetic

    def add(a: int, b: int = 0) -> int:
        return a + b

    fn = kinetic.run(image="py:1", env={"A": "1"}, retries=1)(add)
    call = fn.call(1, b=2)
    assert (call.fn, call.args, dict(call.kwargs)) == (fn, (1,), {"b": 2})
    other = fn.with_options(image="py:2")
    assert other.options["image"] == "py:2" and other.options["env"] == {"A": "1"}
    assert fn.options["image"] == "py:1"  # the original is unchanged
    with pytest.raises(TypeError, match="unknown option"):
        fn.with_options(imagee="py:3")
    with pytest.raises(ValueError, match="retries"):
        fn.with_options(retries=-1)


def test_the_jobs_of_an_existing_batch_cannot_change() -> None:
    from kinetic_operator.logic.batch_logic import immutable_change

    before = mixed(box_job("a"), box_job("b"))
    assert immutable_change(before, mixed(box_job("a"), box_job("b"), maxConcurrent=1)) is None
    change = immutable_change(before, mixed(box_job("a"), box_job("c")))
    assert change is not None and change.startswith("spec.jobs cannot change")


def test_a_stored_spec_with_both_forms_fails_with_the_sentence(tmp_path) -> None:
    """Stored while neither the schema nor the webhook judged it: FAILED, InvalidSpec."""
    from kinetic_testing.fake_kube import FakeKube
    from kinetic_testing.reconcilers import Batch

    settings = SETTINGS.model_copy(update={"storage_root": f"file://{tmp_path}/store"})
    kube = FakeKube()
    both = {"template": TEMPLATE, "inputs": {"items": [1]}, "jobs": [box_job("a")]}
    batch = Batch(kube, settings, both)
    batch.reconcile()
    assert batch.status["phase"] == "FAILED"
    assert batch.status["message"] == (
        "Invalid batch: spec.jobs cannot be combined with spec.inputs and spec.template: a "
        "batch is either one template over inputs, or a list of jobs; remove one form"
    )
    assert batch.events() == ["InvalidSpec"] and kube.pods == {}
