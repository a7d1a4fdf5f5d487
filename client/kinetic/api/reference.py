"""The reference API's arguments, environment and positional order, and what each means here.

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

The reference's environment variables are read here too (`context_for`,
`warn_ignored_environment`): ``KINETIC_CLUSTER`` picks a context as
``cluster=`` does; ``KINETIC_PROJECT``, ``KINETIC_ZONE`` and
``KINETIC_BASE_IMAGE_REPO`` cannot matter and are warned about once per
process (`IgnoredSetting`, shown by default: nothing in the user's code names
them, so a `DeprecationWarning` would go unseen).

Positional arguments follow the reference's order. Where that order gave a
position another meaning than this client gave it before, a value passed
there is bound the reference's way and warned about (`ArgumentMoved`, see
`moved_positions`): never rebound in silence.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kinetic.api.config import CONTEXT_ENV, ConfigError
from kinetic.api.kube import KubeClient, client_for, in_cluster, kubeconfig_contexts

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

CLUSTER_ENV = "KINETIC_CLUSTER"
# The reference's environment variables that cannot matter here, with the argument each
# stands in for (its explanation is that argument's, in IGNORED).
IGNORED_ENV: dict[str, str] = {
    "KINETIC_PROJECT": "project",
    "KINETIC_ZONE": "zone",
    "KINETIC_BASE_IMAGE_REPO": "base_image_repo",
}


# `result()`'s positional order before this client took the reference's (on a handle).
RESULT_BEFORE = ("self", "timeout", "cleanup", "on_status_change", "stream_logs")


class IgnoredSetting(UserWarning):
    """A reference API environment variable that cannot matter on Kubernetes (warned once)."""


class ArgumentMoved(FutureWarning):
    """A positional argument bound by the reference API's order, where this client's own
    order used to give that position another meaning."""


class UnsupportedBackend(ValueError):
    """A ``backend=`` this client cannot run jobs on (yet)."""


def accept(where: str, *, backend: str | None = None, **ignored: Any) -> None:
    """Check ``backend`` and warn once about the given arguments that cannot matter.

    ``where`` names the call for the messages (``"kinetic.run"``); ``ignored``
    are keyword arguments named in `IGNORED`, None when not given. The
    warning points at the user's line (`warn_user`).
    """
    check_backend(where, backend)
    given = [name for name, value in ignored.items() if value is not None]
    if not given:
        return
    named = ", ".join(f"{name}=" for name in given)
    verb = "is" if len(given) == 1 else "are"
    why = "; ".join(f"{name}={ignored[name]!r}: {IGNORED[name]}" for name in given)
    warn_user(
        f"{where}(): {named} {verb} accepted for the reference API but not used on "
        f"Kubernetes. {why}.",
        DeprecationWarning,
    )


# This package's folder: frames in it are the client's own, not the user's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_user(message: str, category: type[Warning]) -> None:
    """`warnings.warn`, attributed to the first caller outside this package: the line of
    the user's code that made the call, however many of the client's frames are between."""
    frame = sys._getframe(0)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level)


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
    """How long to wait for a deletion: ``timeout`` or the reference's ``cleanup_timeout``.

    A value that is not a number of seconds is a TypeError naming it: a
    callable or a bool there is most likely an argument passed in this
    client's positional order before it took the reference's.
    """
    for name, value in (("timeout", timeout), ("cleanup_timeout", cleanup_timeout)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise TypeError(
                f"{where}(): {name}={value!r} is not a number of seconds. Positional "
                "arguments follow the reference API's order (timeout, cleanup, "
                "cleanup_timeout, cleanup_poll_interval, stream_logs, on_status_change for "
                "result()); pass the others by keyword."
            )
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
    """The kubeconfig context to use: the one ``cluster`` selects, else ``context``, else
    ``KINETIC_CONTEXT``, else the one ``KINETIC_CLUSTER`` selects (None: the current one).

    Raises `kinetic.ConfigError` (listing the contexts there are) when
    ``cluster`` selects none or several, when there is no kubeconfig to
    select from, or when ``context`` names another one. Warns once about the
    reference's variables that cannot matter (`warn_ignored_environment`).
    """
    warn_ignored_environment()
    if cluster is None and context is None:
        return _context_from_environment(where)
    if cluster is None:
        return context
    if in_cluster():
        raise ConfigError(
            f"{where}(cluster={cluster!r}): cluster= selects a kubeconfig context, but this "
            "process runs in a Pod and talks to its own cluster (KUBECONFIG is not set). "
            "Leave cluster= out, or set KUBECONFIG to a kubeconfig with that context."
        )
    contexts, active, path = kubeconfig_contexts()
    chosen = _select(f"{where}(cluster={cluster!r})", cluster, contexts, active, path)
    if context is not None and context != chosen:
        raise ConfigError(
            f"{where}(cluster={cluster!r}, context={context!r}): cluster= selects the "
            f"kubeconfig context {chosen!r}, not {context!r}; pass only one of them."
        )
    return chosen


def kube_for(
    where: str, cluster: str | None, context: str | None, kube: KubeClient | None
) -> KubeClient:
    """The client a call talks through: ``kube`` when given (then ``cluster`` or ``context``,
    if given too, must select its context), else one for the context `context_for` selects.

    A caller that passes its own client has chosen the cluster: the environment's
    ``KINETIC_CONTEXT`` and ``KINETIC_CLUSTER`` are not asked.
    """
    if kube is None:
        return KubeClient(context_for(where, cluster, context))
    if cluster is None and context is None:
        return kube
    return client_for(context_for(where, cluster, context), kube)


def _context_from_environment(where: str) -> str | None:
    """``KINETIC_CONTEXT``, else the context ``KINETIC_CLUSTER`` selects, else None.

    Both set must agree. In a Pod (no kubeconfig) ``KINETIC_CLUSTER`` is
    ignored with a warning: the Pod talks to its own cluster, and the variable
    may have come in with ``capture_env_vars``.
    """
    named = os.environ.get(CONTEXT_ENV) or None
    cluster = os.environ.get(CLUSTER_ENV) or None
    if cluster is None:
        return named
    if in_cluster():
        warnings.warn(
            f"{CLUSTER_ENV}={cluster!r} is ignored in a Pod: it selects a kubeconfig context, "
            "and this process talks to its own cluster (KUBECONFIG is not set)",
            IgnoredSetting,
            stacklevel=1,  # a fixed place: once per process and value
        )
        return named
    contexts, active, path = kubeconfig_contexts()
    said = f"{CLUSTER_ENV}={cluster!r} (read by {where})"
    chosen = _select(said, cluster, contexts, active, path, how=f"set {CLUSTER_ENV} to")
    if named is not None and named != chosen:
        raise ConfigError(
            f"{where}(): {CLUSTER_ENV}={cluster!r} selects the kubeconfig context {chosen!r}, "
            f"but {CONTEXT_ENV}={named!r}; unset one of them."
        )
    return chosen


def warn_ignored_environment() -> None:
    """Warn once per process (and value) about each reference variable that is set and
    cannot matter here, naming the Kubernetes equivalent."""
    for variable, argument in IGNORED_ENV.items():
        value = os.environ.get(variable)
        if value:
            warnings.warn(
                f"{variable}={value!r} is the reference API's default for {argument}=, which "
                f"is not used on Kubernetes: {IGNORED[argument]}. Unset it to silence this.",
                IgnoredSetting,
                stacklevel=1,  # a fixed place: the warnings registry shows it once per value
            )


F = TypeVar("F", bound=Callable[..., Any])


def moved_positions(where: str, before: Sequence[str]) -> Callable[[F], F]:
    """Bind positional arguments the reference's way, warning where ``before`` (this
    client's order before it took the reference's) gave the position another parameter.

    Only values that are not None warn: None is every parameter's default. The
    warning (`ArgumentMoved`, shown by default) names the value, what it is
    bound to now, what it meant before and how to pass that by keyword. The
    signature seen by `inspect` is the function's own.
    """

    def decorate(fn: F) -> F:
        now = list(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            moved = [
                f"{value!r} is {now[i]}= (it was {before[i]}= before this release; pass "
                f"{before[i]}= by keyword if that is what you meant)"
                for i, value in enumerate(args)
                if i < len(before) and before[i] != now[i] and value is not None
            ]
            if moved:
                warn_user(
                    f"{where}(): positional arguments follow the reference API's order: "
                    + "; ".join(moved),
                    ArgumentMoved,
                )
            return fn(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate


def _select(
    said: str,
    cluster: str,
    contexts: list[dict[str, Any]],
    active: str | None,
    path: str,
    how: str = "pass cluster= (or context=)",
) -> str:
    """The context ``cluster`` names; ``said`` is how the messages quote the request
    (``kinetic.attach(cluster='x')``), ``how`` how to name another one."""
    names = [c.get("name", "") for c in contexts]
    if cluster in names:
        return cluster
    found = [c.get("name", "") for c in contexts if _names_cluster(c, cluster)]
    if len(found) == 1:
        return found[0]
    if not contexts:
        raise ConfigError(
            f"{said}: a cluster name selects a kubeconfig context, but {path} has none. Point "
            f"KUBECONFIG at a kubeconfig with a context named {cluster!r}, or leave it out."
        )
    if found:
        raise ConfigError(
            f"{said}: several contexts of {path} are for that cluster ({', '.join(found)}); "
            "pass context= the one you mean."
        )
    current = f" (now {active!r})" if active else ""
    raise ConfigError(
        f"{said}: {path} has no context for that cluster. Its contexts: "
        f"{', '.join(sorted(names))}. {how[0].upper()}{how[1:]} one of them, or leave it out "
        f"to use the current context{current}."
    )


def _names_cluster(entry: dict[str, Any], cluster: str) -> bool:
    """Whether a kubeconfig context is for ``cluster``: its cluster entry has that name, or
    its name is GKE's for it (``gke_<project>_<zone>_<cluster>``)."""
    name = entry.get("name", "")
    if (entry.get("context") or {}).get("cluster") == cluster:
        return True
    parts = name.split("_")
    return len(parts) == 4 and parts[0] == "gke" and parts[3] == cluster
