"""Multi-host jobs at the door: the policy's maxHostsPerJob, accelerators over every host,
hosts that do not match a TPU slice, chunking with gangs, and names too long for a gang."""

from __future__ import annotations

from typing import Any

import pytest
from kinetic.model.catalog import default_catalog
from kinetic_operator.handlers.admission import batch_problems, hosts_problems_of, job_problems
from kinetic_operator.logic.errors import PolicyError
from kinetic_operator.logic.job_logic import InvalidSpec, validate_spec
from kinetic_operator.logic.policy import Policy, parse_policy, policy_violations
from kinetic_operator.settings import OperatorSettings

SOURCE = "kinetic-policy in kinetic-system"
CATALOG = default_catalog()
AT = f"({SOURCE})"
SETTINGS = OperatorSettings(storage_root="gs://kinetic/root")


def job(**spec: Any) -> dict[str, Any]:
    return {"container": {"command": ["true"]}, **spec}


def judged(kind: Any, spec: dict[str, Any], **limits: Any) -> list[str]:
    policy = Policy.model_validate({**limits, "source": SOURCE})
    return policy_violations(kind, "ns", spec, policy, CATALOG)


# --------------------------------------------------------------------------- policy


@pytest.mark.parametrize(
    "kind, spec, refused",
    [
        ("KineticJob", job(hosts=3), f"spec.hosts is 3, above maxHostsPerJob 2 {AT}"),
        (
            "KineticBatch",
            {"template": job(hosts=3), "inputs": {"items": [1]}},
            f"spec.template.hosts is 3, above maxHostsPerJob 2 {AT}",
        ),
        (
            "KineticBatch",
            {"jobs": [job(), job(hosts=4)]},
            f"spec.jobs[1].hosts is 4, above maxHostsPerJob 2 {AT}",
        ),
        (
            "KineticJob",
            job(accelerator="tpu-v5e-16"),
            f"spec.accelerator 'tpu-v5e-16' is a slice of 4 hosts, above maxHostsPerJob 2 {AT}",
        ),
    ],
)
def test_max_hosts_per_job_refuses_more_hosts_naming_the_field_and_the_fix(kind, spec, refused):
    (problem,) = judged(kind, spec, maxHostsPerJob=2)
    assert problem.startswith(refused)
    assert "at most 2 hosts" in problem


@pytest.mark.parametrize(
    "spec",
    [job(hosts=2), job(), job(accelerator="tpu-v4-16"), job(accelerator="tpu-v5e-16", hosts=4)],
)
def test_max_hosts_per_job_admits_what_fits(spec):
    assert judged("KineticJob", spec, maxHostsPerJob=4) == []


def test_no_max_hosts_per_job_is_no_limit():
    assert judged("KineticJob", job(hosts=64)) == []


@pytest.mark.parametrize(
    "spec, count",
    [
        (job(accelerator="gpu-l4x4", hosts=3), "12 accelerators per job across 3 hosts"),
        (job(accelerator="tpu-v5e-16"), "16 accelerators per job across 4 hosts"),
    ],
)
def test_max_accelerators_per_job_counts_every_host(spec, count):
    (problem,) = judged("KineticJob", spec, maxAcceleratorsPerJob=8)
    assert problem.startswith(f"spec.accelerator {spec['accelerator']!r} requests {count}")
    assert f"exceeds maxAcceleratorsPerJob 8 {AT}" in problem
    assert problem.endswith("choose a smaller accelerator or fewer hosts")


def test_max_accelerators_per_job_admits_a_gang_within_it():
    assert judged("KineticJob", job(accelerator="gpu-l4x4", hosts=2), maxAcceleratorsPerJob=8) == []


def test_one_host_over_the_accelerator_limit_is_not_told_to_use_fewer_hosts():
    (problem,) = judged("KineticJob", job(accelerator="gpu-l4x4"), maxAcceleratorsPerJob=2)
    assert "across" not in problem and problem.endswith("choose a smaller accelerator")


def test_max_hosts_per_job_parses():
    assert parse_policy({"maxHostsPerJob": ""}, SOURCE).max_hosts_per_job is None
    assert parse_policy({"maxHostsPerJob": "4"}, SOURCE).max_hosts_per_job == 4


@pytest.mark.parametrize("value, says", [("0", "greater than or equal to 1"), ("-2", "1")])
def test_max_hosts_per_job_of_zero_is_refused_naming_the_key(value, says):
    with pytest.raises(PolicyError) as err:
        parse_policy({"maxHostsPerJob": value}, SOURCE)
    assert str(err.value).startswith(f"{SOURCE}: data.maxHostsPerJob:")
    assert says in str(err.value)


# --------------------------------------------------------------------------- admission


@pytest.mark.parametrize(
    "spec, problem",
    [
        (
            job(accelerator="tpu-v5e-16", hosts=2),
            "spec.hosts is 2, but spec.accelerator 'tpu-v5e-16' is a slice of 4 hosts, one Pod "
            "each: set spec.hosts to 4, or leave it out",
        ),
    ],
)
def test_a_job_whose_hosts_cannot_run_is_refused_naming_the_field(spec, problem):
    assert job_problems({"spec": spec}, CATALOG) == [problem]


@pytest.mark.parametrize(
    "spec",
    [job(accelerator="tpu-v5e-16", hosts=4), job(accelerator="tpu-v5e-16"), job(hosts=3)],
)
def test_a_job_whose_hosts_fit_its_accelerator_is_admitted(spec):
    assert job_problems({"spec": spec}, CATALOG) == []


def test_hosts_of_a_batchs_jobs_are_named_by_their_path():
    specs = {"spec.template": job(), "spec.jobs[2]": job(accelerator="tpu-v4-16", hosts=3)}
    assert hosts_problems_of(specs, CATALOG) == [
        "spec.jobs[2].hosts is 3, but spec.jobs[2].accelerator 'tpu-v4-16' is a slice of 2 "
        "hosts, one Pod each: set spec.jobs[2].hosts to 2, or leave it out"
    ]


@pytest.mark.parametrize(
    "template",
    [job(hosts=2), job(accelerator="tpu-v5e-16")],
    ids=["hosts", "multi-host-slice"],
)
def test_chunking_a_gang_batch_is_refused_naming_chunk_size(template):
    body = {"spec": {"template": template, "inputs": {"items": [1, 2, 3]}, "chunkSize": 2}}
    assert batch_problems(None, body, SETTINGS) == [
        "spec.chunkSize is 2, but spec.template runs on several hosts; a gang runs one input "
        "per attempt: set spec.chunkSize to 1"
    ]


def test_a_gang_batch_of_one_input_per_attempt_is_admitted():
    body = {"spec": {"template": job(hosts=2), "inputs": {"items": [1, 2, 3]}}}
    assert batch_problems(None, body, SETTINGS) == []


# --------------------------------------------------------------------------- validate_spec


def validate(name: str, spec: dict[str, Any]) -> Any:
    return validate_spec(name, spec, CATALOG, storage_root=None, max_disruptions=3)


@pytest.mark.parametrize("spec", [job(hosts=2), job(accelerator="tpu-v4-16")])
def test_a_long_name_runs_gangs_too(spec):
    """Pod names fit whatever the job is called (`names`): no name is too long any more."""
    assert not isinstance(validate("a" * 63, spec), InvalidSpec)


def test_validate_spec_refuses_hosts_that_do_not_match_a_slice():
    got = validate("kj", job(accelerator="tpu-v5e-16", hosts=2))
    assert isinstance(got, InvalidSpec) and got.message.startswith("spec.hosts is 2, but")
