"""The administrator's policy: parsing the ConfigMap, and what it refuses (table tests)."""

from __future__ import annotations

from typing import Any

import pytest
from kinetic.model.catalog import default_catalog
from kinetic_operator.handlers.admission import policy_problems
from kinetic_operator.logic.errors import PolicyError
from kinetic_operator.logic.policy import (
    Policy,
    first_acceptance_violations,
    parse_policy,
    policy_after_read,
    policy_violations,
)
from kinetic_operator.settings import OperatorSettings

SOURCE = "kinetic-policy in kinetic-system"
CATALOG = default_catalog()
DEFAULT_IMAGE = "kinetic-runner:0.1.0"
IMAGE_FIX = (
    "use an image under one of them (an entry allows what is below it by whole path parts, "
    "or exactly its tag or digest)"
)


def policy(**values: Any) -> Policy:
    return Policy.model_validate({**values, "source": SOURCE})


def batch(n: int = 3, **template: Any) -> dict[str, Any]:
    return {
        "template": {"container": {"command": ["true"]}, **template},
        "inputs": {"items": list(range(n))},
    }


def job(**spec: Any) -> dict[str, Any]:
    return {"container": {"command": ["true"]}, **spec}


# ----------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "data,expected",
    [
        ({}, policy()),
        ({"maxBatchSize": ""}, policy()),
        ({"maxBatchSize": "10"}, policy(maxBatchSize=10)),
        ({"maxAcceleratorsPerJob": "8"}, policy(maxAcceleratorsPerJob=8)),
        ({"allowedNamespaces": "team-a, team-b"}, policy(allowedNamespaces=["team-a", "team-b"])),
        ({"allowedNamespaces": '["team-a"]'}, policy(allowedNamespaces=["team-a"])),
        (
            {"allowedImages": "- ghcr.io/acme/\n- busybox"},
            policy(allowedImages=["ghcr.io/acme/", "busybox"]),
        ),
        ({"allowedImages": "[]"}, policy()),
        ({"allowedNamespaces": '["*"]'}, policy(allowedNamespaces=["*"])),
        ({"allowedNamespaces": "*"}, policy(allowedNamespaces=["*"])),
        ({"allowedNamespaces": "team-a, *"}, policy(allowedNamespaces=["team-a", "*"])),
        # The client's keys: valid in the policy, never judged (see the cases below).
        ({"dryRunDefault": "true"}, policy(dryRunDefault=True)),
        ({"requireConfirmation": "true"}, policy(requireConfirmation=True)),
        ({"dryRunDefault": "false", "requireConfirmation": ""}, policy(dryRunDefault=False)),
        ({"dryRunDefault": ""}, policy()),  # unset: a preview first
        (
            {"defaultGpuType": "l4", "maxJobsPerRequest": "20"},
            policy(defaultGpuType="l4", maxJobsPerRequest=20),
        ),
        ({"defaultGpuType": "", "maxJobsPerRequest": ""}, policy()),
    ],
)
def test_the_config_map_parses(data: dict[str, str], expected: Policy) -> None:
    assert parse_policy(data, SOURCE) == expected


