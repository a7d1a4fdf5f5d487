"""kinetic.Data(fuse=True) on a real cluster: refused by name without the GCS FUSE CSI driver,
mounted with it.

The local cluster has no such driver (no CSI driver at all). So:

* the client refuses a fuse submission at ``.run_async()`` / ``.run_async_map()``,
  before anything is uploaded or created;
* a KineticJob or KineticBatch applied with a fuse volume is refused by the
  operator's webhook naming ``spec.volumes[0].fuse`` (or the template's); one
  stored while the webhook is out of the way ends FAILED with that sentence,
  without a Pod;
* with a CSIDriver object named ``gcsfuse.csi.storage.gke.io`` created by the
  test (nothing serves it, so the Pod never starts, and the test does not wait
  for it to), the attempt's Pod carries GKE's annotation and a read-only csi
  volume of that driver at each mount path. The object is cluster-scoped: it is
  deleted afterwards whatever happens.

The client reads the CSIDriver once per submission: present, absent, or
"cannot tell" for an identity that may not read it (then the operator's
webhook judges). The client's tests are its alone; the others need the
operator (image and chart: the webhook's check, the Pod's csi volume, and the
chart's RBAC rule on csidrivers) built from this tree.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.fuse import FuseUnavailable, driver_present
from kinetic.model import layout
from kinetic.model.data import FUSE_ARGUMENTS_ROOT, GCSFUSE_DRIVER
from kinetic.model.names import LABEL_JOB
from kinetic_testing.cluster import service_account_kubeconfig
from kube_helpers import Kube, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

API = "kinetic.dev/v1alpha1"
WEBHOOK_CONFIG = "kinetic.dev"


def driver_exists(kube: Kube) -> bool:
    try:
        client.StorageV1Api(kube.api).read_csi_driver(GCSFUSE_DRIVER)
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


@pytest.fixture
def no_driver(kube: Kube) -> None:
    if driver_exists(kube):
        pytest.skip(f"this cluster has CSIDriver {GCSFUSE_DRIVER}: nothing to refuse")


def fuse_uri(ns: str, rest: str) -> str:
    """A gs:// URI the operator lets this namespace name: its own prefix under a gs://
    root (as the local cluster's is), any bucket otherwise."""
    root = resolve().storage_root
    base = layout.namespace_prefix(root, ns) if root.startswith("gs://") else "gs://kinetic/"
    return base + rest


def kubectl_in(kube: Kube, body: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, *args, "-f", "-"],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        timeout=60,
    )


def stored(kube: Kube, ns: str) -> str:
    out = kube.kubectl("get", "kineticjobs,kineticbatches", "-n", ns, "-o", "name")
    return out.stdout.strip()


def fuse_job(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "KineticJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "container": {"command": ["ls", "/data"]},
            "volumes": [{"mountPath": "/data", "uri": fuse_uri(ns, "shared/ds/"), "fuse": True}],
        },
    }


# ----------------------------------------------------------------------- the client


def test_run_async_refuses_fuse_data_before_uploading_or_creating_anything(
    ns: str, kube: Kube, no_driver: None, tmp_path: Path
) -> None:
    assert driver_present(None) is False  # the client's one read: absent
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "a.txt").write_bytes(b"alpha")
    local = kinetic.Data(str(tmp_path / "ds"))  # staged first, were the call not refused
    fused = kinetic.Data("gs://kinetic/datasets/imagenet/", fuse=True)

    @kinetic.run(namespace=ns)
    def count(path: str, ds: str) -> int:
        return len(path + ds)

    with pytest.raises(FuseUnavailable) as refused:
        count.run_async(local, ds=fused)
    text = str(refused.value)
    assert text.startswith(f"argument 'ds' {fused!r} asks for a GCS FUSE mount"), text
    assert f"CSIDriver {GCSFUSE_DRIVER}" in text and "this cluster does not have it" in text
    assert "GcsFuseCsiDriver=ENABLED" in text and "drop fuse=True" in text

    mounted = count.with_options(volumes={"/data": fused})
    with pytest.raises(FuseUnavailable, match=r"^volumes\['/data'\] Data\("):
        mounted.run_async(local, "x")
    with pytest.raises(FuseUnavailable, match=r"^volumes\['/data'\] Data\("):
        mounted.run_async_map([{"path": local, "ds": "x"}], input_mode="kwargs")

    assert storage.list_prefix(layout.namespace_prefix(resolve().storage_root, ns)) == []
    assert stored(kube, ns) == ""

    # An input's own fuse data fails that input alone, as the reference records a
    # packaging error in its slot (issue 32); the others run.
    batch = count.run_async_map(
        [{"path": "a", "ds": "x"}, {"path": "y", "ds": fused}], input_mode="kwargs"
    )
    assert str(batch.submission_failures[1]).startswith("input 1['ds'] Data(")
    values = batch.results(timeout=240, return_exceptions=True)
    assert values[0] == 2 and isinstance(values[1], FuseUnavailable)


