"""Reading the Pod manifests the operator builds, and the restrictions every one must keep."""

from __future__ import annotations

from typing import Any

from kinetic_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(
    storage_root="gs://kinetic/root",
    default_image="runner:1",
    runner_image="kinetic-runner:7",
    runner_pythons=["3.12", "3.11"],
    runner_service_account="kinetic-runner",
    runner_command=["python", "-m", "kinetic.runtime.runner"],
)


def env_of(manifest: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in main_container(manifest)["env"]}


def main_container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["spec"]["containers"]
    return container


def assert_restricted(m: dict[str, Any], settings: OperatorSettings = SETTINGS) -> None:
    assert m["kind"] == "Pod"
    pod = m["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["serviceAccountName"] == settings.runner_service_account
    assert pod["automountServiceAccountToken"] is False
    for forbidden in (
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "volumes",
        "serviceAccount",
        "initContainers",
        "ephemeralContainers",
        "hostAliases",
        "nodeName",
    ):
        assert forbidden not in pod
    for c in pod["containers"]:
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": False,
        }
        for forbidden in ("volumeMounts", "volumeDevices", "ports", "envFrom"):
            assert forbidden not in c
        assert all(set(e) == {"name", "value"} for e in c["env"])
    assert len(pod["containers"]) == 1
