"""`spec.volumes` (kinetic.Data) as Pod parts. Pure: no API calls.

Each volume is an emptyDir mounted at its ``mountPath`` in the job's
container. Who fills it depends on the job:

* a function job's runner downloads every volume before the first call
  (``KINETIC_VOLUMES``; a failure is the runner's ``data`` phase);
* a container job gets an init container, the runner image running
  ``kinetic.runtime.datafetch``, with the same mounts: the user's command starts
  only once every volume is filled, and a failure fails the attempt with
  the init container's message.

emptyDir keeps the restricted Pod Security profile: no host paths, nothing
the submitting user could not have asked for.

A ``fuse`` volume is not downloaded: where the cluster has the GCS FUSE CSI
driver (its CSIDriver object, `GCSFUSE_DRIVER`, which the caller reads and
passes as ``fuse_driver``), it is a read-only CSI ephemeral volume of that
driver at the same ``mountPath`` (only-dir: the URI's folder), and the Pod
carries the annotation that has GKE inject the driver's sidecar
(`fuse_mounts`). A csi volume is allowed by the restricted profile, and the
driver reads the bucket as the Pod's own service account, as a download
would. Without the driver, or when the operator cannot tell, nothing is
mounted and the attempt is refused with a sentence naming the field
(`fuse_refusals`), which the webhook also says at admission.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kinetic.model.data import GCSFUSE_DRIVER, fuse_driver_missing, fuse_problem, fuse_source
from kinetic.model.resources import DataVolume, KineticBatchSpec, KineticJobSpec
from pydantic import ValidationError

from kinetic_operator.logic.errors import FuseUnavailable
from kinetic_operator.settings import OperatorSettings

VOLUMES_ENV = "KINETIC_VOLUMES"
INIT_CONTAINER_NAME = "kinetic-data"
VOLUME_PREFIX = "kinetic-data-"
# GKE's GCS FUSE webhook injects the driver's sidecar into Pods that carry this.
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"


def volume_name(index: int) -> str:
    return f"{VOLUME_PREFIX}{index}"


def volumes_json(volumes: Sequence[DataVolume]) -> str:
    """The volumes as the pod-side fetcher reads them (wire form)."""
    wire = [v.model_dump(by_alias=True, exclude_defaults=True, mode="json") for v in volumes]
    return json.dumps(wire, separators=(",", ":"))


# --------------------------------------------------------------------------- GCS FUSE


@dataclass(frozen=True)
class FuseMounts:
    """What mounting a spec's fuse volumes adds to its Pod."""

    volumes: dict[int, dict[str, Any]] = field(default_factory=dict)  # index -> Pod volume
    annotations: dict[str, str] = field(default_factory=dict)


def uses_fuse(volumes: Sequence[DataVolume] | None) -> bool:
    return any(v.fuse for v in volumes or ())


def batch_uses_fuse(spec: KineticBatchSpec) -> bool:
    """Whether any job of the batch (its template, or one of spec.jobs) has a fuse volume."""
    jobs = [spec.template] if spec.template is not None else list(spec.jobs or ())
    return any(uses_fuse(job.volumes) for job in jobs)


def fuse_refusals(volumes: Sequence[DataVolume], at: str, driver: bool | None) -> list[str]:
    """Why each fuse volume of ``at`` cannot be mounted here; empty when all can.

    ``driver``: whether the cluster has the GCS FUSE CSI driver, None when the
    operator could not read CSIDrivers (its chart grants get on them).
    """
    refused: list[str] = []
    for i, v in enumerate(volumes):
        if not v.fuse:
            continue
        where = f"{at}.volumes[{i}].fuse"
        why = fuse_problem(v.uri)
        if why is not None:
            refused.append(f"{where}: {why}")
        elif driver is False:
            refused.append(fuse_driver_missing(f"{where} ({v.uri})", drop="set fuse to false"))
        elif driver is None:
            refused.append(
                f"{where} ({v.uri}) asks for a GCS FUSE mount, and the operator cannot tell "
                f"whether this cluster has the GCS FUSE CSI driver (CSIDriver "
                f"{GCSFUSE_DRIVER}): it may not read CSIDrivers. Grant the operator get on "
                "csidrivers.storage.k8s.io (the chart's ClusterRole does), or set fuse to "
                "false to have the data downloaded into the pod instead."
            )
    return refused


def fuse_mounts(volumes: Sequence[DataVolume], uid: int) -> FuseMounts:
    """The csi volumes of the fuse volumes (by index) and the Pod's annotation.

    Read-only; ``implicit-dirs`` so that folders made by other tools show;
    ``uid``/``gid`` so the Pod's non-root user owns what it reads; ``only-dir``
    the URI's folder (a prefix itself, a single object's parent), so the data
    appears at ``mountPath`` exactly as a download puts it. Call it only for
    volumes `fuse_refusals` accepts.
    """
    mounts: dict[int, dict[str, Any]] = {}
    for i, v in enumerate(volumes):
        if not v.fuse:
            continue
        source = fuse_source(v.uri)
        options = ["implicit-dirs", f"uid={uid}", f"gid={uid}"]
        if source.folder:
            options.append(f"only-dir={source.folder}")
        mounts[i] = {
            "name": volume_name(i),
            "csi": {
                "driver": GCSFUSE_DRIVER,
                "readOnly": True,
                "volumeAttributes": {
                    "bucketName": source.bucket,
                    "mountOptions": ",".join(options),
                },
            },
        }
    return FuseMounts(mounts, {GCSFUSE_ANNOTATION: "true"} if mounts else {})


