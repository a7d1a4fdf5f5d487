"""The accelerator catalog: what `spec.accelerator` means on the cluster.

A KineticJob names an accelerator (`cpu`, `gpu-a100x8`, `tpu-v5e-4`); the
catalog turns that name into extended resources, node selectors and
tolerations. The operator's configuration may extend the built-in catalog
(so a cluster admin can change node labels without touching users) and
publishes the names it accepts; the client uses this module to turn the
spellings users know (`v5litepod-4`, `l4`, `a100x4`, `tpu-v3-8`) into the
canonical name, and to refuse an unknown name, with the close matches,
before anything is uploaded. Both sides import this one module.

The built-in default follows GKE's conventions (`cloud.google.com/gke-accelerator`,
`cloud.google.com/gke-tpu-accelerator`, `cloud.google.com/gke-tpu-topology`,
`cloud.google.com/gke-spot`). A TPU entry is a slice of one or more hosts
(TPU VMs): one pod per host gets all the chips of its host, so a multi-host
slice such as `tpu-v5e-16` (4 hosts x 4 chips) runs as a gang of pods
(`kinetic.model.gang`). GKE's size suffix counts chips for v5e and v6e, and
TensorCores (two per chip) for v3, v4 and v5p: `tpu-v4-8` is 4 chips.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
GPU_NODE_LABEL = "cloud.google.com/gke-accelerator"
TPU_NODE_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
SPOT_NODE_LABEL = "cloud.google.com/gke-spot"

GPU_NAME = re.compile(r"^gpu-(?P<type>[a-z0-9]+?)(?:x(?P<count>[0-9]+))?$")


class GpuType(BaseModel):
    """One GPU model: the node label value that selects it and the counts a node offers."""

    model_config = ConfigDict(extra="forbid")

    node_label: str = Field(description="Value of the node's accelerator label, e.g. nvidia-l4.")
    counts: list[int] = Field(default=[1], description="GPU counts one pod may ask for.")


class TpuSlice(BaseModel):
    """One TPU slice: its node labels, its hosts, and how many chips each host's pod gets.

    `chips` is per pod, not per slice, because that is what one pod asks the
    node for; the slice's chips are `chips * hosts`. `hosts` defaults to 1 so
    that catalogs written before multi-host slices existed keep their meaning.
    """

    model_config = ConfigDict(extra="forbid")

    node_label: str = Field(description="Value of the node's TPU accelerator label.")
    topology: str = Field(description="Value of the node's TPU topology label, e.g. 2x2.")
    chips: int = Field(ge=1, description="google.com/tpu chips requested by each host's pod.")
    hosts: int = Field(default=1, ge=1, description="TPU VMs in the slice: one pod on each.")


class Catalog(BaseModel):
    """Every accelerator the operator accepts, besides `cpu`.

    `gpus` is keyed by GPU type (`gpu-<type>` or `gpu-<type>x<count>`);
    `tpus` by the full accelerator name (`tpu-v5e-4`).
    """

    model_config = ConfigDict(extra="forbid")

    gpus: dict[str, GpuType] = Field(default_factory=dict)
    tpus: dict[str, TpuSlice] = Field(default_factory=dict)
    gpu_resource: str = GPU_RESOURCE
    tpu_resource: str = TPU_RESOURCE
    gpu_node_label: str = GPU_NODE_LABEL
    tpu_node_label: str = TPU_NODE_LABEL
    tpu_topology_label: str = TPU_TOPOLOGY_LABEL
    spot_node_label: str = SPOT_NODE_LABEL

    def names(self) -> list[str]:
        """Every accelerator name this catalog accepts, for error messages and the ConfigMap."""
        names = ["cpu"]
        for kind, gpu in sorted(self.gpus.items()):
            names += [f"gpu-{kind}" if n == 1 else f"gpu-{kind}x{n}" for n in sorted(gpu.counts)]
        names += sorted(self.tpus, key=_natural)
        return names


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def default_catalog() -> Catalog:
    """GKE's GPU offerings and TPU slices, as of 2025.

    The multi-host slices are the smallest few of each generation: enough for
    the gang to be used and tested; a cluster admin adds larger ones through
    the operator's catalog setting, with the same fields.
    """
    return Catalog(
        gpus={
            "l4": GpuType(node_label="nvidia-l4", counts=[1, 2, 4, 8]),
            "t4": GpuType(node_label="nvidia-tesla-t4", counts=[1, 2, 4]),
            "a100": GpuType(node_label="nvidia-tesla-a100", counts=[1, 2, 4, 8, 16]),
            "h100": GpuType(node_label="nvidia-h100-80gb", counts=[1, 2, 4, 8]),
        },
        tpus={
            "tpu-v3-8": TpuSlice(node_label="tpu-v3-device", topology="2x2", chips=4),
            "tpu-v4-8": TpuSlice(node_label="tpu-v4-podslice", topology="2x2x1", chips=4),
            "tpu-v4-16": _multi("tpu-v4-podslice", "2x2x2", hosts=2),
            "tpu-v4-32": _multi("tpu-v4-podslice", "2x2x4", hosts=4),
            "tpu-v5e-1": TpuSlice(node_label="tpu-v5-lite-podslice", topology="1x1", chips=1),
            "tpu-v5e-4": TpuSlice(node_label="tpu-v5-lite-podslice", topology="2x2", chips=4),
            "tpu-v5e-8": TpuSlice(node_label="tpu-v5-lite-podslice", topology="2x4", chips=8),
            "tpu-v5e-16": _multi("tpu-v5-lite-podslice", "4x4", hosts=4),
            "tpu-v5e-32": _multi("tpu-v5-lite-podslice", "4x8", hosts=8),
            "tpu-v6e-1": TpuSlice(node_label="tpu-v6e-slice", topology="1x1", chips=1),
            "tpu-v6e-4": TpuSlice(node_label="tpu-v6e-slice", topology="2x2", chips=4),
            "tpu-v6e-8": TpuSlice(node_label="tpu-v6e-slice", topology="2x4", chips=8),
            "tpu-v6e-16": _multi("tpu-v6e-slice", "4x4", hosts=4),
            # v5p names count TensorCores: v5p-8 is one host with 4 chips.
            "tpu-v5p-8": TpuSlice(node_label="tpu-v5p-slice", topology="2x2x1", chips=4),
            "tpu-v5p-16": _multi("tpu-v5p-slice", "2x2x2", hosts=2),
        },
    )


def _multi(node_label: str, topology: str, hosts: int) -> TpuSlice:
    """A multi-host slice: GKE's multi-host node pools give each TPU VM 4 chips."""
    return TpuSlice(node_label=node_label, topology=topology, chips=4, hosts=hosts)


