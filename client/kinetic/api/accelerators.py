"""An accelerator no node can offer: refused at submission, before any upload.

A name the catalog knows (`kinetic.model.catalog`) can still be one the
cluster will never run: `accelerator="l4"` on a CPU-only cluster is a Pod
that stays Pending for good. Where the client can tell, it refuses the
submission before anything is uploaded or created (`AcceleratorUnavailable`,
naming what the accelerator needs, what the nodes have and the fix). It can
tell when

* it may list the cluster's Nodes, none of which offers the accelerator
  (the extended resource, e.g. ``nvidia.com/gpu``, in the count asked for, and
  the catalog's node labels), and
* the cluster cannot grow: no cluster autoscaler (GKE's and the upstream one
  publish ``kube-system/cluster-autoscaler-status``) and no Karpenter (the
  ``karpenter.sh`` API group).

Where it cannot tell (no right to list Nodes or to read that ConfigMap, an
autoscaler that may add a node, or a name only the cluster's own catalog
defines) it submits, and says once why it could not check
(`AcceleratorNotChecked`, a warning): the operator then fails an attempt
that stays unschedulable as ``Unschedulable`` after the chart's
``scheduling.unschedulableSeconds``.

The client knows only the built-in catalog's placements; an administrator
may map a built-in name to other node labels. So a node that lacks one of
the catalog's label keys altogether counts as possibly offering it (its
labels follow another scheme, which the client cannot see): only a node
labelled the catalog's way with another value, or without the resource,
is taken as not offering it. cpu needs nothing and is never checked.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kinetic.model import catalog

if TYPE_CHECKING:
    from kubernetes.client import V1Node

log = logging.getLogger("kinetic")

__all__ = [
    "AUTOSCALER_STATUS",
    "KARPENTER_GROUP",
    "AcceleratorNotChecked",
    "AcceleratorUnavailable",
    "NodeOffer",
    "check",
    "judge",
]

AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")
KARPENTER_GROUP = "karpenter.sh"
UNSCHEDULABLE_BOUND = (
    "the operator fails an attempt that stays unschedulable as Unschedulable after the "
    "cluster's scheduling.unschedulableSeconds (600 s by default)"
)


class AcceleratorUnavailable(catalog.UnknownAccelerator):
    """The catalog knows the accelerator, but no node of this cluster can offer it and the
    cluster cannot add one: refused before anything is uploaded."""


class AcceleratorNotChecked(UserWarning):
    """The client could not tell whether the cluster can offer the accelerator; it was
    submitted anyway (said once per reason)."""


@dataclass(frozen=True)
class NodeOffer:
    """What one Node offers a Pod: its labels and its allocatable extended resources."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """What `judge` decided: refuse (``refusal``), warn (``unchecked``), or neither."""

    refusal: str | None = None
    unchecked: str | None = None


def offers(node: NodeOffer, placement: catalog.Placement) -> bool:
    """Whether ``node`` can take one Pod of ``placement``: every resource in the count asked
    for, and every node label the catalog's way (a label key the node lacks is another
    labelling scheme, which the client cannot judge: it does not count against it)."""
    for resource, amount in placement.limits.items():
        if node.allocatable.get(resource, 0) < float(amount):
            return False
    return all(
        node.labels.get(key, value) == value for key, value in placement.node_selector.items()
    )


def judge(
    given: str,
    nodes: Sequence[NodeOffer] | None,
    can_grow: bool | None,
    known: catalog.Catalog | None = None,
) -> Verdict:
    """Whether to refuse accelerator ``given`` on a cluster of ``nodes`` (None: not listable)
    that can grow or not (None: cannot tell).

    Pure: the caller lists the Nodes, and asks about autoscalers only when
    no node offers the accelerator (``can_grow`` is read only then).
    """
    known = known or catalog.default_catalog()
    name = catalog.canonical_name(given)
    if name == "cpu":
        return Verdict()
    if name not in known.names():
        return Verdict(
            unchecked=f"accelerator {given!r} is defined by the cluster's own catalog, whose "
            f"resources and node labels the client cannot see, so it did not check that a "
            f"node offers it; if none does, {UNSCHEDULABLE_BOUND}"
        )
    placement = catalog.resolve(known, name)
    if nodes is None:
        return Verdict(
            unchecked=f"this user may not list the cluster's Nodes, so the client could not "
            f"check that one offers accelerator {given!r}; if none does, {UNSCHEDULABLE_BOUND}"
        )
    if any(offers(node, placement) for node in nodes):
        return Verdict()
    if can_grow is None:
        return Verdict(
            unchecked=f"no node offers accelerator {given!r} now, and the client could not "
            f"tell whether the cluster can add one (it may not read "
            f"{'/'.join(AUTOSCALER_STATUS)}); submitted anyway: if no node comes, "
            f"{UNSCHEDULABLE_BOUND}"
        )
    if can_grow:
        return Verdict(
            unchecked=f"no node offers accelerator {given!r} now; the cluster's autoscaler "
            f"may add one. If none comes, {UNSCHEDULABLE_BOUND}"
        )
    return Verdict(refusal=_refusal(given, name, placement, nodes, known))


def _refusal(
    given: str,
    name: str,
    placement: catalog.Placement,
    nodes: Sequence[NodeOffer],
    known: catalog.Catalog,
) -> str:
    spelled = repr(given) if given == name else f"{given!r} ({name})"
    runnable = [n for n in known.names() if _runs_anywhere(n, nodes, known)]
    return (
        f"accelerator {spelled}: no node of this cluster can run it, and the cluster cannot "
        "add nodes (it has no cluster autoscaler and no Karpenter). Each Pod needs "
        f"{_needs(placement)}; {_what_nodes_have(placement, nodes)}. Nothing was uploaded or "
        f"created. Use an accelerator these nodes offer ({', '.join(runnable)}), add nodes "
        "that offer it, or submit to a cluster that has them (context=)"
    )


def _runs_anywhere(name: str, nodes: Sequence[NodeOffer], known: catalog.Catalog) -> bool:
    placement = catalog.resolve(known, name)
    return any(offers(node, placement) for node in nodes)


def _needs(placement: catalog.Placement) -> str:
    """What one Pod asks of its node, e.g. "1 nvidia.com/gpu on a node labelled ..."."""
    needs = ", ".join(f"{amount} {resource}" for resource, amount in placement.limits.items())
    labels = ", ".join(f"{key}={value}" for key, value in placement.node_selector.items())
    return f"{needs} on a node labelled {labels}" if labels else needs


def _what_nodes_have(placement: catalog.Placement, nodes: Sequence[NodeOffer]) -> str:
    """The nodes' side, in a clause: how many there are and what they lack."""
    count = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    if not nodes:
        return "the cluster has no nodes"
    for resource, amount in placement.limits.items():
        most = max(node.allocatable.get(resource, 0) for node in nodes)
        if most == 0:
            return f"none of the cluster's {count} has {resource}"
        if most < float(amount):
            return f"the most {resource} any of its {count} has is {most:g}"
    labelled = sorted(
        {
            f"{key}={node.labels[key]}"
            for node in nodes
            for key in placement.node_selector
            if key in node.labels
        }
    )
    return f"its {count} are labelled {', '.join(labelled)}"


