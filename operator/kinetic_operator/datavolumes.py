"""`spec.volumes` (kinetic.Data) as Pod parts. Pure: no API calls.

Each volume is an emptyDir mounted at its ``mountPath`` in the job's
container. Who fills it depends on the job:

* a function job's runner downloads every volume before the first call
  (``KINETIC_VOLUMES``; a failure is the runner's ``data`` phase);
* a container job gets an init container, the runner image running
  ``kinetic.runtime.datafetch``, with the same mounts: the user's command starts
  only once every volume is filled, and a failure fails the attempt with
  the init container's message.

emptyDir keeps the restricted Pod Security profile: no host paths, no CSI
driver, nothing the submitting user could not have asked for. FUSE mounts
are not made; the runner says so when a volume asks for one.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kinetic.model.resources import KineticJobSpec

from kinetic_operator.settings import OperatorSettings

VOLUMES_ENV = "KINETIC_VOLUMES"
INIT_CONTAINER_NAME = "kinetic-data"
VOLUME_PREFIX = "kinetic-data-"


def volume_name(index: int) -> str:
    return f"{VOLUME_PREFIX}{index}"


def volumes_json(spec: KineticJobSpec) -> str:
    """The volumes as the pod-side fetcher reads them (wire form)."""
    wire = [
        v.model_dump(by_alias=True, exclude_defaults=True, mode="json") for v in spec.volumes or []
    ]
    return json.dumps(wire, separators=(",", ":"))


def data_command(settings: OperatorSettings) -> list[str]:
    """The init container's command: the runner's interpreter, running kinetic.runtime.datafetch."""
    command = list(settings.runner_command)
    if command and command[-1] == "kinetic.runtime.runner":
        return [*command[:-1], "kinetic.runtime.datafetch"]
    return ["python", "-m", "kinetic.runtime.datafetch"]


def apply(pod_spec: dict[str, Any], spec: KineticJobSpec, settings: OperatorSettings) -> None:
    """Add the emptyDirs, the mounts and (container jobs) the init container to ``pod_spec``."""
    if not spec.volumes:
        return
    mounts = [
        {"name": volume_name(i), "mountPath": v.mount_path} for i, v in enumerate(spec.volumes)
    ]
    pod_spec["volumes"] = [
        *pod_spec.get("volumes", []),
        *({"name": volume_name(i), "emptyDir": {}} for i in range(len(spec.volumes))),
    ]
    main = pod_spec["containers"][0]
    main["volumeMounts"] = [*main.get("volumeMounts", []), *copy.deepcopy(mounts)]
    env = {"name": VOLUMES_ENV, "value": volumes_json(spec)}
    if spec.function is not None:
        main["env"] = [*main.get("env", []), env]
        return
    init: dict[str, Any] = {
        "name": INIT_CONTAINER_NAME,
        "image": settings.default_image,  # the runner image: it has kinetic.runtime.datafetch
        "command": data_command(settings),
        "env": [env, *({"name": k, "value": v} for k, v in settings.cluster_env().items())],
        "volumeMounts": mounts,
        "terminationMessagePath": main["terminationMessagePath"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(main["securityContext"]),
    }
    pod_spec["initContainers"] = [*pod_spec.get("initContainers", []), init]
