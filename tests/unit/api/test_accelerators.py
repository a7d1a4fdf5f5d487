"""An accelerator no node can offer is refused at submission, where the client can tell.

``accelerator="l4"`` on a CPU-only cluster used to be accepted and stay
Pending for good, the only word a timeout. The decision is pure (`judge`):
these are its table tests; the refusal on a real cluster is in
tests/integration/test_reference_api.py.
"""

from __future__ import annotations

import warnings

import pytest
from kinetic.api import accelerators
from kinetic.api.accelerators import (
    AcceleratorNotChecked,
    AcceleratorUnavailable,
    NodeOffer,
    Verdict,
    judge,
    offers,
)
from kinetic.model import catalog
from kinetic.model.catalog import GPU_NODE_LABEL, GPU_RESOURCE, TPU_RESOURCE

CPU_NODE = NodeOffer("node-1", {"kubernetes.io/os": "linux"}, {"cpu": 2.0, "memory": 8e9})
L4_NODE = NodeOffer("gpu-1", {GPU_NODE_LABEL: "nvidia-l4"}, {"cpu": 8.0, GPU_RESOURCE: 1.0})
T4_NODE = NodeOffer("gpu-2", {GPU_NODE_LABEL: "nvidia-tesla-t4"}, {GPU_RESOURCE: 4.0})
# GPUs labelled by another scheme (not GKE's): the client cannot judge the labels.
OTHER_LABELS = NodeOffer("gpu-3", {"nvidia.com/gpu.product": "L4"}, {GPU_RESOURCE: 2.0})


def placement(name: str) -> catalog.Placement:
    return catalog.resolve(catalog.default_catalog(), name)


@pytest.mark.parametrize(
    "node, accelerator, fits",
    [
        (L4_NODE, "gpu-l4", True),
        (L4_NODE, "gpu-l4x2", False),  # one GPU only
        (T4_NODE, "gpu-l4", False),  # GKE's label, another type
        (T4_NODE, "gpu-t4x4", True),
        (CPU_NODE, "gpu-l4", False),  # no GPU at all
        (OTHER_LABELS, "gpu-l4", True),  # the resource is there; its labels another scheme's
        (OTHER_LABELS, "gpu-l4x4", False),
        (CPU_NODE, "tpu-v5e-4", False),
        (CPU_NODE, "cpu", True),
    ],
)
def test_what_a_node_offers(node: NodeOffer, accelerator: str, fits: bool) -> None:
    assert offers(node, placement(accelerator)) is fits


@pytest.mark.parametrize(
    "nodes, can_grow",
    [
        ([L4_NODE], False),  # a node offers it
        ([CPU_NODE, OTHER_LABELS], False),  # maybe offered: labelled another way
    ],
)
def test_an_offered_accelerator_passes(nodes: list[NodeOffer], can_grow: bool) -> None:
    assert judge("l4", nodes, can_grow) == Verdict()


def test_cpu_is_never_checked() -> None:
    assert judge("cpu", None, cluster) == Verdict()
    assert judge("cpu", [], False) == Verdict()


def test_on_a_cpu_only_cluster_that_cannot_grow_a_gpu_is_refused() -> None:
    verdict = judge("l4", [CPU_NODE], can_grow=False)
    assert verdict.unchecked is None
    assert verdict.refusal == (
        "accelerator 'l4' (gpu-l4): no node of this cluster can run it, and the cluster "
        "cannot add nodes (it has no cluster autoscaler and no Karpenter). Each Pod needs 1 "
        f"{GPU_RESOURCE} on a node labelled {GPU_NODE_LABEL}=nvidia-l4; none of the cluster's "
        f"1 node has {GPU_RESOURCE}. Nothing was uploaded or created. Use an accelerator these "
        "nodes offer (cpu), add nodes that offer it, or submit to a cluster that has them "
        "(context=)"
    )


