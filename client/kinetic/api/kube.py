"""The client's few calls to the Kubernetes API: clients, the two resources, watches.

The client never orchestrates; it creates resources, reads their status and
deletes them. Waiting is done with watches (resumed from the last
resourceVersion, re-listed on 410 Gone), never a fixed-interval poll.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client import ApiException
from kubernetes.config.config_exception import ConfigException

from kinetic.api import waiting
from kinetic.model import names
from kinetic.model import resources as r

_IN_CLUSTER_NS = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class ClusterUnreachable(RuntimeError):
    """No kubeconfig, or the API server does not answer."""


def in_cluster() -> bool:
    """Whether the client uses the Pod's own service account (no kubeconfig is read)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


@lru_cache(maxsize=8)
def api_client(context: str | None = None) -> client.ApiClient:
    """An API client for the kubeconfig context (or in-cluster config inside a pod)."""
    if in_cluster():
        config.load_incluster_config()
        return client.ApiClient()
    try:
        # The library reads KUBECONFIG once, at import; read it now instead.
        return config.new_client_from_config(config_file=_kubeconfig(), context=context)
    except (ConfigException, FileNotFoundError) as e:
        where = os.environ.get("KUBECONFIG", "~/.kube/config")
        raise ClusterUnreachable(
            f"No usable kubeconfig ({where}): {e}. Point KUBECONFIG at your cluster, "
            "or start the local one with `kinetic local up` and `source .local/env`."
        ) from e


def _kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def kubeconfig_contexts() -> tuple[list[dict[str, Any]], str | None, str]:
    """The kubeconfig's contexts, the current one's name, and the file read.

    No contexts (an empty list) when there is no usable kubeconfig.
    """
    path = _kubeconfig()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (ConfigException, FileNotFoundError):
        return [], None, path
    return list(contexts or []), (active or {}).get("name"), path


def core(context: str | None = None) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(context))


def custom(context: str | None = None) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client(context))


def current_namespace(context: str | None = None) -> str:
    """The namespace of the kubeconfig context, or of the pod when in-cluster."""
    if os.path.exists(_IN_CLUSTER_NS) and not os.environ.get("KUBECONFIG"):
        with open(_IN_CLUSTER_NS) as f:
            return f.read().strip()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=_kubeconfig())
    except (ConfigException, FileNotFoundError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), active) if context else active
    return (chosen or {}).get("context", {}).get("namespace") or "default"


# --------------------------------------------------------------------------- resources