class UnknownAccelerator(ValueError):
    """`spec.accelerator` names something the catalog does not offer."""


# Spellings of TPU names in the wild: v5litepod-4 (Cloud TPU), v5e-8, tpu-v3-8.
_TPU_ALIAS = re.compile(r"^(?:tpu-?)?(?P<gen>v[0-9]+)(?P<kind>litepod|lite|e|p)?-(?P<size>[0-9]+)$")
# GPUs: gpu-l4, l4, a100x4, gpu-a100x1 (= gpu-a100).
_GPU_ALIAS = re.compile(r"^(?:gpu-)?(?P<type>[a-z][a-z0-9]*?)(?:x(?P<count>[0-9]+))?$")
_TPU_KIND = {"litepod": "e", "lite": "e", "e": "e", "p": "p", None: ""}


def canonical_name(name: str) -> str:
    """The catalog's spelling of an accelerator name; a name it cannot read comes back as is.

    Pure spelling, no catalog lookup: `v5litepod-4` and `tpu-v5litepod-4` are
    `tpu-v5e-4`, `v3-8` is `tpu-v3-8`, `l4` is `gpu-l4`, `a100x4` is
    `gpu-a100x4`, `gpu-l4x1` is `gpu-l4`. Whether the result exists is
    `check_name`'s question.
    """
    text = name.strip().lower()
    if text == "cpu":
        return text
    if m := _TPU_ALIAS.match(text):
        return f"tpu-{m['gen']}{_TPU_KIND[m['kind']]}-{int(m['size'])}"
    if m := _GPU_ALIAS.match(text):
        count = int(m["count"]) if m["count"] else 1
        return f"gpu-{m['type']}" if count == 1 else f"gpu-{m['type']}x{count}"
    return name


