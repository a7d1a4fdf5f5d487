"""KineticJob and KineticBatch bodies as the API server stores them, and the operator's
settings the unit tests of its reconcile run with (storage under ``tmp_path``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kinetic.model.names import input_pod_name
from kinetic_operator.settings import OperatorSettings


def job_body(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "kj", "namespace": "ns", "uid": "u", "generation": 1, **meta},
        "spec": spec,
    }


SPEC = {"container": {"command": ["true"]}}


GRP = "grp-0a1b2c3d"
SHA = "a" * 64


def container_batch(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "template": {"container": {"command": ["echo"]}},
        "inputs": {"items": list(range(n))},
        **extra,
    }


def batch_body(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {
            "name": GRP,
            "namespace": "ns",
            "uid": "b-uid",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            **meta,
        },
        "spec": spec,
    }


def pod_name(index: int, attempt: int = 1) -> str:
    return input_pod_name(GRP, index, attempt)


def job_settings(tmp_path: Path) -> OperatorSettings:
    return OperatorSettings(
        storage_root=f"file://{tmp_path}/store", default_image="img:1", pod_ttl_seconds=120
    )


def batch_settings(tmp_path: Path) -> OperatorSettings:
    return OperatorSettings(
        storage_root=f"file://{tmp_path}/store",
        default_image="img:1",
        pod_ttl_seconds=120,
        status_interval=0,
    )