@pytest.mark.parametrize(
    "data,says",
    [
        ({"maxBatchSzie": "10"}, "data.maxBatchSzie is not a policy key (known keys: maxBatchSize"),
        ({"maxBatchSize": "ten"}, "data.maxBatchSize: Input should be a valid integer"),
        ({"maxBatchSize": "-1"}, "data.maxBatchSize: Input should be greater than or equal to 0"),
        ({"allowedImages": "[unclosed"}, "data.allowedImages is not valid YAML"),
        (
            {"allowedNamespaces": "team-*"},
            """data.allowedNamespaces: Value error, 'team-*' is not a namespace: "*" alone """
            "allows every namespace; other names are matched exactly",
        ),
        ({"dryRunDefault": "maybe"}, "data.dryRunDefault: Input should be a valid boolean"),
        ({"maxJobsPerRequest": "0"}, "data.maxJobsPerRequest: Input should be greater than or"),
        ({"defaultGpuType": "L4 GPU"}, "data.defaultGpuType: String should match pattern"),
        ({"requireConfirmaton": "true"}, "known keys: maxBatchSize, maxAcceleratorsPerJob, "),
    ],
)
def test_a_bad_config_map_is_refused_naming_the_key(data: dict[str, str], says: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(data, SOURCE)
    assert str(err.value).startswith(SOURCE) and says in str(err.value)


@pytest.mark.parametrize(
    "config_map,expected,error",
    [
        (None, policy(), None),  # no ConfigMap: no policy, not an error
        ({"data": {"maxBatchSize": "5"}}, policy(maxBatchSize=5), None),
        ({"data": None}, policy(), None),
        ({"data": {"maxBatchSize": "x"}}, policy(maxBatchSize=10), "previous policy stays"),
        ({"data": {"typo": "1"}}, policy(maxBatchSize=10), "data.typo is not a policy key"),
    ],
)
def test_a_bad_read_keeps_the_policy_held(
    config_map: dict[str, Any] | None, expected: Policy, error: str | None
) -> None:
    got, why = policy_after_read(config_map, policy(maxBatchSize=10), SOURCE)
    assert got == expected
    assert (why is None) if error is None else (why is not None and error in why)


def test_the_operator_knows_every_key_the_client_reads() -> None:
    """The client's reader and the operator's parser name the same keys."""
    from kinetic.model.policy_keys import SubmissionPolicy, submission_policy

    data = {
        "dryRunDefault": "false",
        "requireConfirmation": "true",
        "defaultGpuType": "a100",
        "maxJobsPerRequest": "5",
    }
    client, notes = submission_policy(data)
    assert client == SubmissionPolicy(
        dry_run_default=False,
        require_confirmation=True,
        default_gpu_type="a100",
        max_jobs_per_request=5,
    )
    assert notes == []
    parsed = parse_policy(data, SOURCE)
    assert (parsed.dry_run_default, parsed.require_confirmation) == (False, True)
    assert (parsed.default_gpu_type, parsed.max_jobs_per_request) == ("a100", 5)


# ----------------------------------------------------------------------- judging

CASES: list[tuple[str, str, str, dict[str, Any], Policy, list[str]]] = [
    # (case, kind, namespace, spec, policy, expected messages)
    ("no policy", "KineticBatch", "a", batch(1000, accelerator="gpu-a100x16"), policy(), []),
    ("batch at the cap", "KineticBatch", "a", batch(10), policy(maxBatchSize=10), []),
    (
        "batch over the cap",
        "KineticBatch",
        "a",
        batch(11),
        policy(maxBatchSize=10),
        [f"batch size 11 exceeds maxBatchSize 10 ({SOURCE}): split the work into several batches"],
    ),
    (
        "count over the cap",
        "KineticBatch",
        "a",
        {"template": job(), "inputs": {"count": 5000, "uriPrefix": "gs://b/x"}},
        policy(maxBatchSize=100),
        [
            f"batch size 5,000 exceeds maxBatchSize 100 ({SOURCE}): "
            "split the work into several batches"
        ],
    ),
    (
        "grid over the cap",
        "KineticBatch",
        "a",
        {"template": job(), "inputs": {"grid": {"a": [1, 2, 3], "b": [1, 2]}}},
        policy(maxBatchSize=5),
        [f"batch size 6 exceeds maxBatchSize 5 ({SOURCE}): split the work into several batches"],
    ),
    (
        "heterogeneous jobs count as the batch size",
        "KineticBatch",
        "a",
        {"jobs": [job(), job(), job()]},
        policy(maxBatchSize=2),
        [f"batch size 3 exceeds maxBatchSize 2 ({SOURCE}): split the work into several batches"],
    ),
    ("a job has no batch size", "KineticJob", "a", job(), policy(maxBatchSize=0), []),
    (
        "gpus within",
        "KineticJob",
        "a",
        job(accelerator="gpu-l4x4"),
        policy(maxAcceleratorsPerJob=4),
        [],
    ),
    (
        "gpus over",
        "KineticJob",
        "a",
        job(accelerator="gpu-a100x8"),
        policy(maxAcceleratorsPerJob=4),
        [
            f"spec.accelerator 'gpu-a100x8' requests 8 accelerators per job, which exceeds "
            f"maxAcceleratorsPerJob 4 ({SOURCE}): choose a smaller accelerator"
        ],
    ),
    (
        "tpu chips counted by the catalog (v5p-8 is 4 chips)",
        "KineticJob",
        "a",
        job(accelerator="tpu-v5p-8"),
        policy(maxAcceleratorsPerJob=4),
        [],
    ),
    (
        "tpu chips over, in a template",
        "KineticBatch",
        "a",
        batch(2, accelerator="tpu-v5e-8"),
        policy(maxAcceleratorsPerJob=4),
        [
            f"spec.template.accelerator 'tpu-v5e-8' requests 8 accelerators per job, which "
            f"exceeds maxAcceleratorsPerJob 4 ({SOURCE}): choose a smaller accelerator"
        ],
    ),
    ("cpu needs none", "KineticJob", "a", job(), policy(maxAcceleratorsPerJob=0), []),
    (
        "one of several jobs over",
        "KineticBatch",
        "a",
        {"jobs": [job(), job(accelerator="gpu-l4x2")]},
        policy(maxAcceleratorsPerJob=1),
        [
            f"spec.jobs[1].accelerator 'gpu-l4x2' requests 2 accelerators per job, which "
            f"exceeds maxAcceleratorsPerJob 1 ({SOURCE}): choose a smaller accelerator"
        ],
    ),
    ("namespace allowed", "KineticJob", "team-a", job(), policy(allowedNamespaces=["team-a"]), []),
    (
        "namespace not allowed",
        "KineticBatch",
        "other",
        batch(1),
        policy(allowedNamespaces=["team-a", "team-b"]),
        [
            "namespace 'other' may not run Kinetic jobs; allowed namespaces: team-a, team-b "
            f"({SOURCE})"
        ],
    ),
    (
        "image by prefix",
        "KineticJob",
        "a",
        job(image="ghcr.io/acme/train:1"),
        policy(allowedImages=["ghcr.io/acme/"]),
        [],
    ),
    (
        "image not allowed, in the container",
        "KineticJob",
        "a",
        {"container": {"image": "docker.io/evil:1", "command": ["true"]}},
        policy(allowedImages=["ghcr.io/acme/"]),
        [
            "spec.container.image 'docker.io/evil:1' is not an allowed image; allowed images: "
            f"ghcr.io/acme/ ({SOURCE}): {IMAGE_FIX}"
        ],
    ),
    (
        "no image: the operator's default is always allowed",
        "KineticBatch",
        "a",
        batch(1),
        policy(allowedImages=["ghcr.io/acme/"]),
        [],
    ),
    (
        "the default image named explicitly",
        "KineticJob",
        "a",
        job(image=DEFAULT_IMAGE),
        policy(allowedImages=["ghcr.io/acme/"]),
        [],
    ),
    (
        "every violation at once",
        "KineticBatch",
        "b",
        batch(3, accelerator="gpu-l4x2", image="x:1"),
        policy(
            maxBatchSize=2, maxAcceleratorsPerJob=1, allowedNamespaces=["a"], allowedImages=["y"]
        ),
        [
            f"namespace 'b' may not run Kinetic jobs; allowed namespaces: a ({SOURCE})",
            f"batch size 3 exceeds maxBatchSize 2 ({SOURCE}): split the work into several batches",
            f"spec.template.accelerator 'gpu-l4x2' requests 2 accelerators per job, which "
            f"exceeds maxAcceleratorsPerJob 1 ({SOURCE}): choose a smaller accelerator",
            f"spec.template.image 'x:1' is not an allowed image; allowed images: y ({SOURCE}): "
            f"{IMAGE_FIX}",
        ],
    ),
    ("not a spec", "KineticBatch", "a", "garbage", policy(maxBatchSize=1), []),  # type: ignore[list-item]
    ('"*" is any namespace', "KineticJob", "other", job(), policy(allowedNamespaces=["*"]), []),
    (
        '"*" among names is any namespace too',
        "KineticBatch",
        "other",
        batch(1),
        policy(allowedNamespaces=["team-a", "*"]),
        [],
    ),
    (
        '"*" lifts only the namespace limit',
        "KineticBatch",
        "other",
        batch(3),
        policy(allowedNamespaces=["*"], maxBatchSize=2),
        [f"batch size 3 exceeds maxBatchSize 2 ({SOURCE}): split the work into several batches"],
    ),
    (
        "the client's keys refuse nothing",
        "KineticBatch",
        "a",
        batch(1000, accelerator="gpu-a100x16", image="x:1"),
        policy(dryRunDefault=True, requireConfirmation=True),
        [],
    ),
]


@pytest.mark.parametrize(
    "kind,namespace,spec,pol,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_policy_violations(
    kind: Any, namespace: str, spec: Any, pol: Policy, expected: list[str]
) -> None:
    assert policy_violations(kind, namespace, spec, pol, CATALOG, DEFAULT_IMAGE) == expected


# ----------------------------------------------------------------------- when it is judged


def settings() -> OperatorSettings:
    return OperatorSettings(storage_root="file:///tmp/k", default_image=DEFAULT_IMAGE)


@pytest.mark.parametrize(
    "old_n,new_n,refused",
    [
        (None, 11, True),  # create over the cap
        (11, 11, False),  # an update that adds nothing the policy refuses (e.g. cancel)
        (3, 11, True),  # an update that grows past the cap
    ],
)
def test_an_update_is_refused_only_for_what_it_adds(
    old_n: int | None, new_n: int, refused: bool
) -> None:
    old = None if old_n is None else {"spec": batch(old_n)}
    new = {"spec": {**batch(new_n), "cancel": True}}
    found = policy_problems("KineticBatch", old, new, "a", policy(maxBatchSize=10), settings())
    assert bool(found) is refused, found


@pytest.mark.parametrize(
    "old_image,new_image,cancel,refused",
    [
        ("busybox:1", "alpine:3.20", False, True),  # the bypass the issue found
        ("alpine:3.20", "alpine:3.20", True, False),  # admitted before a tightening: cancel it
        ("alpine:3.20", "alpine:3.20", False, True),  # any other change is judged whole
        ("busybox:1", "busybox:2", False, False),
    ],
)
def test_a_job_update_is_judged_whole_unless_it_only_cancels(
    old_image: str, new_image: str, cancel: bool, refused: bool
) -> None:
    def body(image: str, **extra: Any) -> dict[str, Any]:
        return {"spec": {"container": {"command": ["true"]}, "image": image, **extra}}

    old = body(old_image, env=[{"name": "A", "value": "1"}])
    new = body(new_image, env=[{"name": "A", "value": "1" if cancel else "2"}], cancel=cancel)
    pol = policy(allowedImages=["busybox"])
    found = policy_problems("KineticJob", old, new, "a", pol, settings())
    assert bool(found) is refused, found


@pytest.mark.parametrize(
    "status,refused",
    [
        (None, True),  # stored while the webhook was down, never seen by the operator
        ({}, True),
        ({"phase": "RUNNING"}, False),  # accepted before the policy tightened: left alone
        ({"phase": "PENDING", "observedGeneration": 1}, False),
        ({"phase": "PENDING"}, True),  # the CRD's default in any status served: not acceptance
    ],
)
def test_the_operator_judges_only_objects_it_has_not_accepted(
    status: dict[str, Any] | None, refused: bool
) -> None:
    body: dict[str, Any] = {"metadata": {"namespace": "a"}, "spec": batch(11)}
    if status is not None:
        body["status"] = status
    found = first_acceptance_violations("KineticBatch", body, policy(maxBatchSize=10), CATALOG)
    assert bool(found) is refused
