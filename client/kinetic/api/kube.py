"""The client's calls to the Kubernetes API: `KubeClient`, one object per kubeconfig context.

Every handle (`JobHandle`, `InputHandle`, `BatchHandle`) asks the API server
through one `KubeClient`: the one it was given (``kube=`` of `kinetic.attach`
and `kinetic.attach_batch`), or one made for its context. A process that holds
many handles, such as the dashboard's server, gives them all its one client,
so every handle, watch and action goes the same way. The client is never saved
with a handle: it is how to ask, not what was asked.

The client never orchestrates; it creates resources, reads their status and
deletes them. Waiting is done with watches (resumed from the last
resourceVersion, re-listed on 410 Gone), never a fixed-interval poll.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from functools import lru_cache
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client import ApiException
from kubernetes.config.config_exception import ConfigException

from kinetic.api import waiting
from kinetic.model import names
from kinetic.model import resources as r

_IN_CLUSTER_NS = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# What the kubelet answers, in place of a log, for a container it has begun to remove.
_KUBELET_LOST_LOG = re.compile(r"unable to retrieve container logs for [a-z]+://[0-9a-f]+")


def kubelet_lost_log(text: str) -> bool:
    """Whether ``text`` is not a log but the kubelet's word that the container is being
    removed (its log file went with it), sent as if it were the log: the Pod is as good as
    gone, and its log is the one archived before it was deleted."""
    return _KUBELET_LOST_LOG.fullmatch(text.strip()) is not None


LIST_PAGE = 250  # objects per LIST response: a namespace of many large batches stays bounded


class ClusterUnreachable(RuntimeError):
    """No kubeconfig, or the API server does not answer."""


class ConflictError(RuntimeError):
    """A guarded update kept losing to other writers."""


def in_cluster() -> bool:
    """Whether the client uses the Pod's own service account (no kubeconfig is read)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


