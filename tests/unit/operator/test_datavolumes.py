"""spec.volumes in the attempt Pod: emptyDirs, mounts, the runner's env or an init container."""

from __future__ import annotations

import json
from typing import Any

from kinetic.model.catalog import default_catalog
from kinetic.model.resources import KineticJobSpec
from kinetic_operator.logic.job_logic import InvalidSpec, validate_spec
from kinetic_operator.logic.observed import summarize_pod
from kinetic_operator.logic.podspec import CONTAINER_SECURITY_CONTEXT, Owner, build_job_pod
from kinetic_operator.settings import OperatorSettings

SHA = "ab" * 32
ROOT = "gs://kinetic/root"
SETTINGS = OperatorSettings(
    storage_root=ROOT,
    default_image="runner:1",
    runner_command=["/venv/bin/python", "-m", "kinetic.runtime.runner"],
)
OWNER = Owner(name="kj", namespace="ns", uid="uid-1")
PAYLOAD = f"{ROOT}/namespaces/ns/uploads/kj-0123456789abcdef/payload.pkl"
CACHED = f"{ROOT}/namespaces/ns/data/{'c' * 64}/"
VOLUMES = [
    {"mountPath": "/data", "uri": CACHED, "manifestURI": CACHED.rstrip("/") + ".json"},
    {"mountPath": "/weights", "uri": "gs://public/weights.h5"},
]


def spec(kind: dict[str, Any], volumes: list[dict[str, Any]] | None = VOLUMES) -> KineticJobSpec:
    extra = {"volumes": volumes} if volumes is not None else {}
    return KineticJobSpec.model_validate({**kind, **extra})


FUNCTION = {"function": {"payloadURI": PAYLOAD, "sha256": SHA}}
CONTAINER = {"container": {"image": "busybox", "command": ["ls", "/data"]}}
EXPECTED_MOUNTS = [
    {"name": "kinetic-data-0", "mountPath": "/data"},
    {"name": "kinetic-data-1", "mountPath": "/weights"},
]


def test_function_job_mounts_empty_dirs_and_tells_the_runner():
    pod = build_job_pod(OWNER, spec(FUNCTION), SETTINGS, 1)["spec"]
    assert pod["volumes"] == [
        {"name": "kinetic-data-0", "emptyDir": {}},
        {"name": "kinetic-data-1", "emptyDir": {}},
    ]
    (main,) = pod["containers"]
    assert main["volumeMounts"] == EXPECTED_MOUNTS
    env = {e["name"]: e["value"] for e in main["env"]}
    assert json.loads(env["KINETIC_VOLUMES"]) == VOLUMES
    assert "initContainers" not in pod  # the runner fetches: no second process start


def test_container_job_gets_a_data_init_container_with_the_same_mounts():
    pod = build_job_pod(OWNER, spec(CONTAINER), SETTINGS, 1)["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == "runner:1"  # the runner image, whatever the job's own image
    assert init["command"] == ["/venv/bin/python", "-m", "kinetic.runtime.datafetch"]
    assert init["volumeMounts"] == EXPECTED_MOUNTS
    assert init["securityContext"] == CONTAINER_SECURITY_CONTEXT
    assert json.loads(init["env"][0]["value"]) == VOLUMES
    (main,) = pod["containers"]
    assert main["volumeMounts"] == EXPECTED_MOUNTS
    assert "KINETIC_VOLUMES" not in {e["name"] for e in main["env"]}


def test_no_volumes_no_changes():
    pod = build_job_pod(OWNER, spec(CONTAINER, None), SETTINGS, 1)["spec"]
    assert "volumes" not in pod and "initContainers" not in pod
    assert "volumeMounts" not in pod["containers"][0]


def test_a_user_cannot_set_kinetic_volumes_through_env():
    s = spec({**FUNCTION, "env": [{"name": "KINETIC_VOLUMES", "value": "[]"}]})
    (main,) = build_job_pod(OWNER, s, SETTINGS, 1)["spec"]["containers"]
    values = [e["value"] for e in main["env"] if e["name"] == "KINETIC_VOLUMES"]
    assert len(values) == 1 and json.loads(values[0]) == VOLUMES


def validate(raw: dict[str, Any]) -> KineticJobSpec | InvalidSpec:
    return validate_spec(
        "kj", raw, default_catalog(), storage_root=ROOT, max_disruptions=3, namespace="ns"
    )


def test_operator_refuses_another_namespaces_data_and_bad_mount_paths():
    theirs = f"{ROOT}/namespaces/other/data/{'c' * 64}/"
    got = validate({**CONTAINER, "volumes": [{"mountPath": "/data", "uri": theirs}]})
    assert isinstance(got, InvalidSpec)
    assert "spec.volumes[0].uri" in str(got) and "outside this namespace" in str(got)
    got = validate({**CONTAINER, "volumes": [{"mountPath": "/dev/shm", "uri": "gs://b/"}]})
    assert isinstance(got, InvalidSpec) and "container runtime owns" in str(got)
    assert isinstance(validate({**CONTAINER, "volumes": VOLUMES}), KineticJobSpec)


def test_a_failed_data_init_container_is_the_attempts_end():
    pod = {
        "metadata": {"name": "kj-1", "labels": {"kinetic.dev/attempt": "1"}},
        "status": {
            "phase": "Failed",
            "initContainerStatuses": [
                {
                    "name": "kinetic-data",
                    "state": {
                        "terminated": {
                            "exitCode": 2,
                            "reason": "Error",
                            "message": "kinetic data: gs://b/x/ holds no objects",
                        }
                    },
                }
            ],
            "containerStatuses": [
                {"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        },
    }
    view = summarize_pod(pod)
    assert view is not None
    assert view.exit_code == 2
    assert view.termination_message == "kinetic data: gs://b/x/ holds no objects"
    assert view.waiting_reason is None
