"""Where the client's settings come from, resolved in one place.

Order, first match wins: an explicit argument, a ``KINETIC_*`` environment
variable, the ConfigMap the operator publishes (so a client in a cluster that
runs the operator needs no configuration), the kubeconfig's current context,
then built-in defaults.

The variables (the README lists them all, with the reference's):
``KINETIC_CONTEXT`` the kubeconfig context, ``KINETIC_NAMESPACE`` the
namespace, ``KINETIC_STORAGE_ROOT`` the storage root, ``KINETIC_IMAGE`` the
default image and ``KINETIC_OPERATOR_NAMESPACE`` where the operator publishes
its settings and policy. The reference's ``KINETIC_CLUSTER`` (a cluster's
name, picking a context) and the ones that cannot matter here are
`kinetic.api.reference`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from kinetic.model.limits import DEFAULT_MAX_INPUTS

DEFAULT_OPERATOR_NAMESPACE = "kinetic-system"
CONFIGMAP_NAME = "kinetic-config"

CONTEXT_ENV = "KINETIC_CONTEXT"
NAMESPACE_ENV = "KINETIC_NAMESPACE"
STORAGE_ROOT_ENV = "KINETIC_STORAGE_ROOT"
IMAGE_ENV = "KINETIC_IMAGE"
OPERATOR_NAMESPACE_ENV = "KINETIC_OPERATOR_NAMESPACE"


class ConfigError(RuntimeError):
    """A setting is missing or wrong; the message says how to set it."""


@dataclass(frozen=True)
class ClientConfig:
    """Everything the client needs to talk to one cluster."""

    namespace: str
    storage_root: str
    context: str | None = None
    image: str | None = None
    # The operator's cap on inputs per batch (its published maxInputs), checked before upload.
    max_inputs: int = DEFAULT_MAX_INPUTS
    # The accelerator names the operator's catalog accepts (its published list); None when
    # no operator published one, and the built-in catalog is what the client checks against.
    accelerators: tuple[str, ...] | None = None
    # The Python versions the operator has runner images for (its published list); None
    # when no operator published one.
    runner_pythons: tuple[str, ...] | None = None


def resolve(
    namespace: str | None = None,
    context: str | None = None,
    storage_root: str | None = None,
) -> ClientConfig:
    """Resolve the client configuration; raises ConfigError naming what is missing."""
    context = context or os.environ.get(CONTEXT_ENV) or None
    published, unread = _published(context)
    root = storage_root or os.environ.get(STORAGE_ROOT_ENV) or published.get("storageRoot")
    if not root:
        where = f"ConfigMap {operator_namespace()}/{CONFIGMAP_NAME}"
        if unread is not None:
            raise ConfigError(
                f"Could not read the operator's settings ({where}): {unread}. They name the "
                f"storage root; try again, or pass storage_root='gs://bucket/prefix' or set "
                f"{STORAGE_ROOT_ENV}."
            )
        raise ConfigError(
            "No storage root for payloads and results. Pass storage_root='gs://bucket/prefix', "
            f"set {STORAGE_ROOT_ENV}, or install the Kinetic operator, which publishes it in "
            f"{where}."
        )
    ns = namespace or default_namespace(context)
    image = os.environ.get(IMAGE_ENV) or published.get("defaultImage")
    return ClientConfig(
        namespace=ns,
        storage_root=root.rstrip("/"),
        context=context,
        image=image,
        max_inputs=_int(published.get("maxInputs"), DEFAULT_MAX_INPUTS),
        accelerators=_names(published.get("accelerators")),
        runner_pythons=_names(published.get("runnerPythons")),
    )


def _names(value: str | None) -> tuple[str, ...] | None:
    names = tuple(n.strip() for n in (value or "").split(",") if n.strip())
    return names or None


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def operator_namespace() -> str:
    return os.environ.get(OPERATOR_NAMESPACE_ENV, DEFAULT_OPERATOR_NAMESPACE)


def default_namespace(context: str | None = None) -> str:
    """The namespace when none is passed: ``KINETIC_NAMESPACE``, else the context's own."""
    return os.environ.get(NAMESPACE_ENV) or _kubeconfig_namespace(context)


class _Unread(Exception):
    """The API server failed to answer for the published settings (the message says how)."""


def _published(context: str | None) -> tuple[dict[str, str], str | None]:
    """The operator's published settings ({} when there is no operator or no access), and
    why they could not be read when the API server failed to answer (None otherwise): a
    busy or restarting API server is not the same as no operator, and must not read so.
    Only an answer is kept for the process; a failure is asked again next time."""
    from kinetic.api.kube import kubeconfig_path

    try:
        return _read_published(kubeconfig_path(), context), None
    except _Unread as e:
        return {}, str(e)


@lru_cache(maxsize=8)
def _read_published(kubeconfig: str, context: str | None) -> dict[str, str]:
    """The published settings of ``context`` in ``kubeconfig`` (the cache's key: another
    kubeconfig is another cluster); raises `_Unread` when the API server failed to answer."""
    from kubernetes.client import ApiException

    from kinetic.api.kube import ClusterUnreachable, KubeClient, kube_reason

    try:
        cm = KubeClient(context).config_map(operator_namespace(), CONFIGMAP_NAME)
    except ApiException as e:
        if e.status in (401, 403, 404):  # no operator here, or not ours to read
            return {}
        raise _Unread(f"the API server answered {e.status} {kube_reason(e)}") from e
    except ClusterUnreachable as e:
        raise _Unread(str(e)) from e
    return dict(cm.data or {})


def _kubeconfig_namespace(context: str | None) -> str:
    from kinetic.api.kube import KubeClient

    return KubeClient(context).current_namespace()
