"""The CRDs in crds/ are generated from the pydantic models and are structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kinetic.model import crdgen

ROOT = Path(__file__).resolve().parents[3]
CRD_DIRS = [ROOT / "crds", ROOT / "helm" / "kinetic" / "crds"]


@pytest.mark.parametrize("folder", CRD_DIRS, ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.parametrize("name,text", sorted(crdgen.rendered().items()))
def test_checked_in_crd_is_current(folder: Path, name: str, text: str) -> None:
    path = folder / name
    assert path.exists(), f"{path} is missing: run `make crds`"
    assert path.read_text() == text, f"{path} is stale: run `make crds` and commit the result"


def _walk(node: dict[str, Any], path: str):
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _schemas():
    for crd in (crdgen.job_crd(), crdgen.batch_crd()):
        kind = crd["spec"]["names"]["kind"]
        yield kind, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("kind,schema", list(_schemas()))
def test_schema_is_structural(kind: str, schema: dict[str, Any]) -> None:
    for path, node in _walk(schema, kind):
        assert "$ref" not in node and "anyOf" not in node, path
        assert (
            "type" in node
            or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")  # chunkSize: a number, or auto
        ), f"{path} has no type"
        for flag in ("exclusiveMinimum", "exclusiveMaximum"):  # OpenAPI v3: a flag, not a bound
            assert isinstance(node.get(flag, False), bool), f"{path}.{flag} is not true/false"


@pytest.mark.parametrize("kind,schema", list(_schemas()))
def test_every_field_is_documented(kind: str, schema: dict[str, Any]) -> None:
    for section in ("spec", "status"):
        for path, node in _walk(schema["properties"][section], f"{kind}.{section}"):
            if path.endswith("[]") or path.endswith("{}"):
                continue  # list items and map values are described by their parent
            assert node.get("description"), f"{path} has no description (kubectl explain shows it)"


def test_printer_columns_and_names() -> None:
    job, batch = crdgen.job_crd(), crdgen.batch_crd()
    assert job["spec"]["names"]["shortNames"] == ["kj"]
    assert batch["spec"]["names"]["shortNames"] == ["kb"]
    for crd in (job, batch):
        version = crd["spec"]["versions"][0]
        assert crd["spec"]["names"]["categories"] == ["kinetic"]
        assert version["subresources"] == {"status": {}}
    job_cols = [c["name"] for c in job["spec"]["versions"][0]["additionalPrinterColumns"]]
    batch_cols = [c["name"] for c in batch["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert job_cols[:3] == ["Phase", "Attempt", "Accelerator"] and job_cols[-1] == "Age"
    assert batch_cols[:4] == ["Phase", "Succeeded", "Running", "Failed"] and batch_cols[-1] == "Age"


def test_max_concurrent_is_nullable_with_a_floor() -> None:
    spec = crdgen.batch_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    field = spec["properties"]["spec"]["properties"]["maxConcurrent"]
    assert field == {**field, "type": "integer", "minimum": 1, "nullable": True, "default": 64}


def test_yaml_parses_back() -> None:
    for text in crdgen.rendered().values():
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"