def test_an_identity_that_may_not_read_csidrivers_leaves_fuse_to_the_operator(
    ns: str, kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ServiceAccount without rights is refused the read (403): the client cannot tell,
    refuses nothing itself, and the operator's webhook judges the submission."""
    kubeconfig = service_account_kubeconfig(kube, ns, "onlooker", tmp_path / "config")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert driver_present(None) is None


# ----------------------------------------------------------------------- the operator


def test_a_fuse_volume_applied_with_kubectl_is_refused_naming_the_field(
    ns: str, kube: Kube, no_driver: None
) -> None:
    batch = {
        "apiVersion": API,
        "kind": "KineticBatch",
        "metadata": {"name": "grp-0f0f0f0f", "namespace": ns},
        "spec": {
            "template": {
                "container": {"command": ["true"]},
                "volumes": fuse_job("x", ns)["spec"]["volumes"],
            },
            "inputs": {"items": [1]},
        },
    }
    for body, field in (
        (fuse_job("fused", ns), "spec.volumes[0].fuse"),
        (batch, "spec.template.volumes[0].fuse"),
    ):
        out = kubectl_in(kube, body, "apply")
        assert out.returncode != 0, f"{body['kind']} was admitted: {out.stdout}"
        assert "denied the request" in out.stderr, out.stderr
        assert field in out.stderr and GCSFUSE_DRIVER in out.stderr, out.stderr
        assert "set fuse to false" in out.stderr, out.stderr
    assert stored(kube, ns) == ""


def _webhook_denies(kube: Kube, ns: str) -> bool:
    return kubectl_in(kube, fuse_job("probe", ns), "create", "--dry-run=server").returncode != 0


def test_a_fuse_volume_stored_past_the_webhook_fails_the_job_without_a_pod(
    ns: str, kube: Kube, no_driver: None
) -> None:
    """The webhook fails open (or is not installed yet): the operator refuses the Pod."""
    assert _webhook_denies(kube, ns), "the webhook does not refuse fuse volumes yet"
    saved = json.loads(
        kube.kubectl("get", "validatingwebhookconfiguration", WEBHOOK_CONFIG, "-o", "json").stdout
    )
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        saved["metadata"].pop(key, None)
    kube.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIG)
    try:
        wait_for(lambda: not _webhook_denies(kube, ns), what="the API server to stop calling it")
        kube.apply(ns, fuse_job("fused", ns))
    finally:
        kubectl_in(kube, saved, "create")
        wait_for(lambda: _webhook_denies(kube, ns), what="the webhook to judge again")

    def ended() -> dict[str, Any] | None:
        out = kube.kubectl("get", "kineticjob", "fused", "-n", ns, "-o", "json")
        status = json.loads(out.stdout).get("status") or {}
        return status if status.get("phase") == "FAILED" else None

    status = wait_for(ended, timeout=60, what="the job to fail")
    assert isinstance(status, dict)
    assert "spec.volumes[0].fuse" in status["message"], status
    assert GCSFUSE_DRIVER in status["message"], status
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{LABEL_JOB}=fused").items
    assert pods == []


# ----------------------------------------------------------------------- with the driver


@pytest.fixture
def fake_driver(kube: Kube) -> Iterator[None]:
    """A CSIDriver object named like GKE's (cluster-scoped), deleted whatever happens.

    Nothing serves it: a Pod that mounts it is created, and never starts."""
    if driver_exists(kube):
        pytest.skip(f"this cluster has a CSIDriver {GCSFUSE_DRIVER} of its own; not replacing it")
    storage_api = client.StorageV1Api(kube.api)
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": GCSFUSE_DRIVER, "labels": {"kinetic.dev/test": "data-fuse"}},
        "spec": {
            "attachRequired": False,
            "podInfoOnMount": True,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"],
        },
    }
    storage_api.create_csi_driver(body)
    try:
        yield
    finally:
        try:
            storage_api.delete_csi_driver(GCSFUSE_DRIVER)
        except client.ApiException as e:
            if e.status != 404:
                raise
        wait_for(lambda: not driver_exists(kube), what=f"CSIDriver {GCSFUSE_DRIVER} to go")


def test_with_the_driver_the_pod_mounts_the_data_with_gcs_fuse(
    ns: str, kube: Kube, fake_driver: None
) -> None:
    volume_uri = fuse_uri(ns, "shared/ds/")
    object_uri = fuse_uri(ns, "shared/weights/model.h5")

    @kinetic.run(namespace=ns, volumes={"/data": kinetic.Data(volume_uri, fuse=True)})
    def peek(weights: str) -> str:
        return weights

    assert driver_present(None) is True
    job = peek.run_async(kinetic.Data(object_uri, fuse=True))  # the client sees the driver
    try:

        def created() -> dict[str, Any] | None:
            pods = kube.core.list_namespaced_pod(ns, label_selector=f"{LABEL_JOB}={job.job_id}")
            return (
                client.ApiClient().sanitize_for_serialization(pods.items[0]) if pods.items else None
            )

        pod = wait_for(created, timeout=60, what="the attempt's Pod to be created")
        assert isinstance(pod, dict)
        assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
        by_name = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        bucket = volume_uri[len("gs://") :].split("/", 1)[0]
        for path, uri in (("/data", volume_uri), (f"{FUSE_ARGUMENTS_ROOT}/0", object_uri)):
            mount = mounts[path]
            assert mount.get("readOnly") is True, mount
            csi = by_name[mount["name"]]["csi"]
            assert csi["driver"] == GCSFUSE_DRIVER and csi["readOnly"] is True, csi
            folder = uri[len(f"gs://{bucket}/") :].rstrip("/")
            folder = folder if uri.endswith("/") else folder.rsplit("/", 1)[0]
            assert csi["volumeAttributes"]["bucketName"] == bucket, csi
            options = csi["volumeAttributes"]["mountOptions"].split(",")
            assert "implicit-dirs" in options and f"only-dir={folder}" in options, options
        # The runner downloads nothing: it is not told about mounted volumes.
        env = {e["name"] for e in pod["spec"]["containers"][0].get("env") or []}
        assert "KINETIC_VOLUMES" not in env
    finally:
        try:
            job.cancel(timeout=120)
        except Exception as e:  # noqa: BLE001  # the namespace goes anyway; say why
            print(f"cancelling {job.job_id}: {type(e).__name__}: {e}")
