"""The API server itself rejects malformed resources, naming the field, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube_helpers import Kube

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "crds"


@pytest.fixture(scope="module")
def crds(kube: Kube) -> None:
    kube.kubectl("apply", "-f", str(CRDS))
    for plural in ("kineticjobs", "kineticbatches"):
        kube.kubectl("wait", "--for=condition=Established", f"crd/{plural}.kinetic.dev")


def _batch(**spec_overrides) -> dict:
    spec = {
        "template": {"container": {"command": ["true"]}},
        "inputs": {"items": [1, 2, 3]},
        **spec_overrides,
    }
    return {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {"name": "grp-0badc0de"},
        "spec": spec,
    }


def _apply(kube: Kube, namespace: str, tmp_path: Path, body: dict):
    manifest = tmp_path / "resource.yaml"
    manifest.write_text(yaml.safe_dump(body))
    return kube.kubectl("apply", "-n", namespace, "-f", str(manifest), check=False)


@pytest.mark.parametrize(
    "override,field,hint",
    [
        ({"maxConcurrent": 0}, "spec.maxConcurrent", "greater than or equal to 1"),
        ({"inputMode": "spread"}, "spec.inputMode", "supported values"),
        ({"retries": -1}, "spec.retries", "greater than or equal to 0"),
    ],
)
def test_invalid_batch_is_rejected_naming_the_field(
    kube: Kube, crds: None, namespace: str, tmp_path: Path, override: dict, field: str, hint: str
) -> None:
    result = _apply(kube, namespace, tmp_path, _batch(**override))
    assert result.returncode != 0
    assert field in result.stderr and hint in result.stderr, result.stderr
    listed = kube.kubectl("get", "kineticbatches", "-n", namespace, "-o", "name")
    assert listed.stdout.strip() == "", "a rejected batch must not be stored"


def test_invalid_job_is_rejected_naming_the_field(
    kube: Kube, crds: None, namespace: str, tmp_path: Path
) -> None:
    body = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "bad-accelerator"},
        "spec": {"container": {"command": ["true"]}, "accelerator": "quantum-9000"},
    }
    result = _apply(kube, namespace, tmp_path, body)
    assert result.returncode != 0
    assert "spec.accelerator" in result.stderr, result.stderr


def test_valid_batch_is_accepted_with_defaults(
    kube: Kube, crds: None, namespace: str, tmp_path: Path
) -> None:
    body = _batch()
    body["spec"]["inputs"] = {"grid": {"lr": [0.1, 0.01], "bs": [32]}}
    assert _apply(kube, namespace, tmp_path, body).returncode == 0
    stored = yaml.safe_load(
        kube.kubectl("get", "kb", "grp-0badc0de", "-n", namespace, "-o", "yaml").stdout
    )
    assert stored["spec"]["maxConcurrent"] == 64
    assert stored["spec"]["inputMode"] == "auto"
    assert stored["spec"]["inputs"]["grid"] == {"lr": [0.1, 0.01], "bs": [32]}


def test_kubectl_explain_documents_fields(kube: Kube, crds: None) -> None:
    out = kube.kubectl("explain", "kineticbatch.spec.maxConcurrent").stdout
    assert "null starts every input at once" in out
