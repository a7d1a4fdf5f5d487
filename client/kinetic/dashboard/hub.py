"""The shared watches: one per kind and namespace, whatever the number of open tabs.

Each `Stream` lists its kind in one namespace (or in all of them) and then
watches it from that list's resourceVersion, listing again on 410 Gone, as
client-go's informers do. It keeps the objects it saw and tells the hub of
every change; the hub hands each change to every listener (one per open
page's event stream) and to the server's own listeners (the batch views).

A namespace the user may not read is not an error page: the API server's
refusal is kept as the stream's ``refused`` text, shown where its objects
would be, and the list is tried again now and then (rights can be granted).

Every stream asks through the server's one `kinetic.api.kube.KubeClient`, the
one its handles and actions use. The Kubernetes client is synchronous, so each
stream runs in a daemon thread;
listeners are called in that thread and must only hand the change on
(`asyncio.AbstractEventLoop.call_soon_threadsafe`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import watch
from kubernetes.client import ApiException

from kinetic.api.kube import LIST_PAGE, KubeClient, kube_reason
from kinetic.model import resources as r

log = logging.getLogger("kinetic.dashboard")

KINDS = (r.JOB_PLURAL, r.BATCH_PLURAL)
ALL = ""  # the namespace of a cluster-wide stream
WATCH_SECONDS = 30  # each watch call's server-side timeout: how soon `stop` is noticed
RETRY_SECONDS = 10.0  # after a refusal or a broken connection


@dataclass(frozen=True)
class Change:
    """One change a stream saw: an object added or modified, deleted, or the stream's
    state (listed, or refused by the API server with its reason)."""

    kind: str  # "upsert", "delete", "synced", "refused"
    plural: str
    namespace: str  # the stream's ("" for all namespaces)
    obj: dict[str, Any] | None = None
    reason: str | None = None


Listener = Callable[[Change], None]


@dataclass
class Stream:
    """One kind in one namespace: what the API server said, kept up to date."""

    plural: str
    namespace: str
    kube: KubeClient
    publish: Listener
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    refused: str | None = None
    synced: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watch: watch.Watch | None = None

    def start(self) -> None:
        name = f"watch-{self.plural}-{self.namespace or 'all'}"
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.objects.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self.objects.get((namespace, name))

    # ----------------------------------------------------------------- the loop

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                self._follow(version)
            except ApiException as e:
                if e.status == 410:
                    continue  # our resourceVersion is too old: list again at once
                self._refuse(f"{e.status} {kube_reason(e)}")
            except Exception as e:  # noqa: BLE001 — a broken connection: say so, try again
                log.warning("watch of %s in %s: %s", self.plural, self.namespace or "all", e)
                self._refuse(f"the API server did not answer: {e}")
            self._stop.wait(RETRY_SECONDS)

    def _call(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        api = self.kube.custom
        if self.namespace == ALL:
            return api.list_cluster_custom_object, (r.GROUP, r.VERSION, self.plural)
        return api.list_namespaced_custom_object, (r.GROUP, r.VERSION, self.namespace, self.plural)

    def _list(self) -> str:
        """List every object (a page at a time), replace what was kept, return the version."""
        call, args = self._call()
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        token: str | None = None
        while True:
            extra = {"_continue": token} if token else {}
            got = call(*args, limit=LIST_PAGE, **extra)
            for obj in got["items"]:
                obj.setdefault("kind", _kind(self.plural))
                seen[_key(obj)] = obj
            token = (got.get("metadata") or {}).get("continue")
            if not token:
                break
        with self._lock:
            gone = [self.objects[k] for k in self.objects.keys() - seen.keys()]
            self.objects, self.refused, self.synced = seen, None, True
        for obj in gone:
            self.publish(Change("delete", self.plural, self.namespace, obj))
        for obj in seen.values():
            self.publish(Change("upsert", self.plural, self.namespace, obj))
        self.publish(Change("synced", self.plural, self.namespace))
        return str((got.get("metadata") or {}).get("resourceVersion") or "")

    def _follow(self, version: str) -> None:
        call, args = self._call()
        while not self._stop.is_set():
            self._watch = watch.Watch()
            for event in self._watch.stream(
                call,
                *args,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                allow_watch_bookmarks=True,
            ):
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    obj.setdefault("kind", _kind(self.plural))
                    with self._lock:
                        self.objects[_key(obj)] = obj
                    self.publish(Change("upsert", self.plural, self.namespace, obj))
                elif event["type"] == "DELETED":
                    with self._lock:
                        self.objects.pop(_key(obj), None)
                    self.publish(Change("delete", self.plural, self.namespace, obj))

    def _refuse(self, reason: str) -> None:
        with self._lock:
            self.refused, self.synced = reason, False
        self.publish(Change("refused", self.plural, self.namespace, reason=reason))


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _kind(plural: str) -> str:
    return r.BATCH_KIND if plural == r.BATCH_PLURAL else r.JOB_KIND


class Hub:
    """Every stream the server runs, started on first need and shared by every page."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self._streams: dict[tuple[str, str], Stream] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _publish(self, change: Change) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(change)

    def watch_namespace(self, namespace: str) -> list[Stream]:
        """The streams of both kinds in ``namespace`` (ALL: every namespace), started once."""
        out = []
        with self._lock:
            for plural in KINDS:
                stream = self._streams.get((plural, namespace))
                if stream is None:
                    stream = Stream(plural, namespace, self.kube, self._publish)
                    self._streams[(plural, namespace)] = stream
                    stream.start()
                out.append(stream)
        return out

    def streams(self) -> list[Stream]:
        with self._lock:
            return list(self._streams.values())

    def namespaces(self) -> list[str]:
        return sorted({s.namespace for s in self.streams()})

    def find(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as a running stream holds it (None: no stream has it)."""
        for stream in self.streams():
            if stream.plural == plural and stream.namespace in (namespace, ALL):
                found = stream.get(namespace, name)
                if found is not None:
                    return found
        return None

    def stop(self) -> None:
        for stream in self.streams():
            stream.stop()
