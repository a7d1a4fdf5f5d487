"""Generate the CRDs in `crds/` from the pydantic models in `kinetic.model.resources`.

Kubernetes wants a *structural* OpenAPI v3 schema: every node typed, no
`$ref`, `nullable` instead of `anyOf [X, null]`, and arbitrary JSON marked
with `x-kubernetes-preserve-unknown-fields`. Pydantic emits JSON Schema, so
this module translates one into the other. Run `python -m kinetic.model.crdgen crds`
(or `make crds`, which also fills the Helm chart's crds/) after changing a
model; a test fails while the YAML is stale.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from kinetic.model import resources as r

# JSON Schema keywords that carry over to OpenAPI v3 unchanged.
_KEPT = (
    "description",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "default",
    "format",
)


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's schema, inlined and made structural."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return _convert(raw, defs)


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One JSON Schema node as a structural OpenAPI node: refs inlined, unions resolved,
    every node typed (or marked free-form), its children converted the same way."""
    if "$ref" in node:
        return _convert(_inline_ref(node, defs), defs)
    if node.get("anyOf") is not None:
        return _convert_union(node, defs)
    node = _const_as_enum(node)
    kind = _node_type(node)
    if kind is None:
        return _free_form(node, nullable=False)
    out: dict[str, Any] = {"type": kind, **_kept_keywords(node)}
    if kind == "object":
        out |= _object_members(node, defs)
    elif kind == "array":
        out["items"] = _convert(node.get("items", {}), defs)
    return out


def _inline_ref(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The referenced definition, with the referring node's own keywords on top."""
    target = defs[node["$ref"].rsplit("/", 1)[-1]]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _convert_union(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``anyOf``: one real branch (plus null) is that branch; more is free-form JSON."""
    any_of = node["anyOf"]
    branches = [b for b in any_of if b.get("type") != "null"]
    # `X | None = None` only means "optional"; null is a real value only
    # where the default is something else (maxConcurrent: null = unlimited).
    nullable = len(branches) < len(any_of) and node.get("default") is not None
    if {_node_type(b) for b in branches} == {"integer", "string"} and len(branches) == 2:
        return _int_or_string(node, nullable)
    if len(branches) != 1:
        return _free_form(node, nullable)
    inner = {**node, **branches[0]}
    inner.pop("anyOf")
    single = _convert(inner, defs)
    if nullable:
        single["nullable"] = True
    return single


def _const_as_enum(node: dict[str, Any]) -> dict[str, Any]:
    """``const: x`` as ``enum: [x]``, which structural schemas know."""
    if "const" not in node:
        return node
    node = {**node, "enum": [node["const"]]}
    node.pop("const")
    return node


def _node_type(node: dict[str, Any]) -> str | None:
    """The node's type, or its enum's; None means any JSON value."""
    kind = node.get("type")
    if kind is None and "enum" in node:
        return _enum_type(node["enum"])
    return kind


def _kept_keywords(node: dict[str, Any]) -> dict[str, Any]:
    """The keywords OpenAPI v3 takes as they are, in `_KEPT`'s order."""
    kept: dict[str, Any] = {}
    for key in _KEPT:
        # An empty-string default is read back as null by 1.20's validation: leave it out.
        if key in node and not (key == "default" and node[key] in (None, "")):
            kept[key] = copy.deepcopy(node[key])  # shared lists would become YAML anchors
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if not isinstance(kept.get(exclusive), bool) and exclusive in kept:
            kept[bound] = kept[exclusive]  # JSON Schema's number is OpenAPI v3's flag
            kept[exclusive] = True
    return kept


def _object_members(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """An object's properties and extra keys, converted; with neither, any fields at all."""
    members: dict[str, Any] = {}
    props = node.get("properties")
    if props is not None:
        members["properties"] = {name: _convert(sub, defs) for name, sub in props.items()}
        if node.get("additionalProperties") not in (None, False):
            members["additionalProperties"] = _convert(node["additionalProperties"], defs)
    elif isinstance(node.get("additionalProperties"), dict):
        members["additionalProperties"] = _convert(node["additionalProperties"], defs)
    else:
        members["x-kubernetes-preserve-unknown-fields"] = True
    if "oneOf" in node:
        members["oneOf"] = copy.deepcopy(node["oneOf"])
    return members


def _int_or_string(node: dict[str, Any], nullable: bool) -> dict[str, Any]:
    """A number or a word (``chunkSize: 16`` or ``auto``): the API server checks that it is
    one of the two; its bounds and words are the webhook's and the operator's to judge."""
    out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
    if "description" in node:
        out["description"] = node["description"]
    if nullable:
        out["nullable"] = True
    return out


def _free_form(node: dict[str, Any], nullable: bool) -> dict[str, Any]:
    """Any JSON value: what Kubernetes calls preserved unknown fields."""
    out: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
    if "description" in node:
        out["description"] = node["description"]
    if nullable:
        out["nullable"] = True
    return out


def _enum_type(values: list[Any]) -> str:
    if all(isinstance(v, str) for v in values):
        return "string"
    if all(isinstance(v, int) for v in values):
        return "integer"
    raise ValueError(f"mixed-type enum {values!r} cannot be expressed in a CRD")


def _resource_schema(spec: type[BaseModel], status: type[BaseModel], doc: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": doc,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural_schema(spec),
            "status": structural_schema(status),
        },
    }


def _crd(
    kind: str,
    plural: str,
    short: str,
    schema: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{r.GROUP}"},
        "spec": {
            "group": r.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["kinetic"],
            },
            "versions": [
                {
                    "name": r.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _column(name: str, path: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        col["priority"] = priority
    return col


AGE = _column("Age", ".metadata.creationTimestamp", "date")


def job_crd() -> dict[str, Any]:
    schema = _resource_schema(
        r.KineticJobSpec,
        r.KineticJobStatus,
        "One remote call: a pickled Python function or a container command, "
        "run as one batch/v1 Job per attempt.",
    )
    columns = [
        _column("Phase", ".status.phase"),
        _column("Attempt", ".status.attempt", "integer"),
        _column("Accelerator", ".spec.accelerator"),
        _column("Message", ".status.message", priority=1),
        AGE,
    ]
    return _crd(r.JOB_KIND, r.JOB_PLURAL, "kj", schema, columns)


def batch_crd() -> dict[str, Any]:
    schema = _resource_schema(
        r.KineticBatchSpec,
        r.KineticBatchStatus,
        "A fan-out of one function or command over many inputs, with concurrency, "
        "retries and fail-fast handled by the operator.",
    )
    columns = [
        _column("Phase", ".status.phase"),
        _column("Succeeded", ".status.progress"),
        _column("Running", ".status.counts.running", "integer"),
        _column("Failed", ".status.counts.failed", "integer"),
        _column("Name", ".spec.name", priority=1),
        AGE,
    ]
    return _crd(r.BATCH_KIND, r.BATCH_PLURAL, "kb", schema, columns)


def rendered() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    header = "# Generated by `make crds` from client/kinetic/model/resources.py. Do not edit.\n"
    return {
        f"{crd['spec']['names']['plural']}.yaml": header
        + yaml.safe_dump(crd, sort_keys=False, width=100)
        for crd in (job_crd(), batch_crd())
    }


def main(argv: list[str]) -> int:
    """Write the CRDs into every folder named (crds/ and the Helm chart's crds/)."""
    for folder in argv or ["crds"]:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in rendered().items():
            (out / name).write_text(text)
            print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
