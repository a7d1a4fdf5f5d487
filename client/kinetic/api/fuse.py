"""``kinetic.Data(..., fuse=True)`` at submission: mount it, or refuse before any upload.

A fuse mount needs the GCS FUSE CSI driver on the cluster (its CSIDriver
object, `kinetic.model.data.GCSFUSE_DRIVER`). The client reads that object
once per submission that has fuse data, and only then; `refusal` decides:

* the driver is there: nothing to refuse. The operator mounts each fuse
  volume (and each fuse argument, which `kinetic.api.staging` turns into a
  volume under `kinetic.model.data.FUSE_ARGUMENTS_ROOT`);
* it is not: `FuseUnavailable`, naming each fuse `Data`, the driver and the
  fixes, before anything is uploaded or created;
* the user may not read CSIDrivers (a 403: CSIDrivers are cluster-scoped,
  and many users cannot list cluster objects), so the client cannot tell:
  nothing is refused here. The operator, which can read them, decides, and
  its refusal is what the job's failure (or the webhook's answer) says.

Whatever the driver, local data can be mounted only once uploaded to
Cloud Storage: with a ``file://`` storage root it is refused (it would be
downloaded with fuse off). An ``hf://`` dataset is refused by `Data` itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from kinetic.api.data import Data
from kinetic.model import limits
from kinetic.model.data import (
    FUSE_ARGUMENTS_ROOT,
    GCS,
    GCSFUSE_DRIVER,
    DataError,
    fuse_driver_missing,
)

log = logging.getLogger("kinetic")

__all__ = ["FuseUnavailable", "driver_present", "refusal"]


class FuseUnavailable(DataError):
    """``fuse=True`` data this cluster cannot mount; the message names it and the fix."""


def refusal(
    volumes: Mapping[str, Data],
    arguments: Sequence[tuple[str, Data]],
    storage_root: str,
    driver: bool | None,
) -> str | None:
    """Why a submission's fuse data cannot be mounted, or None (mount it, or let the
    operator decide when ``driver`` is None: the client could not read the CSIDriver).

    ``volumes`` are ``volumes=`` (mount path -> Data); ``arguments`` each `Data`
    of the call or the batch's inputs with where it is (``argument 0``,
    ``input 3['ds']``). Pure: the caller reads the driver, and only when
    some `Data` has ``fuse=True``.
    """
    named = [(f"volumes[{path!r}]", d) for path, d in volumes.items()] + list(arguments)
    fused = [(where, d) for where, d in named if d.fuse]
    if not fused:
        return None
    local = [f"{where} {d!r}" for where, d in fused if d.is_local]
    if local and not storage_root.startswith(GCS):
        return (
            f"{', '.join(local)}: local data is uploaded to the storage root {storage_root}, "
            "which is not Cloud Storage, so it cannot be mounted through GCS FUSE; drop "
            "fuse=True to have it downloaded into the pod"
        )
    mounts = _argument_mount_problem(volumes, [d for _where, d in arguments if d.fuse])
    if mounts is not None:
        return mounts
    if driver is False:
        return fuse_driver_missing(", ".join(f"{where} {d!r}" for where, d in fused))
    return None


def _argument_mount_problem(volumes: Mapping[str, Data], fused: Sequence[Data]) -> str | None:
    """Each distinct fuse argument takes a volume under FUSE_ARGUMENTS_ROOT: they must fit
    beside ``volumes=`` (count, and no volume over or inside that folder)."""
    count = len(set(fused))
    if not count:
        return None
    total = len(volumes) + count
    if total > limits.MAX_VOLUMES:
        return (
            f"{count} different fuse=True Data arguments and {len(volumes)} volumes make "
            f"{total} mounts, at most {limits.MAX_VOLUMES} allowed; pass the same Data "
            "(one mount), or mount the common folder once with volumes="
        )
    nested = limits.nested_mount_paths([*volumes, f"{FUSE_ARGUMENTS_ROOT}/0"])
    if nested is not None:
        return (
            f"volumes: {nested}; {FUSE_ARGUMENTS_ROOT} is where fuse=True arguments are "
            "mounted, so choose another mount path"
        )
    return None


def driver_present(context: str | None) -> bool | None:
    """Whether the cluster has the GCS FUSE CSI driver; None when this user cannot tell.

    One GET of the cluster-scoped CSIDriver object. A 404 means absent; a
    refusal (401/403) or any other failure means "cannot tell", and the
    operator decides instead.
    """
    from kubernetes import client
    from kubernetes.client import ApiException

    from kinetic.api.kube import ClusterUnreachable, KubeClient

    try:
        client.StorageV1Api(KubeClient(context).api).read_csi_driver(
            GCSFUSE_DRIVER, _request_timeout=30
        )
    except ApiException as e:
        if e.status == 404:
            return False
        log.info(
            "cannot read CSIDriver %s (HTTP %s): the operator will judge fuse=True",
            GCSFUSE_DRIVER,
            e.status,
        )
        return None
    except ClusterUnreachable:
        return None
    return True
