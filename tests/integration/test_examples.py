"""Every YAML example in examples/ applied as a user would, waiting for its outcome."""

from __future__ import annotations

from typing import Any

import pytest
from kinetic.api.inputs import read_manifest, read_shard
from kinetic.model import layout
from kinetic.model import resources as r
from kinetic.model.manifest import ManifestHeader
from kube_helpers import REPO, Kube, local_env, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

EXAMPLES = REPO / "examples"


@pytest.fixture
def ns(operator: None, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in local_env().items():  # storage: the local cluster's fake-gcs-server
        monkeypatch.setenv(key, value)
    return namespace


def get(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
        r.GROUP, r.VERSION, ns, r.BATCH_PLURAL, name
    )


def outcome(kube: Kube, ns: str, name: str) -> tuple[dict[str, Any], dict[int, str | None]]:
    """The batch's final status and each input's result, from its final manifest."""
    status = wait_for(
        lambda: (
            r.Phase((s := get(kube, ns, name).get("status") or {}).get("phase", "PENDING")).terminal
            and s
        ),
        timeout=240,
        interval=0.5,
        what=f"batch {name} to finish",
    )
    uid = get(kube, ns, name)["metadata"]["uid"]
    home = layout.batch_home(local_env()["KINETIC_STORAGE_ROOT"], ns, name, uid)

    def final() -> ManifestHeader | None:
        h = read_manifest(home)
        return h if h is not None and r.Phase(h.phase).terminal else None

    header: ManifestHeader = wait_for(final, timeout=60, what=f"{name}'s manifest")  # type: ignore[assignment]
    results: dict[int, str | None] = {}
    for shard in header.shards:
        doc = read_shard(home, shard)
        assert doc is not None
        results |= {int(i): rec.result for i, rec in doc.inputs.items()}
    return status, results  # type: ignore[return-value]


def apply_file(kube: Kube, ns: str, *args: str) -> None:
    out = kube.kubectl("apply", "-n", ns, *args, check=False)
    assert out.returncode == 0, out.stderr


def test_grid(kube: Kube, ns: str) -> None:
    apply_file(kube, ns, "-f", str(EXAMPLES / "grid.yaml"))
    status, results = outcome(kube, ns, "grid-demo")
    assert (status["phase"], status["total"]) == ("SUCCEEDED", 6), status
    # Sorted keys, the last varying fastest: batch first, then lr.
    assert results[0] == "lr=0.1 batch=32" and results[5] == "lr=0.001 batch=64"


def test_items_then_rerun_of_its_failed_input(kube: Kube, ns: str) -> None:
    apply_file(kube, ns, "-f", str(EXAMPLES / "items.yaml"))
    status, results = outcome(kube, ns, "items-demo")
    assert (status["phase"], status.get("failedIndexes")) == ("FAILED", "2"), status
    assert (results[0], results[1], results[3]) == ("100", "25", "20")

    apply_file(kube, ns, "-f", str(EXAMPLES / "rerun.yaml"))
    status, results = outcome(kube, ns, "items-demo-rerun")
    assert (status["phase"], status["total"]) == ("SUCCEEDED", 1), status
    assert results == {0: "index 2: none"}


def test_kustomization(kube: Kube, ns: str) -> None:
    apply_file(kube, ns, "-k", str(EXAMPLES / "kustomize"))
    status, results = outcome(kube, ns, "staging-sweep")
    assert status["phase"] == "SUCCEEDED", status
    assert results == {0: "small@staging", 1: "large@staging"}
    labels = get(kube, ns, "staging-sweep")["metadata"]["labels"]
    assert labels["app.kubernetes.io/part-of"] == "kinetic-examples"
