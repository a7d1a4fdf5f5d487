"""fuse data volumes in the attempt Pod: a GCS FUSE CSI mount, or a refusal naming the field.

The decision is pure (`datavolumes.fuse_refusals`, `fuse_mounts`, `apply`); the
thin layers around it are tested with stand-ins: the webhook (`data_problems`,
`validate_job`/`validate_batch` with a Kube that answers the CSIDriver read),
the batch Pod builder (the field path of a template or of spec.jobs[j]) and
`Kube.csi_driver_installed` (what it caches).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kinetic.model.data import GCSFUSE_DRIVER
from kinetic.model.resources import DataVolume, KineticBatchSpec, KineticJobSpec
from kinetic_operator import kube
from kinetic_operator.handlers.admission import data_problems, validate_batch, validate_job
from kinetic_operator.logic import datavolumes
from kinetic_operator.logic.batch_pods import build_unit_pod
from kinetic_operator.logic.datavolumes import (
    GCSFUSE_ANNOTATION,
    fuse_mounts,
    fuse_refusals,
    spec_volume_groups,
)
from kinetic_operator.logic.errors import FuseUnavailable, Rejected
from kinetic_operator.logic.job_logic import InvalidSpec, validate_spec
from kinetic_operator.logic.podspec import RUN_AS_USER, Owner, build_job_pod
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import OperatorState
from kinetic_testing.fake_kube import FakeKube
from kubernetes.client import ApiException

SHA = "ab" * 32
ROOT = "gs://kinetic/root"
SETTINGS = OperatorSettings(storage_root=ROOT, default_image="runner:1")
OWNER = Owner(name="kj", namespace="ns", uid="uid-1")
PAYLOAD = f"{ROOT}/namespaces/ns/uploads/kj-0123456789abcdef/payload.pkl"
FUNCTION = {"function": {"payloadURI": PAYLOAD, "sha256": SHA}}
CONTAINER = {"container": {"image": "busybox", "command": ["ls", "/data"]}}
FUSED = {"mountPath": "/data", "uri": "gs://datasets/imagenet/train/", "fuse": True}
OBJECT = {"mountPath": "/weights", "uri": "gs://models/bert/model.h5", "fuse": True}
DOWNLOADED = {"mountPath": "/small", "uri": "gs://datasets/small/"}


def spec(kind: dict[str, Any], *volumes: dict[str, Any]) -> KineticJobSpec:
    return KineticJobSpec.model_validate({**kind, "volumes": list(volumes)})


def vols(*raw: dict[str, Any]) -> list[DataVolume]:
    return [DataVolume.model_validate(v) for v in raw]


# --------------------------------------------------------------------------- the decision


def test_with_the_driver_a_fuse_volume_is_a_read_only_gcs_fuse_mount_where_data_goes():
    pod = build_job_pod(OWNER, spec(FUNCTION, FUSED, OBJECT), SETTINGS, 1, fuse_driver=True)
    assert pod["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    volumes = pod["spec"]["volumes"]
    assert volumes[0] == {
        "name": "kinetic-data-0",
        "csi": {
            "driver": "gcsfuse.csi.storage.gke.io",
            "readOnly": True,
            "volumeAttributes": {
                "bucketName": "datasets",
                "mountOptions": f"implicit-dirs,uid={RUN_AS_USER},gid={RUN_AS_USER},"
                "only-dir=imagenet/train",
            },
        },
    }
    # A single object: its folder is mounted, so the file is at /weights/model.h5 as a
    # download would put it.
    assert volumes[1]["csi"]["volumeAttributes"] == {
        "bucketName": "models",
        "mountOptions": f"implicit-dirs,uid={RUN_AS_USER},gid={RUN_AS_USER},only-dir=bert",
    }
    (main,) = pod["spec"]["containers"]
    assert main["volumeMounts"] == [
        {"name": "kinetic-data-0", "mountPath": "/data", "readOnly": True},
        {"name": "kinetic-data-1", "mountPath": "/weights", "readOnly": True},
    ]
    # Nothing is downloaded: the runner is not told about mounted volumes.
    assert "KINETIC_VOLUMES" not in {e["name"] for e in main["env"]}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True  # still restricted


def test_a_bucket_root_is_mounted_whole():
    (mount,) = fuse_mounts(
        vols({"mountPath": "/b", "uri": "gs://bkt/", "fuse": True}), 7
    ).volumes.values()
    assert mount["csi"]["volumeAttributes"]["mountOptions"] == "implicit-dirs,uid=7,gid=7"


def test_mounted_and_downloaded_volumes_side_by_side_in_a_container_job():
    pod = build_job_pod(OWNER, spec(CONTAINER, DOWNLOADED, FUSED), SETTINGS, 1, fuse_driver=True)
    volumes = pod["spec"]["volumes"]
    assert volumes[0] == {"name": "kinetic-data-0", "emptyDir": {}}
    assert volumes[1]["csi"]["driver"] == GCSFUSE_DRIVER
    (init,) = pod["spec"]["initContainers"]
    assert init["volumeMounts"] == [{"name": "kinetic-data-0", "mountPath": "/small"}]
    assert json.loads(init["env"][0]["value"]) == [DOWNLOADED]  # only what it downloads
    (main,) = pod["spec"]["containers"]
    assert [m.get("readOnly", False) for m in main["volumeMounts"]] == [False, True]


def test_only_fuse_volumes_need_no_init_container():
    pod = build_job_pod(OWNER, spec(CONTAINER, FUSED), SETTINGS, 1, fuse_driver=True)
    assert "initContainers" not in pod["spec"]


def test_no_fuse_no_annotation_and_the_driver_is_not_needed():
    pod = build_job_pod(OWNER, spec(FUNCTION, DOWNLOADED), SETTINGS, 1, fuse_driver=None)
    assert "annotations" not in pod["metadata"]
    assert pod["spec"]["volumes"] == [{"name": "kinetic-data-0", "emptyDir": {}}]


@pytest.mark.parametrize(
    ("driver", "words"),
    [
        (False, "and this cluster does not have it"),
        (None, "the operator cannot tell whether this cluster has the GCS FUSE CSI driver"),
    ],
    ids=["absent", "unknown"],
)
def test_without_the_driver_the_attempt_is_refused_naming_the_field_and_driver(driver, words):
    with pytest.raises(FuseUnavailable) as refused:
        build_job_pod(OWNER, spec(FUNCTION, DOWNLOADED, FUSED), SETTINGS, 1, fuse_driver=driver)
    text = str(refused.value)
    assert text.startswith("spec.volumes[1].fuse (gs://datasets/imagenet/train/) asks for a GCS")
    assert words in text and GCSFUSE_DRIVER in text and "set fuse to false" in text
    assert isinstance(refused.value, Rejected)  # the job and batch paths fail the attempt


@pytest.mark.parametrize("driver", [True, False, None])
def test_data_gcs_fuse_cannot_show_is_refused_whatever_the_driver(driver):
    bad = vols(
        {"mountPath": "/hf", "uri": "hf://imdb", "fuse": True},
        {"mountPath": "/f", "uri": f"{ROOT}/namespaces/ns/shared/", "fuse": False},
        {"mountPath": "/disk", "uri": "file:///shared/ds/", "fuse": True},
    )
    refused = fuse_refusals(bad, "spec", driver)
    assert [r.split(":", 1)[0] for r in refused] == ["spec.volumes[0].fuse", "spec.volumes[2].fuse"]
    assert all("only Cloud Storage (gs://) data can be mounted" in r for r in refused)


def test_the_operator_fails_a_job_whose_fuse_volume_is_not_cloud_storage():
    raw = {**FUNCTION, "volumes": [{"mountPath": "/hf", "uri": "hf://imdb", "fuse": True}]}
    catalog = SETTINGS.accelerator_catalog
    got = validate_spec("kj", raw, catalog, storage_root=ROOT, max_disruptions=3, namespace="ns")
    assert isinstance(got, InvalidSpec)
    assert str(got.message).startswith("spec.volumes[0].fuse: only Cloud Storage (gs://)")


# --------------------------------------------------------------------------- batches


def batch(form: dict[str, Any]) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(form)


def test_a_batch_pod_mounts_its_template_fuse_volume_and_names_the_template_when_refused():
    b = batch({"template": {**FUNCTION, "volumes": [FUSED]}, "inputs": {"items": [1, 2]}})
    pod = build_unit_pod("grp-0a1b2c3d", "ns", "uid-2", b, SETTINGS, 1, 1, None, fuse_driver=True)
    assert pod["metadata"]["annotations"][GCSFUSE_ANNOTATION] == "true"
    with pytest.raises(FuseUnavailable, match=r"^spec\.template\.volumes\[0\]\.fuse "):
        build_unit_pod("grp-0a1b2c3d", "ns", "uid-2", b, SETTINGS, 1, 1, None, fuse_driver=False)
    assert datavolumes.batch_uses_fuse(b)


def test_a_mixed_batch_names_the_job_whose_volume_cannot_be_mounted():
    b = batch({"jobs": [CONTAINER, {**CONTAINER, "volumes": [DOWNLOADED, FUSED]}]})
    build_unit_pod("grp-0a1b2c3d", "ns", "uid-2", b, SETTINGS, 0, 1, None, fuse_driver=False)
    with pytest.raises(FuseUnavailable, match=r"^spec\.jobs\[1\]\.volumes\[1\]\.fuse "):
        build_unit_pod("grp-0a1b2c3d", "ns", "uid-2", b, SETTINGS, 1, 1, None, fuse_driver=False)


# --------------------------------------------------------------------------- the webhook


def job_body(*volumes: dict[str, Any], cancel: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "kj", "namespace": "ns"},
        "spec": {**FUNCTION, "volumes": list(volumes), "cancel": cancel},
    }


class Driver:
    """The CSIDriver read, answering ``present``; counts the reads."""

    def __init__(self, present: bool | None) -> None:
        self.present, self.reads = present, 0

    def __call__(self) -> bool | None:
        self.reads += 1
        return self.present


def test_the_webhook_reads_the_driver_only_for_specs_with_a_fuse_volume():
    driver = Driver(False)
    assert data_problems("KineticJob", None, job_body(DOWNLOADED), driver) == []
    assert driver.reads == 0
    (problem,) = data_problems("KineticJob", None, job_body(DOWNLOADED, FUSED), driver)
    assert problem.startswith("spec.volumes[1].fuse (gs://datasets/imagenet/train/) asks for")
    assert data_problems("KineticJob", None, job_body(FUSED), Driver(True)) == []


def test_updates_are_judged_only_when_they_change_what_runs():
    old = job_body(FUSED)
    driver = Driver(False)
    assert data_problems("KineticJob", old, job_body(FUSED, cancel=True), driver) == []
    assert driver.reads == 0  # a cancel is never refused
    assert data_problems("KineticJob", old, job_body(FUSED, OBJECT), driver) != []
    batch_body = {"spec": {"template": {**FUNCTION, "volumes": [FUSED]}, "inputs": {"count": 2}}}
    assert data_problems("KineticBatch", batch_body, batch_body, driver) == []  # immutable


def test_a_failed_driver_read_admits_and_leaves_it_to_the_operator():
    def broken() -> bool | None:
        raise ApiException(status=500)

    assert data_problems("KineticJob", None, job_body(FUSED), broken) == []


def test_spec_volume_groups_name_every_place_a_volume_list_lives():
    job = {"spec": {"volumes": [FUSED]}}
    assert [at for at, _ in spec_volume_groups("KineticJob", job["spec"])] == ["spec"]
    mixed = {"jobs": [{"volumes": [FUSED]}, {}, {"volumes": [{"mountPath": 3}]}]}
    assert [at for at, _ in spec_volume_groups("KineticBatch", mixed)] == ["spec.jobs[0]"]
    assert spec_volume_groups("KineticBatch", "not a spec") == []


def memo(present: bool | None) -> Any:
    kube = FakeKube()
    kube.csi_drivers[GCSFUSE_DRIVER] = present
    return SimpleNamespace(kinetic=OperatorState(_kube=kube))  # type: ignore[arg-type]


def test_validate_job_refuses_a_fuse_volume_without_the_driver_naming_the_field():
    with pytest.raises(kopf.AdmissionError) as refused:
        validate_job(body=kopf.Body(job_body(FUSED)), memo=memo(False))
    assert refused.value.code == 422
    assert str(refused.value).startswith("spec.volumes[0].fuse (gs://datasets/imagenet/train/)")
    assert GCSFUSE_DRIVER in str(refused.value)
    validate_job(body=kopf.Body(job_body(FUSED)), memo=memo(True))


def test_validate_batch_names_the_template_volume():
    body = {
        "metadata": {"name": "grp-0a1b2c3d", "namespace": "ns"},
        "spec": {"template": {**FUNCTION, "volumes": [FUSED]}, "inputs": {"items": [1]}},
    }
    with pytest.raises(kopf.AdmissionError, match=r"^spec\.template\.volumes\[0\]\.fuse "):
        validate_batch(old=None, body=kopf.Body(body), operation="CREATE", memo=memo(False))
    validate_batch(old=None, body=kopf.Body(body), operation="CREATE", memo=memo(True))


# --------------------------------------------------------------------------- the one read


class _Storage:
    def __init__(self, answers: list[BaseException | None]) -> None:
        self.answers, self.reads = answers, 0

    def __call__(self, _api: Any) -> _Storage:
        return self

    def read_csi_driver(self, name: str, **_: Any) -> Any:
        self.reads += 1
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer
        return SimpleNamespace(release_conn=lambda: None, read=lambda *a: b"")


def test_the_operator_believes_a_present_driver_for_a_while_and_an_absent_one_never(monkeypatch):
    fake = _Storage([ApiException(status=404), None, ApiException(status=403)])
    monkeypatch.setattr(kube.client, "StorageV1Api", fake)
    monkeypatch.setattr(kube, "_drain", lambda resp: None)
    k = kube.Kube(api=object())  # type: ignore[arg-type]
    assert k.csi_driver_installed(GCSFUSE_DRIVER) is False
    assert k.csi_driver_installed(GCSFUSE_DRIVER) is True  # installed since: seen at once
    assert k.csi_driver_installed(GCSFUSE_DRIVER) is True  # believed: not read again
    assert fake.reads == 2
    k.csi_seen[GCSFUSE_DRIVER] -= kube.CSI_DRIVER_TTL  # time passes
    assert k.csi_driver_installed(GCSFUSE_DRIVER) is None  # the operator may not read it
    assert fake.reads == 3
