"""The Pod of one attempt of one unit of a KineticBatch (one input, or a chunk of them)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from kinetic.model import layout
from kinetic.model.names import input_pod_name
from kinetic.model.resources import KineticBatchSpec
from kinetic_operator.logic.batch_pods import build_unit_pod, log_uri
from kinetic_operator.logic.errors import UnitRefused
from kinetic_operator.logic.podspec import RESERVED_ENV
from kinetic_operator.settings import OperatorSettings
from kinetic_testing.pod_manifests import assert_restricted, env_of, main_container

SHA = "ab" * 32
ROOT = "gs://kinetic/root"
HOME = layout.batch_home(ROOT, "ns", "grp-1a2b3c4d", "uid-9")
GRP = "grp-1a2b3c4d"
SETTINGS = OperatorSettings(
    storage_root=ROOT,
    default_image="runner:1",
    runner_service_account="kinetic-runner",
    runner_command=["python", "-m", "kinetic.runtime.runner"],
)
HASHES = [f"{i:02x}" * 32 for i in range(10)]


def function_batch(inputs: dict[str, Any] | None = None, **extra: Any) -> KineticBatchSpec:
    template = extra.pop("template", {})
    return KineticBatchSpec.model_validate(
        {
            "template": {
                "function": {
                    "payloadURI": f"{ROOT}/batches/{GRP}/function.pkl",
                    "sha256": SHA,
                    **template.pop("function", {}),
                },
                **template,
            },
            "inputs": inputs or {"count": 10, "uriPrefix": f"{ROOT}/batches/{GRP}/inputs"},
            **extra,
        }
    )


def container_batch(items: list[Any], **template: Any) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {
                "container": {"command": ["train"], "args": ["--lr", "$(KINETIC_PARAM_LR)"]}
            }
            | template,
            "inputs": {"items": items},
        }
    )


def build(spec: KineticBatchSpec, unit: int, attempt: int = 1, hashes=HASHES) -> dict[str, Any]:
    return build_unit_pod(GRP, "ns", "uid-9", spec, SETTINGS, unit, attempt, hashes)


def test_one_function_input_per_pod():
    spec = function_batch(inputMode="args", retries=2)
    m = build(spec, 3, 2)
    assert m["kind"] == "Pod" and m["metadata"]["name"] == input_pod_name(GRP, 3, 2)
    assert m["metadata"]["namespace"] == "ns"
    assert m["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kinetic",
        "kinetic.dev/batch": GRP,
        "kinetic.dev/index": "3",
        "kinetic.dev/attempt": "2",
    }
    assert m["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticBatch",
            "name": GRP,
            "uid": "uid-9",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert m["spec"]["restartPolicy"] == "Never"
    assert main_container(m)["command"] == ["python", "-m", "kinetic.runtime.runner"]
    assert env_of(m) == {
        "KINETIC_JOB_NAME": f"{GRP}-3",
        "KINETIC_JOB_NAMESPACE": "ns",
        "KINETIC_ATTEMPT": "2",
        "KINETIC_INDEX": "3",
        "KINETIC_OUTPUT_DIR": f"{ROOT}/namespaces/ns/outputs/{GRP}/uid-9/3",
        "KINETIC_PAYLOAD_URI": f"{ROOT}/batches/{GRP}/function.pkl",
        "KINETIC_PAYLOAD_SHA256": SHA,
        "KINETIC_RESULT_URI": HOME.input_result_uri(3),
        "KINETIC_INPUT_URI": f"{ROOT}/batches/{GRP}/inputs/3.pkl",
        "KINETIC_INPUT_SHA256": HASHES[3],
        "KINETIC_INPUT_MODE": "args",
        # where the runner archives the end of its own log (the kubelet's may be rotated away)
        "KINETIC_LOG_URI": f"{ROOT}/namespaces/ns/batches/{GRP}/uid-9/logs/{GRP}-i3-2.log",
        "KINETIC_LOG_LIMIT": str(SETTINGS.log_archive_bytes),
    }
    assert_restricted(m, SETTINGS)


def test_inline_inputs_go_in_as_json():
    spec = function_batch({"grid": {"lr": [0.1, 0.01], "bs": [8]}})
    env = env_of(build(spec, 1, hashes=None))
    assert json.loads(env["KINETIC_INPUT_JSON"]) == {"bs": 8, "lr": 0.01}
    assert "KINETIC_INPUT_URI" not in env and "KINETIC_INPUT_SHA256" not in env
    env = env_of(build(function_batch({"items": [None]}), 0, hashes=None))
    assert env["KINETIC_INPUT_JSON"] == "null"  # a null input is still an input


def test_without_a_hash_list_there_is_no_input_hash():
    spec = function_batch()
    assert "KINETIC_INPUT_SHA256" not in env_of(build(spec, 0, hashes=None))


def test_an_input_without_a_hash_cannot_get_a_pod():
    hashes = list(HASHES)
    hashes[4] = None
    with pytest.raises(UnitRefused, match="input 4 has no entry in the input hash list"):
        build(function_batch(), 4, hashes=hashes)


def test_a_container_input_arrives_in_its_environment():
    spec = container_batch([{"lr": 0.1}, {"lr": "1e-3", "opt": "adam"}], deadlineSeconds=60)
    m = build(spec, 1)
    env = env_of(m)
    assert env["KINETIC_INDEX"] == "1"
    assert json.loads(env["KINETIC_INPUT"]) == {"lr": "1e-3", "opt": "adam"}
    assert env["KINETIC_PARAM_LR"] == "1e-3" and env["KINETIC_PARAM_OPT"] == "adam"
    assert env["KINETIC_OUTPUT_DIR"] == f"{ROOT}/namespaces/ns/outputs/{GRP}/uid-9/1"
    assert not any(
        k.startswith(("KINETIC_PAYLOAD", "KINETIC_RESULT", "KINETIC_CHUNK")) for k in env
    )
    c = main_container(m)
    assert c["command"] == ["train"] and c["args"] == ["--lr", "$(KINETIC_PARAM_LR)"]
    assert c["image"] == "runner:1"
    assert m["spec"]["activeDeadlineSeconds"] == 60
    assert [e["name"] for e in c["env"]].count("KINETIC_INDEX") == 1
    assert_restricted(m, SETTINGS)


def test_a_chunk_runs_consecutive_inputs_in_one_pod():
    spec = function_batch(chunkSize=4, inputMode="kwargs")
    m = build(spec, 4, 3)
    assert m["metadata"]["name"] == input_pod_name(GRP, 4, 3)
    labels = m["metadata"]["labels"]
    assert (labels["kinetic.dev/index"], labels["kinetic.dev/chunk"]) == ("4", "4")
    env = env_of(m)
    assert json.loads(env["KINETIC_CHUNK"]) == [
        {
            "index": i,
            "resultURI": HOME.input_result_uri(i),
            "outputDir": f"{ROOT}/namespaces/ns/outputs/{GRP}/uid-9/{i}",
            "inputURI": f"{ROOT}/batches/{GRP}/inputs/{i}.pkl",
            "inputSHA256": HASHES[i],
        }
        for i in range(4, 8)
    ]
    assert env["KINETIC_CHUNK"] == json.dumps(
        json.loads(env["KINETIC_CHUNK"]), separators=(",", ":")
    )
    assert env["KINETIC_PAYLOAD_URI"] == f"{ROOT}/batches/{GRP}/function.pkl"
    assert env["KINETIC_PAYLOAD_SHA256"] == SHA and env["KINETIC_INPUT_MODE"] == "kwargs"
    # The chunk's per-input result hashes go to a report in the batch's own prefix.
    assert env["KINETIC_REPORT_URI"] == HOME.report_uri(input_pod_name(GRP, 4, 3))
    for single in (
        "KINETIC_RESULT_URI",
        "KINETIC_INPUT_URI",
        "KINETIC_INPUT_SHA256",
        "KINETIC_INPUT_JSON",
    ):
        assert single not in env
    assert_restricted(m, SETTINGS)


def test_the_last_chunk_may_be_shorter():
    spec = function_batch({"items": ["a", "b", "c", "d", "e"]}, chunkSize=2)
    m = build(spec, 4, hashes=None)
    assert "kinetic.dev/chunk" not in m["metadata"]["labels"]  # one input: an ordinary Pod
    assert json.loads(env_of(m)["KINETIC_INPUT_JSON"]) == "e"
    m = build(spec, 2, hashes=None)
    assert m["metadata"]["labels"]["kinetic.dev/chunk"] == "2"
    entries = json.loads(env_of(m)["KINETIC_CHUNK"])
    assert [(e["index"], e["inputJSON"]) for e in entries] == [(2, "c"), (3, "d")]


def test_a_chunk_pod_never_carries_single_input_variables_from_the_template():
    """The runner refuses KINETIC_CHUNK next to KINETIC_RESULT_URI or KINETIC_INPUT_*: a
    template that names a resultURI or an input (legal in YAML) must not leak them."""
    spec = function_batch(
        {"items": [1, 2, 3, 4]},
        chunkSize=2,
        template={"function": {"resultURI": "gs://x/r.pkl", "inputJSON": 5}},
    )
    env = env_of(build(spec, 0, hashes=None))
    assert "KINETIC_CHUNK" in env
    assert "KINETIC_RESULT_URI" not in env and "KINETIC_INPUT_JSON" not in env


def test_template_env_cannot_override_the_contract():
    spec = function_batch(
        template={
            "env": [
                {"name": "A", "value": "1"},
                {"name": "KINETIC_RESULT_URI", "value": "gs://evil/x"},
                {"name": "KINETIC_CHUNK", "value": "[]"},
            ]
        }
    )
    m = build(spec, 2)
    names = [e["name"] for e in main_container(m)["env"]]
    assert names[0] == "A" and names.count("KINETIC_RESULT_URI") == 1
    assert "KINETIC_CHUNK" not in names
    assert env_of(m)["KINETIC_RESULT_URI"] == HOME.input_result_uri(2)


def test_accelerators_and_template_output_dir():
    spec = function_batch(
        template={"accelerator": "gpu-l4", "spot": True, "outputDir": "gs://o/run/"}
    )
    m = build(spec, 7)
    assert env_of(m)["KINETIC_OUTPUT_DIR"] == "gs://o/run/7"
    assert m["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert main_container(m)["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_logs_are_archived_beside_the_batch():
    pod = f"{GRP}-3-1"
    assert log_uri(HOME, pod) == f"{ROOT}/namespaces/ns/batches/{GRP}/uid-9/logs/{pod}.log"


def _random_batch(rng: random.Random) -> tuple[KineticBatchSpec, list[str] | None]:
    text = lambda: "".join(rng.choice("ab$;&|`'\\\" \n{}") for _ in range(rng.randint(0, 8)))  # noqa: E731
    template: dict[str, Any] = {
        "accelerator": rng.choice(SETTINGS.accelerator_catalog.names()),
        "spot": rng.random() < 0.5,
        "env": [
            {"name": rng.choice(sorted(RESERVED_ENV) + ["A", "KINETIC_INDEX"]), "value": text()}
            for _ in range(rng.randint(0, 4))
        ],
    }
    if rng.random() < 0.5:
        template["deadlineSeconds"] = rng.randint(1, 10**6)
    if rng.random() < 0.5:
        template["resources"] = {"cpu": "1", "memory": "1Gi"}
    hashes = None
    if rng.random() < 0.5:
        template["container"] = {"command": [text() or "x"], "args": [text()]}
        inputs: dict[str, Any] = {"items": [{text() or "k": text()} for _ in range(10)]}
        extra: dict[str, Any] = {}
    else:
        template["function"] = {"payloadURI": "gs://b/f.pkl", "sha256": SHA}
        if rng.random() < 0.5:
            inputs = {"count": 10, "uriPrefix": "gs://b/in"}
            hashes = HASHES
        else:
            inputs = {"items": [text() for _ in range(10)]}
        extra = {"chunkSize": rng.randint(1, 4)}
    spec = KineticBatchSpec.model_validate({"template": template, "inputs": inputs, **extra})
    return spec, hashes


@pytest.mark.parametrize("seed", range(200))
def test_every_unit_pod_is_restricted(seed):
    rng = random.Random(seed)
    spec, hashes = _random_batch(rng)
    unit = rng.randrange(10) // spec.chunk_size * spec.chunk_size
    attempt = rng.randint(1, 20)
    m = build(spec, unit, attempt, hashes=hashes)
    assert_restricted(m, SETTINGS)
    assert m["metadata"]["name"] == input_pod_name(GRP, unit, attempt)
    assert m["metadata"]["labels"]["kinetic.dev/index"] == str(unit)
    assert m["spec"].get("activeDeadlineSeconds") == spec.template.deadline_seconds
    names = [e["name"] for e in main_container(m)["env"]]
    assert all(names.count(n) <= 1 for n in RESERVED_ENV)
    env = env_of(m)  # for a repeated name the last one wins, as in Kubernetes
    assert env["KINETIC_ATTEMPT"] == str(attempt)
    chunked = min(spec.chunk_size, 10 - unit) > 1
    assert ("KINETIC_CHUNK" in env) == chunked
    if not chunked:
        assert env["KINETIC_INDEX"] == str(unit)


@pytest.mark.parametrize(
    ("extra", "fails_fast"),
    [
        ({"failFast": True}, True),  # every failure is final: the unit stops on it at once
        ({"failFast": True, "retries": 1}, False),  # a failure may be retried: the operator decides
        ({}, False),
    ],
)
def test_a_sized_unit_stops_on_its_own_failure_only_when_it_is_final(
    extra: dict[str, Any], fails_fast: bool
) -> None:
    from kinetic_operator.logic.batch_pods import SizedUnit

    spec = function_batch(chunkSize="auto", **extra)
    pod = build_unit_pod(GRP, "ns", "uid-9", spec, SETTINGS, 4, 1, HASHES,
                         sized=SizedUnit(size=3, inputs=(4, 5, 6)))  # fmt: skip
    env = env_of(pod)
    assert env["KINETIC_STOP_URI"] == HOME.stop_uri
    assert (env.get("KINETIC_FAIL_FAST") == "1") is fails_fast
    assert [e["index"] for e in json.loads(env["KINETIC_CHUNK"])] == [4, 5, 6]
