"""The Pod built for an attempt of a KineticJob, and what a KineticJob can never change in it."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest
from kinetic.model.catalog import default_catalog
from kinetic.model.names import job_pod_name
from kinetic.model.resources import EnvVar, KineticJobSpec
from kinetic_operator.logic.job_logic import InvalidSpec, validate_spec
from kinetic_operator.logic.podspec import (
    CONTAINER_SECURITY_CONTEXT,
    POD_SECURITY_CONTEXT,
    RESERVED_ENV,
    Owner,
    build_job_pod,
)
from kinetic_testing.pod_manifests import SETTINGS, assert_restricted, env_of, main_container

SHA = "ab" * 32
OWNER = Owner(name="kj", namespace="ns", uid="uid-1")
PAYLOAD = "gs://kinetic/root/namespaces/ns/uploads/kj-0123456789abcdef/payload.pkl"


def container_spec(**extra: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate(
        {"container": {"image": "busybox", "command": ["sh", "-c"], "args": ["echo hi"]}, **extra}
    )


def function_spec(**fn: Any) -> KineticJobSpec:
    return KineticJobSpec.model_validate({"function": {"payloadURI": PAYLOAD, "sha256": SHA, **fn}})


def test_container_job_pod():
    m = build_job_pod(OWNER, container_spec(deadlineSeconds=30), SETTINGS, 2)
    assert m["apiVersion"] == "v1" and m["kind"] == "Pod"
    assert m["metadata"]["name"] == job_pod_name("kj", 2) == "kj-a2"
    assert m["metadata"]["namespace"] == "ns"
    assert m["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kinetic",
        "kinetic.dev/job": "kj",
        "kinetic.dev/attempt": "2",
    }
    assert m["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticJob",
            "name": "kj",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod = m["spec"]
    assert pod["restartPolicy"] == "Never"  # retries are the operator's, not the kubelet's
    assert pod["terminationGracePeriodSeconds"] == 30  # the chart's default, configurable
    assert pod["activeDeadlineSeconds"] == 30
    assert pod["enableServiceLinks"] is False
    c = main_container(m)
    assert c["name"] == "main" and c["image"] == "busybox"
    assert c["command"] == ["sh", "-c"] and c["args"] == ["echo hi"]
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = env_of(m)
    assert env["KINETIC_OUTPUT_DIR"] == "gs://kinetic/root/namespaces/ns/outputs/kj/uid-1"
    assert (env["KINETIC_JOB_NAME"], env["KINETIC_JOB_NAMESPACE"]) == ("kj", "ns")
    assert env["KINETIC_ATTEMPT"] == "2"
    assert not any(
        k.startswith(("KINETIC_PAYLOAD", "KINETIC_RESULT", "KINETIC_INPUT")) for k in env
    )
    assert "resources" not in c and "nodeSelector" not in pod


def test_no_deadline_means_no_active_deadline():
    assert (
        "activeDeadlineSeconds" not in build_job_pod(OWNER, container_spec(), SETTINGS, 1)["spec"]
    )


def test_image_precedence():
    spec = KineticJobSpec.model_validate({"container": {"command": ["true"]}})
    assert main_container(build_job_pod(OWNER, spec, SETTINGS, 1))["image"] == "runner:1"
    spec = KineticJobSpec.model_validate({"container": {"command": ["true"]}, "image": "img:2"})
    assert main_container(build_job_pod(OWNER, spec, SETTINGS, 1))["image"] == "img:2"

    # A function runs in the runner image of the Python that pickled it.
    def image(spec: KineticJobSpec) -> str:
        return str(main_container(build_job_pod(OWNER, spec, SETTINGS, 1))["image"])

    assert image(function_spec()) == "kinetic-runner:7-py3.12"  # older clients say nothing
    assert image(function_spec(python="3.11")) == "kinetic-runner:7-py3.11"
    mine = function_spec(python="3.11")
    mine.image = "mine:1"
    assert image(mine) == "mine:1"


def test_every_container_learns_the_storage_emulator_and_functions_the_package_index():
    ours = SETTINGS.model_copy(
        update={
            "storage_emulator_host": "http://10.1.2.3:4443",
            "pip_index_url": "https://pypi.example/simple",
            "pip_ca_certificates": "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
        }
    )

    box = env_of(build_job_pod(OWNER, container_spec(), ours, 1))
    fn = env_of(build_job_pod(OWNER, function_spec(), ours, 1))
    assert box["STORAGE_EMULATOR_HOST"] == fn["STORAGE_EMULATOR_HOST"] == "http://10.1.2.3:4443"
    assert fn["PIP_INDEX_URL"] == "https://pypi.example/simple"
    assert fn["KINETIC_PIP_CA_CERTIFICATES"].startswith("-----BEGIN CERTIFICATE-----")
    assert "PIP_INDEX_URL" not in box and "KINETIC_PIP_CA_CERTIFICATES" not in box
    # Without an emulator (GKE), Pods use their own credentials: nothing is set.
    assert "STORAGE_EMULATOR_HOST" not in env_of(build_job_pod(OWNER, function_spec(), SETTINGS, 1))


def test_function_job_runs_the_runner_with_the_contract_env():
    m = build_job_pod(OWNER, function_spec(), SETTINGS, 1)
    c = main_container(m)
    assert c["command"] == ["python", "-m", "kinetic.runtime.runner"] and "args" not in c
    env = env_of(m)
    assert env["KINETIC_PAYLOAD_URI"] == PAYLOAD
    assert env["KINETIC_PAYLOAD_SHA256"] == SHA
    # The result goes to the job's own prefix: namespace, name and UID.
    assert env["KINETIC_RESULT_URI"] == "gs://kinetic/root/namespaces/ns/jobs/kj/uid-1/result.pkl"
    assert env["KINETIC_OUTPUT_DIR"] == "gs://kinetic/root/namespaces/ns/outputs/kj/uid-1"
    assert env["KINETIC_ATTEMPT"] == "1"
    assert not any(k.startswith("KINETIC_INPUT") for k in env)


def test_a_spec_result_uri_is_ignored_and_an_output_dir_wins():
    spec = function_spec(resultURI="gs://kinetic/root/namespaces/ns/elsewhere/result.pkl")
    spec.output_dir = "file:///out"
    env = env_of(build_job_pod(OWNER, spec, SETTINGS, 1))
    assert env["KINETIC_RESULT_URI"] == "gs://kinetic/root/namespaces/ns/jobs/kj/uid-1/result.pkl"
    assert env["KINETIC_OUTPUT_DIR"] == "file:///out"


def test_function_inputs_reach_the_runner():
    spec = function_spec(inputJSON={"a": [1, 2]}, inputMode="kwargs")
    env = env_of(build_job_pod(OWNER, spec, SETTINGS, 1))
    assert json.loads(env["KINETIC_INPUT_JSON"]) == {"a": [1, 2]}
    assert env["KINETIC_INPUT_MODE"] == "kwargs"
    spec = function_spec(inputURI="gs://b/in/3.pkl", inputSHA256=SHA)
    env = env_of(build_job_pod(OWNER, spec, SETTINGS, 1))
    assert env["KINETIC_INPUT_URI"] == "gs://b/in/3.pkl" and env["KINETIC_INPUT_SHA256"] == SHA
    # An explicit JSON null is still an input.
    pod = build_job_pod(OWNER, function_spec(inputJSON=None), SETTINGS, 1)
    assert env_of(pod)["KINETIC_INPUT_JSON"] == "null"


def test_user_env_comes_first_and_cannot_override_the_contract():
    spec = function_spec()
    spec = KineticJobSpec.model_validate(
        {
            **spec.wire(),
            "env": [
                {"name": "A", "value": "1"},
                {"name": "KINETIC_RESULT_URI", "value": "gs://evil/x"},
            ],
        }
    )
    c = main_container(build_job_pod(OWNER, spec, SETTINGS, 1))
    names = [e["name"] for e in c["env"]]
    assert names[0] == "A"
    assert names.count("KINETIC_RESULT_URI") == 1
    assert env_of(build_job_pod(OWNER, spec, SETTINGS, 1))["KINETIC_RESULT_URI"].startswith(
        "gs://kinetic/"
    )


def test_accelerator_resources_and_overrides():
    spec = container_spec(
        accelerator="gpu-a100x8", spot=True, resources={"cpu": "4", "memory": "16Gi"}
    )
    m = build_job_pod(OWNER, spec, SETTINGS, 1)
    pod = m["spec"]
    assert main_container(m)["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"nvidia.com/gpu": "8", "memory": "16Gi"},
    }
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        "cloud.google.com/gke-spot": "true",
    }
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "cloud.google.com/gke-spot"}
    tpu = build_job_pod(OWNER, container_spec(accelerator="tpu-v6e-4"), SETTINGS, 1)
    assert main_container(tpu)["resources"] == {"limits": {"google.com/tpu": "4"}}


# ---------------------------------------------------------------- security invariants


def test_the_shared_security_dicts_are_never_mutated():
    m = build_job_pod(OWNER, container_spec(), SETTINGS, 1)
    m["spec"]["securityContext"]["seccompProfile"]["type"] = "Unconfined"
    main_container(m)["securityContext"]["capabilities"]["drop"].clear()
    assert POD_SECURITY_CONTEXT["seccompProfile"] == {"type": "RuntimeDefault"}
    assert CONTAINER_SECURITY_CONTEXT["capabilities"] == {"drop": ["ALL"]}
    assert_restricted(build_job_pod(OWNER, container_spec(), SETTINGS, 1))


@pytest.mark.parametrize(
    "escape",
    [
        {"privileged": True},
        {"hostNetwork": True},
        {"hostPID": True},
        {"serviceAccountName": "admin"},
        {"securityContext": {"privileged": True}},
        {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
        {"container": {"command": ["sh"], "securityContext": {"privileged": True}}},
        {"container": {"command": ["sh"], "volumeMounts": [{"name": "r", "mountPath": "/h"}]}},
        {"container": {"command": ["sh"], "serviceAccountName": "admin"}},
        {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        {"resources": {"cpu": "1", "limits": {"nvidia.com/gpu": "8"}}},
        {"podTemplate": {"spec": {"hostNetwork": True}}},
    ],
)
def test_no_field_of_a_kineticjob_can_ask_for_more_privilege(escape):
    raw = {"container": {"command": ["sh"]}}
    for key, value in escape.items():
        raw[key] = value if key != "container" else value
    result = validate_spec("kj", raw, default_catalog(), storage_root="gs://b", max_disruptions=3)
    assert isinstance(result, InvalidSpec), result
    assert result.message.startswith("spec")


def _random_text(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + "-_/.:=$;&|`'\" \n{}"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))


def _random_spec(rng: random.Random) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if rng.random() < 0.5:
        raw["container"] = {
            "command": [_random_text(rng) or "x" for _ in range(rng.randint(1, 3))],
            "args": [_random_text(rng) for _ in range(rng.randint(0, 3))],
        }
        if rng.random() < 0.5:
            raw["container"]["image"] = _random_text(rng) or "img"
    else:
        upload = "gs://b/namespaces/default/uploads/kj-0123456789abcdef/"
        raw["function"] = {"payloadURI": upload + "payload.pkl", "sha256": SHA}
        if rng.random() < 0.5:
            raw["function"]["inputJSON"] = {_random_text(rng): [_random_text(rng)]}
    raw["accelerator"] = rng.choice(default_catalog().names())
    raw["spot"] = rng.random() < 0.5
    raw["env"] = [
        {
            "name": rng.choice(sorted(RESERVED_ENV) + ["A", "PATH", "LD_PRELOAD"]),
            "value": _random_text(rng),
        }
        for _ in range(rng.randint(0, 4))
    ]
    if rng.random() < 0.5:
        raw["resources"] = {"cpu": rng.choice(["1", "500m"]), "memory": rng.choice(["1Gi", "64Mi"])}
    if rng.random() < 0.5:
        raw["deadlineSeconds"] = rng.randint(1, 10**6)
    if rng.random() < 0.5:
        raw["image"] = _random_text(rng) or "img"
    raw["retries"] = rng.randint(0, 100)
    return raw


@pytest.mark.parametrize("seed", range(300))
def test_every_valid_kineticjob_yields_a_restricted_pod(seed):
    rng = random.Random(seed)
    raw = _random_spec(rng)
    spec = validate_spec(
        "kj", raw, SETTINGS.accelerator_catalog, storage_root="gs://b", max_disruptions=3
    )
    assert isinstance(spec, KineticJobSpec), spec
    attempt = rng.randint(1, 100)
    m = build_job_pod(OWNER, spec, SETTINGS, attempt)
    assert_restricted(m)
    # The runner contract is the operator's alone: each reserved name once, with our value.
    names = [e["name"] for e in main_container(m)["env"]]
    assert all(names.count(n) <= 1 for n in RESERVED_ENV)
    env = env_of(m)
    assert env["KINETIC_ATTEMPT"] == str(attempt) and env["KINETIC_JOB_NAME"] == "kj"
    assert m["metadata"]["name"] == job_pod_name("kj", attempt)
    assert m["metadata"]["labels"]["kinetic.dev/attempt"] == str(attempt)
    assert m["spec"].get("activeDeadlineSeconds") == raw.get("deadlineSeconds")
    assert m["spec"]["restartPolicy"] == "Never"
    assert [o["uid"] for o in m["metadata"]["ownerReferences"]] == ["uid-1"]


def test_another_service_account_comes_only_from_the_operator():
    other = SETTINGS.model_copy(update={"runner_service_account": "sa-from-helm"})
    m = build_job_pod(OWNER, container_spec(), other, 1)
    assert_restricted(m, other)


def test_a_debug_job_tells_its_runner_the_port_and_a_user_cannot():
    spec = function_spec()
    assert "KINETIC_DEBUG_PORT" not in env_of(build_job_pod(OWNER, spec, SETTINGS, 1))
    spec.debug = True
    spec.env = [EnvVar(name="KINETIC_DEBUG_PORT", value="1")]
    env = env_of(build_job_pod(OWNER, spec, SETTINGS, 1))
    assert env["KINETIC_DEBUG_PORT"] == "5678"
    # No port is opened to the network: debugpy listens on the Pod's loopback.
    assert "ports" not in main_container(build_job_pod(OWNER, spec, SETTINGS, 1))


@pytest.mark.parametrize(
    "spec, refused",
    [
        ({"container": {"image": "busybox", "command": ["true"]}, "debug": True}, True),
        ({"container": {"image": "busybox", "command": ["true"]}, "debug": False}, False),
        ({"function": {"payloadURI": PAYLOAD, "sha256": SHA}, "debug": True}, False),
    ],
)
def test_debug_is_for_function_jobs(spec, refused):
    got = validate_spec(
        "kj",
        spec,
        default_catalog(),
        storage_root="gs://kinetic/root",
        max_disruptions=3,
        namespace="ns",
    )
    if refused:
        assert isinstance(got, InvalidSpec) and got.message.startswith("spec.debug: ")
        assert "function jobs" in got.message
    else:
        assert not isinstance(got, InvalidSpec), got