def kubeconfig_path() -> str:
    """The kubeconfig file this process reads: KUBECONFIG, else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


@lru_cache(maxsize=8)
def _connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """One API client per kubeconfig file and context (None: the Pod's service account),
    shared by every `KubeClient` that names them: one connection pool, one credential read."""
    if kubeconfig is None:
        config.load_incluster_config()
        return client.ApiClient()
    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, FileNotFoundError) as e:
        where = os.environ.get("KUBECONFIG", "~/.kube/config")
        raise ClusterUnreachable(
            f"No usable kubeconfig ({where}): {e}. Point KUBECONFIG at your cluster, "
            "or start the local one with `kinetic local up` and `source .local/env`."
        ) from e


def kubeconfig_contexts() -> tuple[list[dict[str, Any]], str | None, str]:
    """The kubeconfig's contexts, the current one's name, and the file read.

    No contexts (an empty list) when there is no usable kubeconfig.
    """
    path = kubeconfig_path()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (ConfigException, FileNotFoundError):
        return [], None, path
    return list(contexts or []), (active or {}).get("name"), path


def kube_reason(exc: ApiException) -> str:
    """The API server's own message (a webhook's or the schema's), else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


class _Expired(Exception):
    """A watch's resourceVersion is too old (410 Gone): read the object again."""


def transient(error: BaseException) -> bool:
    """Whether a failed call may succeed when made again: the connection dropped or timed
    out, or the API server was briefly unable (429, 5xx). Refusals (403, 404, 422) are not."""
    if isinstance(error, ApiException):
        status = error.status or 0
        return status in (0, 429) or status >= 500
    if isinstance(error, TimeoutError):  # our own wait's end (an OSError too), not the network's
        return False
    return isinstance(error, OSError | urllib3.exceptions.HTTPError)


class KubeClient:
    """The API server of one kubeconfig context (None: the current one, or the Pod's own
    service account inside a Pod), and every call the client makes to it.

    Making one reads nothing: the kubeconfig is read at the first call, when
    ``KUBECONFIG`` names the file (the library would read it once, at import).
    It holds only its context, so it is cheap to make, copy and pickle, and
    is safe to share between threads.
    """

    __slots__ = ("context",)

    def __init__(self, context: str | None = None) -> None:
        self.context = context

    def __repr__(self) -> str:
        return f"KubeClient(context={self.context!r})"

    # ----------------------------------------------------------------- the connection

    @property
    def api(self) -> client.ApiClient:
        """The API client under every call (raises `ClusterUnreachable` without a kubeconfig)."""
        return _connect(None if in_cluster() else kubeconfig_path(), self.context)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def current_namespace(self) -> str:
        """The namespace of the kubeconfig context, or of the Pod when in-cluster."""
        if os.path.exists(_IN_CLUSTER_NS) and not os.environ.get("KUBECONFIG"):
            with open(_IN_CLUSTER_NS) as f:
                return f.read().strip()
        try:
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig_path())
        except (ConfigException, FileNotFoundError):
            return "default"
        chosen = active
        if self.context:
            chosen = next((c for c in contexts if c["name"] == self.context), active)
        return (chosen or {}).get("context", {}).get("namespace") or "default"

    # ----------------------------------------------------------------- resources

    def get(self, plural: str, namespace: str, name: str) -> dict | None:
        """The resource, or None when it does not exist."""
        try:
            return self.custom.get_namespaced_custom_object(
                r.GROUP, r.VERSION, namespace, plural, name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def read_now(self, plural: str, namespace: str, name: str) -> tuple[dict | None, str]:
        """The resource (None when it does not exist) and the API server's version of this
        moment, to watch from: the version of a list, never the object's own, which the
        server forgets (410 Gone) once it has compacted past the object's last change."""
        found = self.custom.list_namespaced_custom_object(
            r.GROUP, r.VERSION, namespace, plural, field_selector=f"metadata.name={name}"
        )
        items = found.get("items") or []
        return (items[0] if items else None), found["metadata"]["resourceVersion"]

    def create(self, plural: str, namespace: str, body: dict) -> dict:
        # Say it is JSON: recent clients send no Content-Type on a create.
        return self.custom.create_namespaced_custom_object(
            r.GROUP, r.VERSION, namespace, plural, body, _content_type="application/json"
        )

    def list_(self, plural: str, namespace: str, selector: str = "") -> list:
        return list(self.iter_list(plural, namespace, selector))

    def iter_list(
        self, plural: str, namespace: str, selector: str = "", page: int = LIST_PAGE
    ) -> Iterator[dict[str, Any]]:
        """Every object of `plural` in the namespace, fetched `page` at a time (limit/continue)."""
        token: str | None = None
        while True:
            got = self.custom.list_namespaced_custom_object(
                r.GROUP,
                r.VERSION,
                namespace,
                plural,
                label_selector=selector,
                limit=page,
                **({"_continue": token} if token else {}),
            )
            yield from got["items"]
            token = (got.get("metadata") or {}).get("continue")
            if not token:
                return

    def patch_spec(
        self, plural: str, namespace: str, name: str, spec: dict
    ) -> dict[str, Any] | None:
        """Merge-patch the spec (cancel, maxConcurrent); returns None when it is gone."""
        try:
            return self.custom.patch_namespaced_custom_object(
                r.GROUP, r.VERSION, namespace, plural, name, {"spec": spec}
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def update_spec(
        self,
        plural: str,
        namespace: str,
        name: str,
        change: Callable[[dict], dict | None],
        attempts: int = 20,
    ) -> dict | None:
        """Merge-patch the spec that ``change`` computes from a fresh read, never from a stale one.

        The patch carries the resourceVersion it was computed from, so the API
        server refuses it (409) if anyone wrote the object in between; then the
        object is read again and ``change`` asked again. ``change`` returns None
        when nothing needs writing. Returns the object as written (or as read,
        when nothing changed), None when it does not exist.
        """
        for attempt in range(attempts):
            obj = self.get(plural, namespace, name)
            if obj is None:
                return None
            patch = change(obj)
            if patch is None:
                return obj
            version = obj["metadata"]["resourceVersion"]
            body = {"metadata": {"resourceVersion": version}, "spec": patch}
            try:
                return self.custom.patch_namespaced_custom_object(
                    r.GROUP, r.VERSION, namespace, plural, name, body
                )
            except ApiException as e:
                if e.status == 404:
                    return None
                if e.status != 409:
                    raise
            time.sleep(min(0.05 * (attempt + 1), 0.5))
        raise ConflictError(
            f"{waiting.kind_of(plural)} {namespace}/{name} changed under every one of "
            f"{attempts} attempts to update it; try again"
        )

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        """Delete and let the garbage collector remove the owned Pods. False if absent."""
        try:
            self.custom.delete_namespaced_custom_object(
                r.GROUP,
                r.VERSION,
                namespace,
                plural,
                name,
                body=client.V1DeleteOptions(propagation_policy="Background"),
            )
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    # ----------------------------------------------------------------- pods, config maps

    def list_pods(self, namespace: str, selector: str) -> list[client.V1Pod]:
        """The Pods matching a label selector (one LIST)."""
        return self.core.list_namespaced_pod(namespace, label_selector=selector).items

    def pod_log(self, name: str, namespace: str, tail_lines: int | None = None) -> str | None:
        """A Pod's log; None when the Pod is gone, '' when its container has not started yet."""
        kwargs = {} if tail_lines is None else {"tail_lines": tail_lines}
        try:
            text = self.core.read_namespaced_pod_log(name, namespace, **kwargs)
        except ApiException as e:
            if e.status == 404:
                return None
            if e.status == 400:  # "container ... is waiting to start": nothing written yet
                return ""
            raise
        return None if kubelet_lost_log(text) else text

    def follow_log(self, name: str, namespace: str) -> Any:
        """A Pod's log from its first line, as the Pod writes it: the open response (read it
        with ``stream()``, end it with ``close()``, give it back with ``release_conn()``)."""
        return self.core.read_namespaced_pod_log(
            name, namespace, follow=True, _preload_content=False
        )

    def delete_pod(self, name: str, namespace: str) -> bool:
        """Delete a Pod; False when it was already gone."""
        try:
            self.core.delete_namespaced_pod(name, namespace)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def config_map(self, namespace: str, name: str) -> client.V1ConfigMap:
        """A ConfigMap (the operator's published settings, the policy); ApiException as the
        API server answers (404 when there is none)."""
        return self.core.read_namespaced_config_map(name, namespace)

    # ----------------------------------------------------------------- waiting

    def watch_one(
        self, plural: str, namespace: str, name: str, timeout: float | None = None
    ) -> Iterator[dict | None]:
        """Yield the resource now and after every change; None once it is deleted.

        Ends when the caller stops iterating; raises TimeoutError after `timeout`, naming the
        object's kind, its phase and what it waits on (`kinetic.api.waiting`). A watch the
        API server or the network breaks off (a reset connection, a 5xx) is started again,
        a second later, from a fresh read, which may yield the same state twice; after
        `WATCH_RETRY_SECONDS` of nothing but such failures the last one is raised.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        failing_since: float | None = None
        while True:
            try:
                for obj in self._watch_from_now(plural, namespace, name, deadline, timeout):
                    failing_since = None
                    yield obj
                return
            except Exception as e:
                if not transient(e):
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.WATCH_RETRY_SECONDS:
                    raise
                time.sleep(1.0)

    WATCH_RETRY_SECONDS = 60.0  # how long `watch_one` keeps starting a failing watch again

    def _watch_from_now(
        self,
        plural: str,
        namespace: str,
        name: str,
        deadline: float | None,
        timeout: float | None,
    ) -> Iterator[dict | None]:
        """The object read now, then each change; read again when the API server has
        forgotten the version watched from (410 Gone)."""
        while True:
            obj, version = self.read_now(plural, namespace, name)
            yield obj
            if obj is None:
                return
            try:
                yield from self._changes(plural, namespace, name, obj, version, deadline, timeout)
                return
            except _Expired:
                time.sleep(0.5)  # read again, gently: the version is forgotten only on compaction

    def _changes(
        self,
        plural: str,
        namespace: str,
        name: str,
        obj: dict,
        version: str,
        deadline: float | None,
        timeout: float | None,
    ) -> Iterator[dict | None]:
        """Each change of ``obj`` after ``version``, then None for its deletion;
        TimeoutError at the deadline; `_Expired` when the version is too old to watch."""
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(self._timed_out(plural, namespace, name, timeout or 0, obj))
            with closing(self._events(plural, namespace, name, version, remaining)) as events:
                for kind, body in events:
                    version = body["metadata"]["resourceVersion"]
                    if kind == "DELETED":
                        yield None
                        return
                    if kind in ("ADDED", "MODIFIED"):
                        obj = body
                        yield body
                    if deadline is not None and time.monotonic() >= deadline:
                        break

    def _events(
        self, plural: str, namespace: str, name: str, version: str, remaining: float | None
    ) -> Generator[tuple[str, dict], None, None]:
        """One watch of the object from ``version``: each event's type and object, for at
        most a minute (or ``remaining`` seconds); `_Expired` when the API server says
        ``version`` is too old (410 Gone), for the caller to read the object again (watching
        from the same version would only be refused again)."""
        w = watch.Watch()
        try:
            for event in w.stream(
                self.custom.list_namespaced_custom_object,
                r.GROUP,
                r.VERSION,
                namespace,
                plural,
                field_selector=f"metadata.name={name}",
                resource_version=version,
                timeout_seconds=int(min(remaining or 60, 60)) or 1,
                allow_watch_bookmarks=True,
            ):
                yield event["type"], event["object"]
        except ApiException as e:
            if e.status == 410:
                raise _Expired(version) from e
            raise
        finally:
            w.stop()

    def _timed_out(self, plural: str, namespace: str, name: str, timeout: float, obj: dict) -> str:
        """What a timed-out wait says: a batch's waiting Pods are read now, once, for their
        reasons (its status only counts inputs); a job's status message already has its own.
        Only Pods the batch owns count: another Pod may carry its label."""
        pods: list[waiting.PodWait] = []
        if plural == r.BATCH_PLURAL:
            try:
                listed = self.list_pods(namespace, f"{names.LABEL_BATCH}={name}")
            except ApiException:  # no right to list Pods: the status alone is said
                listed = []
            uid = obj["metadata"].get("uid")
            owned = [
                p for p in listed if any(o.uid == uid for o in p.metadata.owner_references or [])
            ]
            pods = [w for w in map(waiting.pod_wait, owned) if w is not None]
        return waiting.timed_out(plural, namespace, name, timeout, obj, pods)


class ThroughContext:
    """What a handle (a dataclass with ``context`` and ``kube`` fields) asks the API server
    through: the client it was given, else one made for its context."""

    context: str | None
    kube: KubeClient | None

    def __post_init__(self) -> None:
        """A handle given a client talks through that client's context (`client_for`)."""
        if self.kube is not None:
            self.context = client_for(self.context, self.kube).context

    @property
    def _kube(self) -> KubeClient:
        """The client this handle asks through: the one it was given, else one made for its
        context (again if the context was changed since)."""
        if self.kube is None or self.kube.context != self.context:
            self.kube = KubeClient(self.context)
        return self.kube


def client_for(context: str | None, kube: KubeClient | None) -> KubeClient:
    """``kube`` when given, else a client for ``context``; refuses a ``kube`` of another context.

    Where a call takes both (`kinetic.attach(..., context=, kube=)`), the handle
    it returns talks through ``kube``: a different ``context`` would say otherwise.
    """
    if kube is None:
        return KubeClient(context)
    if context is not None and context != kube.context:
        raise ValueError(
            f"context={context!r} and kube={kube!r} name two kubeconfig contexts; pass one "
            "of them (a handle talks through its kube client's context)"
        )
    return kube