# --------------------------------------------------------------------------- the cluster


def node_offer(node: V1Node) -> NodeOffer:
    """A Node as `offers` reads it."""
    from kubernetes.utils.quantity import parse_quantity

    allocatable: dict[str, float] = {}
    for resource, quantity in ((node.status and node.status.allocatable) or {}).items():
        try:
            allocatable[resource] = float(parse_quantity(quantity))
        except ValueError:
            continue
    return NodeOffer(
        name=node.metadata.name, labels=dict(node.metadata.labels or {}), allocatable=allocatable
    )


def list_nodes(context: str | None) -> list[NodeOffer] | None:
    """Every Node's offer; None when this user may not list Nodes (or the list fails)."""
    from kubernetes.client import ApiException

    from kinetic.api.kube import KubeClient

    try:
        listed = KubeClient(context).core.list_node(_request_timeout=30).items
    except ApiException as e:
        log.info("cannot list Nodes (HTTP %s): accelerators are not checked", e.status)
        return None
    return [node_offer(node) for node in listed]


def cluster_can_grow(context: str | None) -> bool | None:
    """Whether an autoscaler may add nodes: True, False, or None when this user cannot tell.

    GKE's and the upstream cluster autoscaler publish their status in
    ``kube-system/cluster-autoscaler-status``; Karpenter serves the
    ``karpenter.sh`` API group (API discovery is open to every user).
    """
    from kubernetes import client
    from kubernetes.client import ApiException

    from kinetic.api.kube import KubeClient

    api = KubeClient(context).api
    try:
        groups = client.ApisApi(api).get_api_versions(_request_timeout=30).groups or []
    except ApiException:
        return None
    if any(group.name == KARPENTER_GROUP for group in groups):
        return True
    namespace, name = AUTOSCALER_STATUS
    try:
        client.CoreV1Api(api).read_namespaced_config_map(name, namespace, _request_timeout=30)
    except ApiException as e:
        return False if e.status == 404 else None
    return True


class ClusterReads:
    """What `check` reads of one context's cluster: its Nodes' offers, and whether it can
    grow. A caller that knows the answers (a cluster the tests cannot build, such as one
    with GPUs) passes its own."""

    def __init__(self, context: str | None) -> None:
        self.context = context

    def nodes(self) -> list[NodeOffer] | None:
        return list_nodes(self.context)

    def can_grow(self) -> bool | None:
        return cluster_can_grow(self.context)


def check(accelerators: Iterable[str], cluster: ClusterReads) -> None:
    """Refuse, before any upload, an accelerator no node can offer on a cluster that cannot
    grow; say once why one could not be checked. Nodes are listed once, and only when an
    accelerator other than cpu is asked for; whether the cluster can grow, only when no
    node offers one, and once."""
    wanted = [a for a in dict.fromkeys(accelerators) if catalog.canonical_name(a) != "cpu"]
    if not wanted:
        return
    nodes = cluster.nodes()
    can_grow = functools.cache(cluster.can_grow)
    for given in wanted:
        verdict = judge(given, nodes, can_grow() if _unoffered(given, nodes) else None)
        if verdict.refusal is not None:
            raise AcceleratorUnavailable(verdict.refusal)
        if verdict.unchecked is not None:
            warnings.warn(verdict.unchecked, AcceleratorNotChecked, stacklevel=2)


def _unoffered(given: str, nodes: Sequence[NodeOffer] | None) -> bool:
    """Whether the listed nodes certainly lack ``given`` (a built-in catalog name)."""
    known = catalog.default_catalog()
    name = catalog.canonical_name(given)
    return nodes is not None and name in known.names() and not _runs_anywhere(name, nodes, known)