def close_matches(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names nearest to `name` (as typed and as canonically spelled), best first."""
    choices = list(known)
    found: list[str] = []
    for candidate in (canonical_name(name), name.strip().lower()):
        for match in difflib.get_close_matches(candidate, choices, n=n, cutoff=0.6):
            if match not in found:
                found.append(match)
    return found[:n]


def check_name(name: str, known: Iterable[str], field: str = "accelerator") -> str:
    """The canonical name of `name` if `known` (a catalog's `names()`) has it; else refuse.

    The message names the field, what was given, the close matches and every
    known name, so the user can fix the call before anything is uploaded.
    """
    known = list(known)
    canonical = canonical_name(name)
    if canonical in known:
        return canonical
    near = close_matches(name, known)
    hint = f"did you mean {' or '.join(repr(m) for m in near)}? " if near else ""
    raise UnknownAccelerator(
        f"{field}: unknown accelerator {name!r}; {hint}known accelerators: {', '.join(known)}"
    )


def device_count(catalog: Catalog, accelerator: str) -> int:
    """GPUs or TPU chips one pod of `accelerator` gets (0 for cpu); UnknownAccelerator if none."""
    placement = _accelerator(catalog, accelerator)
    return sum(int(v) for v in placement.limits.values())


def hosts_of(catalog: Catalog, accelerator: str) -> int:
    """Hosts (pods) one job of `accelerator` needs: a TPU slice's hosts, else 1.

    A GPU or cpu job may still ask for several hosts (`spec.hosts`); this is
    the count the accelerator itself imposes. UnknownAccelerator if unknown.
    """
    name = canonical_name(accelerator)
    if (tpu := catalog.tpus.get(name)) is not None:
        return tpu.hosts
    _accelerator(catalog, accelerator)  # refuses an unknown name, naming the field
    return 1


def is_tpu(catalog: Catalog, accelerator: str) -> bool:
    """Whether `accelerator` is one of the catalog's TPU slices (in any spelling)."""
    return canonical_name(accelerator) in catalog.tpus


@dataclass(frozen=True)
class Placement:
    """What an accelerator adds to a pod: resource limits, node selector, tolerations."""

    limits: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)


def resolve(catalog: Catalog, accelerator: str, spot: bool = False) -> Placement:
    """Map an accelerator name (and the spot flag) to a Placement.

    Raises UnknownAccelerator with a message that names `spec.accelerator`
    and lists what is known, so the user can fix the resource right away.
    """
    placement = _accelerator(catalog, accelerator)
    if spot:
        placement.node_selector[catalog.spot_node_label] = "true"
        placement.tolerations.append(_toleration(catalog.spot_node_label, value="true"))
    return placement


def _accelerator(catalog: Catalog, given: str) -> Placement:
    """The Placement of `given` in any spelling; errors name it as the user wrote it."""
    accelerator = canonical_name(given)
    if accelerator == "cpu":
        return Placement()
    if (tpu := catalog.tpus.get(accelerator)) is not None:
        return Placement(
            limits={catalog.tpu_resource: str(tpu.chips)},
            node_selector={
                catalog.tpu_node_label: tpu.node_label,
                catalog.tpu_topology_label: tpu.topology,
            },
            tolerations=[_toleration(catalog.tpu_resource)],
        )
    if (m := GPU_NAME.match(accelerator)) and (gpu := catalog.gpus.get(m["type"])):
        count = int(m["count"] or 1)
        if count in gpu.counts:
            return Placement(
                limits={catalog.gpu_resource: str(count)},
                node_selector={catalog.gpu_node_label: gpu.node_label},
                tolerations=[_toleration(catalog.gpu_resource)],
            )
        raise UnknownAccelerator(
            f"spec.accelerator: {given!r} asks for {count} GPUs of type {m['type']}, "
            f"but nodes offer {', '.join(map(str, sorted(gpu.counts)))}; "
            f"known accelerators: {', '.join(catalog.names())}"
        )
    check_name(given, catalog.names(), field="spec.accelerator")
    raise AssertionError("unreachable: check_name refuses what _accelerator does not know")


def _toleration(key: str, value: str | None = None) -> dict[str, str]:
    if value is None:
        return {"key": key, "operator": "Exists", "effect": "NoSchedule"}
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}
