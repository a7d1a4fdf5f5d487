"""The reference API's keyword arguments, and what each means on Kubernetes.

Code written for the reference (GKE) client passes arguments this client has
its own words for, or no use for. They are accepted everywhere the reference
takes them, and handled here once:

* ``cluster`` names the kubeconfig context to use (`context_for`): a context
  of that name, else the one context whose cluster entry has that name or
  whose GKE name (``gke_<project>_<zone>_<cluster>``) ends with it. A name that
  selects none, or several, is an error listing the contexts there are: a
  cluster named on purpose is never silently replaced by the current one.
* ``backend``: ``"gke"`` (the reference's default) or None is how every job
  runs here. ``"pathways"`` is refused, naming what to use instead (``hosts=``,
  a gang of Pods); any other value is refused too (`accept`).
* ``project``, ``zone``, ``base_image_repo``, ``poll_interval``,
  ``poll_timeout`` and ``cleanup_poll_interval`` cannot change what happens
  here. They are accepted with one `DeprecationWarning` per call naming each
  one given and its Kubernetes equivalent (`IGNORED`).
* ``cleanup_timeout`` bounds the wait for a deletion, as the handles'
  ``timeout`` does (`cleanup_wait`).
"""

from __future__ import annotations

import warnings
from typing import Any

from kinetic.api import kube
from kinetic.api.config import ConfigError

DEFAULT_CLEANUP_TIMEOUT = 180.0

_CONTEXT = (
    "the cluster is the one of your kubeconfig context: pass context= (or cluster= naming a "
    "context) or set KINETIC_CONTEXT; storage is the operator's storage root"
)
_WHOLE_BATCH = (
    "a KineticBatch holds every input from the moment it is created, so attaching never "
    "waits for inputs to appear; wait for the inputs to end with batch.wait(timeout=...)"
)

# The Kubernetes equivalent of each reference argument whose value cannot matter here.
IGNORED: dict[str, str] = {
    "project": _CONTEXT,
    "zone": _CONTEXT,
    "base_image_repo": (
        "the default image is the operator's runner image (the chart's runnerImage "
        "settings); to run your own image pass image= (or container_image=)"
    ),
    "poll_interval": _WHOLE_BATCH,
    "poll_timeout": _WHOLE_BATCH,
    "cleanup_poll_interval": (
        "a deletion is followed with a watch, not polled; cleanup_timeout= (or timeout=) "
        "bounds the wait"
    ),
}

BACKENDS = ("gke",)


class UnsupportedBackend(ValueError):
    """A ``backend=`` this client cannot run jobs on (yet)."""


def accept(where: str, *, backend: str | None = None, depth: int = 1, **ignored: Any) -> None:
    """Check ``backend`` and warn once about the given arguments that cannot matter.

    ``where`` names the call for the messages (``"kinetic.run"``); ``ignored``
    are keyword arguments named in `IGNORED`, None when not given. ``depth``
    is how many calls the user's line is above the function calling this one
    (1: the user called it), so the warning points at the user's code.
    """
    check_backend(where, backend)
    given = [name for name, value in ignored.items() if value is not None]
    if not given:
        return
    named = ", ".join(f"{name}=" for name in given)
    verb = "is" if len(given) == 1 else "are"
    why = "; ".join(f"{name}={ignored[name]!r}: {IGNORED[name]}" for name in given)
    warnings.warn(
        f"{where}(): {named} {verb} accepted for the reference API but not used on "
        f"Kubernetes. {why}.",
        DeprecationWarning,
        stacklevel=2 + depth,
    )


def check_backend(where: str, backend: str | None) -> None:
    """``backend="gke"`` or None is accepted; "pathways" and anything else are refused."""
    if backend is None or backend in BACKENDS:
        return
    if backend == "pathways":
        raise UnsupportedBackend(
            f"{where}(backend='pathways'): Pathways is not supported; a multi-host job runs "
            "here as a gang of Pods instead. Leave backend= out (or pass backend='gke') and "
            "pass hosts=N, or a multi-host accelerator such as 'tpu-v5e-16' (4 hosts)."
        )
    raise UnsupportedBackend(
        f"{where}(backend={backend!r}): there is no such backend. Leave backend= out (or "
        "pass the reference's default, backend='gke'): jobs run on the cluster of your "
        "kubeconfig context."
    )


def cleanup_wait(where: str, timeout: float | None, cleanup_timeout: float | None) -> float:
    """How long to wait for a deletion: ``timeout`` or the reference's ``cleanup_timeout``."""
    if timeout is not None and cleanup_timeout is not None and timeout != cleanup_timeout:
        raise ValueError(
            f"{where}(): timeout={timeout} and cleanup_timeout={cleanup_timeout} both bound "
            "the wait for the deletion; pass one of them."
        )
    for value in (timeout, cleanup_timeout):
        if value is not None:
            return value
    return DEFAULT_CLEANUP_TIMEOUT


def context_for(where: str, cluster: str | None, context: str | None) -> str | None:
    """The kubeconfig context to use: the one ``cluster`` selects, else ``context``.

    Raises `kinetic.ConfigError` (listing the contexts there are) when
    ``cluster`` selects none or several, when there is no kubeconfig to
    select from, or when ``context`` names another one.
    """
    if cluster is None:
        return context
    if kube.in_cluster():
        raise ConfigError(
            f"{where}(cluster={cluster!r}): cluster= selects a kubeconfig context, but this "
            "process runs in a Pod and talks to its own cluster (KUBECONFIG is not set). "
            "Leave cluster= out, or set KUBECONFIG to a kubeconfig with that context."
        )
    contexts, active, path = kube.kubeconfig_contexts()
    chosen = _select(where, cluster, contexts, active, path)
    if context is not None and context != chosen:
        raise ConfigError(
            f"{where}(cluster={cluster!r}, context={context!r}): cluster= selects the "
            f"kubeconfig context {chosen!r}, not {context!r}; pass only one of them."
        )
    return chosen


def _select(
    where: str, cluster: str, contexts: list[dict[str, Any]], active: str | None, path: str
) -> str:
    names = [c.get("name", "") for c in contexts]
    if cluster in names:
        return cluster
    found = [c.get("name", "") for c in contexts if _names_cluster(c, cluster)]
    if len(found) == 1:
        return found[0]
    if not contexts:
        raise ConfigError(
            f"{where}(cluster={cluster!r}): cluster= selects a kubeconfig context, but "
            f"{path} has none. Point KUBECONFIG at a kubeconfig with a context named "
            f"{cluster!r}, or leave cluster= out."
        )
    if found:
        raise ConfigError(
            f"{where}(cluster={cluster!r}): several contexts of {path} are for that cluster "
            f"({', '.join(found)}); pass context= the one you mean."
        )
    current = f" (now {active!r})" if active else ""
    raise ConfigError(
        f"{where}(cluster={cluster!r}): {path} has no context for that cluster. Its "
        f"contexts: {', '.join(sorted(names))}. Pass cluster= (or context=) one of them, or "
        f"leave it out to use the current context{current}."
    )


def _names_cluster(entry: dict[str, Any], cluster: str) -> bool:
    """Whether a kubeconfig context is for ``cluster``: its cluster entry has that name, or
    its name is GKE's for it (``gke_<project>_<zone>_<cluster>``)."""
    name = entry.get("name", "")
    if (entry.get("context") or {}).get("cluster") == cluster:
        return True
    parts = name.split("_")
    return len(parts) == 4 and parts[0] == "gke" and parts[3] == cluster