@pytest.mark.parametrize(
    "given, nodes, says",
    [
        ("gpu-l4x2", [L4_NODE], f"the most {GPU_RESOURCE} any of its 1 node has is 1"),
        (
            "gpu-l4",
            [T4_NODE, CPU_NODE],
            f"its 2 nodes are labelled {GPU_NODE_LABEL}=nvidia-tesla-t4",
        ),
        ("v5litepod-4", [CPU_NODE], f"4 {TPU_RESOURCE} on a node labelled"),
        ("gpu-h100", [], "the cluster has no nodes"),
    ],
)
def test_a_refusal_says_what_the_nodes_lack(given: str, nodes: list[NodeOffer], says: str) -> None:
    refusal = judge(given, nodes, can_grow=False).refusal
    assert refusal is not None and says in refusal


def test_a_refusal_names_the_accelerators_the_nodes_can_run() -> None:
    refusal = judge("gpu-l4", [T4_NODE], can_grow=False).refusal
    assert refusal is not None
    assert "(cpu, gpu-t4, gpu-t4x2, gpu-t4x4)" in refusal


@pytest.mark.parametrize(
    "given, nodes, can_grow, says",
    [
        ("l4", None, None, "this user may not list the cluster's Nodes"),
        ("l4", [CPU_NODE], True, "the cluster's autoscaler may add one"),
        ("l4", [CPU_NODE], None, "could not tell whether the cluster can add one"),
        ("gpu-mi300", [CPU_NODE], False, "defined by the cluster's own catalog"),
    ],
    ids=["nodes-forbidden", "autoscaler", "autoscaler-unknown", "cluster-catalog-only"],
)
def test_where_the_client_cannot_tell_it_submits_and_says_why(
    given: str, nodes: list[NodeOffer] | None, can_grow: bool | None, says: str
) -> None:
    verdict = judge(given, nodes, can_grow)
    assert verdict.refusal is None and verdict.unchecked is not None
    assert says in verdict.unchecked
    assert "Unschedulable after the cluster's scheduling.unschedulableSeconds (600 s" in (
        verdict.unchecked
    )


def test_a_refusal_is_an_unknown_accelerator() -> None:
    """Code that catches kinetic.UnknownAccelerator keeps catching every refused name."""
    assert issubclass(AcceleratorUnavailable, catalog.UnknownAccelerator)


# --------------------------------------------------------------------------- one submission


class Known(accelerators.ClusterReads):
    """A cluster whose answers the test sets (the local cluster has no GPU node and no
    autoscaler), counting how often each was read."""

    def __init__(self) -> None:
        super().__init__(context=None)
        self.offered: list[NodeOffer] | None = [CPU_NODE]
        self.grows: bool | None = False
        self.listed = self.asked = 0

    def nodes(self) -> list[NodeOffer] | None:
        self.listed += 1
        return self.offered

    def can_grow(self) -> bool | None:
        self.asked += 1
        return self.grows


@pytest.fixture
def cluster() -> Known:
    return Known()


def test_a_submission_of_cpu_reads_nothing(cluster: Known) -> None:
    accelerators.check(["cpu", "cpu"], cluster)
    assert (cluster.listed, cluster.asked) == (0, 0)


def test_nodes_are_listed_once_and_growth_asked_only_when_no_node_offers(
    cluster: Known,
) -> None:
    cluster.offered = [L4_NODE]
    accelerators.check(["l4", "gpu-l4", "cpu"], cluster)
    assert (cluster.listed, cluster.asked) == (1, 0)
    with pytest.raises(AcceleratorUnavailable, match="accelerator 'gpu-t4'"):
        accelerators.check(["gpu-l4", "gpu-t4", "gpu-h100"], cluster)
    assert (cluster.listed, cluster.asked) == (2, 1)


def test_a_cluster_that_may_grow_gets_the_submission_and_one_warning(
    cluster: Known,
) -> None:
    cluster.grows = True
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        for _ in range(3):
            accelerators.check(["l4"], cluster)
    assert [type(w.message) for w in said] == [AcceleratorNotChecked]
    assert "the cluster's autoscaler may add one" in str(said[0].message)