def get(plural: str, namespace: str, name: str, context: str | None = None) -> dict | None:
    """The resource, or None when it does not exist."""
    try:
        return custom(context).get_namespaced_custom_object(
            r.GROUP, r.VERSION, namespace, plural, name
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def create(plural: str, namespace: str, body: dict, context: str | None = None) -> dict:
    # Say it is JSON: recent clients send no Content-Type on a create.
    return custom(context).create_namespaced_custom_object(
        r.GROUP, r.VERSION, namespace, plural, body, _content_type="application/json"
    )


def list_(plural: str, namespace: str, context: str | None = None, selector: str = "") -> list:
    return list(iter_list(plural, namespace, context, selector))


LIST_PAGE = 250  # objects per LIST response: a namespace of many large batches stays bounded


def iter_list(
    plural: str,
    namespace: str,
    context: str | None = None,
    selector: str = "",
    page: int = LIST_PAGE,
) -> Iterator[dict[str, Any]]:
    """Every object of `plural` in the namespace, fetched `page` at a time (limit/continue)."""
    token: str | None = None
    while True:
        got = custom(context).list_namespaced_custom_object(
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
    plural: str, namespace: str, name: str, spec: dict, context: str | None = None
) -> dict[str, Any] | None:
    """Merge-patch the spec (cancel, maxConcurrent); returns None when it is gone."""
    try:
        return custom(context).patch_namespaced_custom_object(
            r.GROUP, r.VERSION, namespace, plural, name, {"spec": spec}
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise


class ConflictError(RuntimeError):
    """A guarded update kept losing to other writers."""


def update_spec(
    plural: str,
    namespace: str,
    name: str,
    change: Callable[[dict], dict | None],
    context: str | None = None,
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
        obj = get(plural, namespace, name, context)
        if obj is None:
            return None
        patch = change(obj)
        if patch is None:
            return obj
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": patch}
        try:
            return custom(context).patch_namespaced_custom_object(
                r.GROUP, r.VERSION, namespace, plural, name, body
            )
        except ApiException as e:
            if e.status == 404:
                return None
            if e.status != 409:
                raise
        time.sleep(min(0.05 * (attempt + 1), 0.5))
    raise ConflictError(
        f"{waiting.kind_of(plural)} {namespace}/{name} changed under every one of {attempts} "
        "attempts to update it; try again"
    )


def delete(plural: str, namespace: str, name: str, context: str | None = None) -> bool:
    """Delete and let the garbage collector remove the owned Pods. False if absent."""
    try:
        custom(context).delete_namespaced_custom_object(
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


# --------------------------------------------------------------------------- pods


def list_pods(namespace: str, selector: str, context: str | None = None) -> list[client.V1Pod]:
    """The Pods matching a label selector (one LIST)."""
    return core(context).list_namespaced_pod(namespace, label_selector=selector).items


def pod_log(
    name: str, namespace: str, tail_lines: int | None = None, context: str | None = None
) -> str | None:
    """A Pod's log; None when the Pod is gone, '' when its container has not started yet."""
    kwargs = {} if tail_lines is None else {"tail_lines": tail_lines}
    try:
        return core(context).read_namespaced_pod_log(name, namespace, **kwargs)
    except ApiException as e:
        if e.status == 404:
            return None
        if e.status == 400:  # "container ... is waiting to start": nothing written yet
            return ""
        raise


def delete_pod(name: str, namespace: str, context: str | None = None) -> bool:
    """Delete a Pod; False when it was already gone."""
    try:
        core(context).delete_namespaced_pod(name, namespace)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def watch_one(
    plural: str,
    namespace: str,
    name: str,
    timeout: float | None = None,
    context: str | None = None,
) -> Iterator[dict | None]:
    """Yield the resource now and after every change; None once it is deleted.

    Ends when the caller stops iterating; raises TimeoutError after `timeout`, naming the
    object's kind, its phase and what it waits on (`kinetic.api.waiting`).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    api = custom(context)
    while True:
        obj = get(plural, namespace, name, context)
        yield obj
        if obj is None:
            return
        version = obj["metadata"]["resourceVersion"]
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(_timed_out(plural, namespace, name, timeout or 0, obj, context))
            w = watch.Watch()
            try:
                for event in w.stream(
                    api.list_namespaced_custom_object,
                    r.GROUP,
                    r.VERSION,
                    namespace,
                    plural,
                    field_selector=f"metadata.name={name}",
                    resource_version=version,
                    timeout_seconds=int(min(remaining or 60, 60)) or 1,
                    allow_watch_bookmarks=True,
                ):
                    kind, body = event["type"], event["object"]
                    version = body["metadata"]["resourceVersion"]
                    if kind == "DELETED":
                        yield None
                        return
                    if kind in ("ADDED", "MODIFIED"):
                        obj = body
                        yield body
                    if deadline is not None and time.monotonic() >= deadline:
                        break
            except ApiException as e:
                if e.status == 410:  # our resourceVersion is too old: list again
                    break
                raise
            finally:
                w.stop()


def _timed_out(
    plural: str, namespace: str, name: str, timeout: float, obj: dict, context: str | None
) -> str:
    """What a timed-out wait says: a batch's waiting Pods are read now, once, for their
    reasons (its status only counts inputs); a job's status message already has its own.
    Only Pods the batch owns count: another Pod may carry its label."""
    pods: list[waiting.PodWait] = []
    if plural == r.BATCH_PLURAL:
        try:
            listed = list_pods(namespace, f"{names.LABEL_BATCH}={name}", context)
        except ApiException:  # no right to list Pods: the status alone is said
            listed = []
        uid = obj["metadata"].get("uid")
        owned = [p for p in listed if any(o.uid == uid for o in p.metadata.owner_references or [])]
        pods = [w for w in map(waiting.pod_wait, owned) if w is not None]
    return waiting.timed_out(plural, namespace, name, timeout, obj, pods)


def kube_reason(exc: ApiException) -> str:
    """The API server's own message (a webhook's or the schema's), else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)