def spec_volume_groups(kind: str, spec: Any) -> list[tuple[str, list[DataVolume]]]:
    """A raw spec's volume lists with their field paths: ``spec`` of a KineticJob;
    ``spec.template`` and each ``spec.jobs[j]`` of a KineticBatch. A list that does not
    parse is left out (the schema and the operator's own checks refuse it)."""
    if not isinstance(spec, dict):
        return []
    if kind == "KineticJob":
        raw = [("spec", spec)]
    else:
        jobs = spec.get("jobs")
        raw = [("spec.template", spec.get("template"))] + [
            (f"spec.jobs[{j}]", job) for j, job in enumerate(jobs if isinstance(jobs, list) else [])
        ]
    groups: list[tuple[str, list[DataVolume]]] = []
    for at, job in raw:
        volumes = job.get("volumes") if isinstance(job, dict) else None
        if not isinstance(volumes, list):
            continue
        try:
            groups.append((at, [DataVolume.model_validate(v) for v in volumes]))
        except ValidationError:
            continue
    return groups


def data_command(settings: OperatorSettings) -> list[str]:
    """The init container's command: the runner's interpreter, running kinetic.runtime.datafetch."""
    command = list(settings.runner_command)
    if command and command[-1] == "kinetic.runtime.runner":
        return [*command[:-1], "kinetic.runtime.datafetch"]
    return ["python", "-m", "kinetic.runtime.datafetch"]


def apply(
    pod_spec: dict[str, Any],
    spec: KineticJobSpec,
    settings: OperatorSettings,
    fuse_driver: bool | None = None,
    at: str = "spec",
) -> dict[str, str]:
    """Add the volumes, the mounts and (container jobs) the init container to ``pod_spec``;
    return the annotations the Pod needs (GCS FUSE's, when it mounts any).

    ``fuse_driver`` says whether the cluster has the GCS FUSE CSI driver (None:
    not known); ``at`` is where ``spec`` sits in its object, for messages.
    Raises `FuseUnavailable` when a fuse volume cannot be mounted.
    """
    volumes = spec.volumes or []
    if not volumes:
        return {}
    fused = FuseMounts()
    if uses_fuse(volumes):
        refused = fuse_refusals(volumes, at, fuse_driver)
        if refused:
            raise FuseUnavailable("; ".join(refused))
        fused = fuse_mounts(volumes, pod_spec["securityContext"]["runAsUser"])
    pod_spec["volumes"] = [
        *pod_spec.get("volumes", []),
        *(
            fused.volumes.get(i) or {"name": volume_name(i), "emptyDir": {}}
            for i in range(len(volumes))
        ),
    ]
    main = pod_spec["containers"][0]
    main["volumeMounts"] = [
        *main.get("volumeMounts", []),
        *(_mount(i, v, i in fused.volumes) for i, v in enumerate(volumes)),
    ]
    downloaded = [(i, v) for i, v in enumerate(volumes) if i not in fused.volumes]
    if downloaded:
        _fetch_before_start(pod_spec, spec, settings, downloaded)
    return fused.annotations


def _mount(index: int, volume: DataVolume, read_only: bool) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": volume_name(index), "mountPath": volume.mount_path}
    if read_only:
        mount["readOnly"] = True
    return mount


def _fetch_before_start(
    pod_spec: dict[str, Any],
    spec: KineticJobSpec,
    settings: OperatorSettings,
    downloaded: list[tuple[int, DataVolume]],
) -> None:
    """The volumes to download: named to the runner (function jobs), or fetched by an init
    container with their mounts (container jobs)."""
    main = pod_spec["containers"][0]
    env = {"name": VOLUMES_ENV, "value": volumes_json([v for _i, v in downloaded])}
    if spec.function is not None:
        main["env"] = [*main.get("env", []), env]
        return
    init: dict[str, Any] = {
        "name": INIT_CONTAINER_NAME,
        "image": settings.default_image,  # the runner image: it has kinetic.runtime.datafetch
        "command": data_command(settings),
        "env": [env, *({"name": k, "value": v} for k, v in settings.cluster_env().items())],
        "volumeMounts": [_mount(i, v, False) for i, v in downloaded],
        "terminationMessagePath": main["terminationMessagePath"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(main["securityContext"]),
    }
    pod_spec["initContainers"] = [*pod_spec.get("initContainers", []), init]
