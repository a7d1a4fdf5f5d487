"""The few Kubernetes API calls the operator makes, each idempotent.

Everything here is a thin wrapper over the sync `kubernetes` client (Kopf
runs our blocking calls in threads). The wrappers turn the answers that mean
"already done" into success — AlreadyExists on create, NotFound on delete —
so a handler that runs twice does no harm.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from kinetic.model.names import fmt_time
from kinetic.model.resources import BATCH_PLURAL, GROUP, JOB_KIND, JOB_PLURAL, VERSION
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kinetic_operator import deepjson, metrics
from kinetic_operator.bounded_read import CHUNK, first_bytes, log_archive
from kinetic_operator.logic.errors import Rejected
from kinetic_operator.logic.seal import Sealer

log = logging.getLogger("kinetic.operator")
T = TypeVar("T")

COMPONENT = "kinetic-operator"
MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = 30  # seconds; a hung call must not hold a KineticJob's lock forever
SEAL_KEY_FIELD = "key"  # the seal key Secret's one entry
CSI_DRIVER_TTL = 10.0  # seconds a CSIDriver seen present is believed without reading it again


class Conflict(Exception):
    """The object changed since it was read; read it again and redo the decision."""


CONFLICT_RETRIES = 5
LOG_ARCHIVE_BYTES = 2 << 20  # `OperatorState.kube` sets the setting (KINETIC_LOG_ARCHIVE_BYTES)


def until_settled(attempt: Callable[[int], T], what: str, tries: int = CONFLICT_RETRIES) -> T:
    """Run `attempt(round)` again while it hits a Conflict (the object moved under us).

    Each round re-reads and decides afresh, so this is optimistic concurrency,
    not blind retrying; after `tries` rounds the caller's backoff takes over.
    """
    for round_ in range(tries):
        try:
            return attempt(round_)
        except Conflict:
            continue
    raise Conflict(f"{what} kept changing; giving up this round")


# Reconciles run in Kopf's thread pool, many at once; a pool smaller than that
# throws connections away and pays a TLS handshake for each new one.
CONNECTION_POOL_SIZE = 64


def load_config(fence: Callable[[], None] | None = None) -> client.ApiClient:
    """In a pod, the service account; elsewhere, KUBECONFIG or ~/.kube/config.

    ``fence`` is called before every write (see `fenced`)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    api = count_errors(client.ApiClient(configuration))
    return api if fence is None else fenced(api, fence)


WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def fenced(api: client.ApiClient, fence: Callable[[], None]) -> client.ApiClient:
    """Call ``fence`` before every write ``api`` makes; it raises (or exits) to stop one.

    The elected operator's reconciler writes only while its replica holds
    the leader Lease (`election.Elector.require`). Wrapped at the REST layer,
    under every call, so no reconcile path can write around the fence.
    """
    request = api.rest_client.request

    def guarded(method: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() in WRITES:
            fence()
        return request(method, *args, **kwargs)

    api.rest_client.request = guarded
    return api


def count_errors(api: client.ApiClient) -> client.ApiClient:
    """Count every answer of 400 and above (and every request with no answer) in metrics.

    Wrapped at the REST layer, under every API call the operator makes, so
    no call site can forget it; Kopf's own watches go through its own client.
    """
    request = api.rest_client.request

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            response = request(*args, **kwargs)
        except ApiException as exc:
            metrics.api_error(exc.status or None)
            raise
        except Exception:
            metrics.api_error(None)
            raise
        if response.status >= 400:
            metrics.api_error(response.status)
        return response

    api.rest_client.request = counted
    return api


class Kube:
    """The operator's API calls."""

    def __init__(
        self, api: client.ApiClient | None = None, fence: Callable[[], None] | None = None
    ) -> None:
        self.api = api or load_config(fence)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.instance = os.environ.get("HOSTNAME") or socket.gethostname()
        self.log_limit = LOG_ARCHIVE_BYTES
        self.accounts: set[tuple[str, str]] = set()  # runner ServiceAccounts known to exist
        # Objects made for an owner's gangs (Service, NetworkPolicy): (kind, ns, name, owner
        # UID) -> the name they got (their own, or an alternative: `handlers.owned`).
        self.owned: dict[tuple[str, str, str, str], str] = {}
        self.csi_seen: dict[str, float] = {}  # CSIDriver name -> when last read present
        self.sealer: Sealer | None = None  # set at start-up (`handlers.setup.load_seal`)

    def serves_kinds(self) -> bool:
        """Whether the API server's discovery lists both of our kinds (False while it
        cannot be asked): just after an API server starts, CRDs can be missing there."""
        try:
            listed = self.custom.get_api_resources(GROUP, VERSION)
        except Exception:  # noqa: BLE001 - not yet: the caller asks again
            return False
        names = {res.name for res in (listed.resources if listed else None) or []}
        return {JOB_PLURAL, BATCH_PLURAL} <= names

    # ------------------------------------------------------------------ KineticJobs

    def get_kinetic_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The KineticJob as stored now, or None if it is gone."""
        return self._get_custom(JOB_PLURAL, namespace, name)

    def _get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            resp = self.custom.get_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                _request_timeout=REQUEST_TIMEOUT,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _decoded(resp)

    def patch_status(
        self,
        namespace: str,
        name: str,
        new: dict[str, Any],
        old: dict[str, Any],
        resource_version: str | None,
        *,
        plural: str = JOB_PLURAL,
    ) -> dict[str, Any] | None:
        """Write the status subresource, only if nobody wrote since we read it.

        A merge patch carrying metadata.resourceVersion is a compare-and-swap:
        the API server answers 409 if the object moved on, and we raise
        Conflict so the caller re-reads and decides again. Keys that were set
        and are now absent are sent as null so they are removed. Returns the
        object as written (its new resourceVersion), or None if it is gone.
        """
        status: dict[str, Any] = {key: None for key in old if key not in new}
        status.update(new)
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            resp = self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body,
                _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"{namespace}/{name} changed while reconciling") from exc
            if exc.status == 404:
                return None  # deleted meanwhile: nothing left to report on
            raise
        return _decoded(resp)

    # ------------------------------------------------------------------ KineticBatches

    def get_kinetic_batch(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The KineticBatch as stored now, or None if it is gone."""
        return self._get_custom(BATCH_PLURAL, namespace, name)

    # ------------------------------------------------------------------ attempt Pods

    def create_pod(self, manifest: dict[str, Any]) -> bool:
        """Create an attempt's Pod; False when a Pod of that name exists already (whose it is
        the caller asks: `handlers.owned.create_sealed`).

        Returns whether this call created it.
        """
        meta = manifest["metadata"]
        try:
            # The answer is not read: decoding the whole Pod into client
            # models was CPU spent per input for nothing.
            _drain(
                self.core.create_namespaced_pod(
                    meta["namespace"],
                    manifest,
                    _request_timeout=REQUEST_TIMEOUT,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status in (400, 422):
                raise Rejected(_api_message(exc)) from exc
            if exc.status == 403:  # e.g. its ServiceAccount was deleted: look again next time
                self.accounts = {a for a in self.accounts if a[0] != meta["namespace"]}
            raise
        log.debug("Created Pod %s/%s", meta["namespace"], meta["name"])
        return True

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Pod as stored now, as a plain dict, or None when there is none of that name."""
        try:
            resp = self.core.read_namespaced_pod(
                name, namespace, _request_timeout=REQUEST_TIMEOUT, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _decoded(resp)

    def seal_key(self, namespace: str, name: str) -> tuple[bytes, str | None]:
        """The operator's seal key (`kinetic_operator.logic.seal`) and when it was made: the
        Secret ``name`` in the operator's namespace, created with a random key the first
        time (whichever replica gets there first; the other reads it)."""
        for _ in range(3):
            try:
                found = self.core.read_namespaced_secret(
                    name, namespace, _request_timeout=REQUEST_TIMEOUT
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
            else:
                raw = (found.data or {}).get(SEAL_KEY_FIELD)
                if raw:
                    return base64.b64decode(raw), _stamp(found.metadata.creation_timestamp)
                raise RuntimeError(f"Secret {namespace}/{name} has no {SEAL_KEY_FIELD!r}")
            self._create_seal_key(namespace, name)
        raise RuntimeError(f"could not read or create the seal key {namespace}/{name}")

    def _create_seal_key(self, namespace: str, name: str) -> None:
        """A random key in a new Secret; one made meanwhile by another replica is theirs."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": COMPONENT},
            },
            "type": "Opaque",
            "data": {SEAL_KEY_FIELD: base64.b64encode(secrets.token_bytes(32)).decode()},
        }
        try:
            self.core.create_namespaced_secret(namespace, body, _request_timeout=REQUEST_TIMEOUT)
            log.info("Created the seal key %s/%s for the Pods this operator makes", namespace, name)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def csi_driver_installed(self, name: str) -> bool | None:
        """Whether the cluster has the CSIDriver ``name``; None when this operator may not
        read CSIDrivers (its chart grants get on them).

        Asked only for specs that need the driver. A driver seen present is
        believed for CSI_DRIVER_TTL seconds (a batch's Pods do not read it each);
        an absent one is read again next time, so installing the driver takes
        effect at once.
        """
        seen = self.csi_seen.get(name)
        if seen is not None and time.monotonic() - seen < CSI_DRIVER_TTL:
            return True
        try:
            _drain(
                client.StorageV1Api(self.api).read_csi_driver(
                    name, _request_timeout=REQUEST_TIMEOUT, _preload_content=False
                )
            )
        except ApiException as exc:
            self.csi_seen.pop(name, None)
            if exc.status == 404:
                return False
            if exc.status in (401, 403):
                log.warning("Cannot read CSIDriver %s: %s", name, _api_message(exc))
                return None
            raise
        self.csi_seen[name] = time.monotonic()
        return True

    def create_service(self, manifest: dict[str, Any]) -> bool:
        """Create a Service; False when one of that name exists (whose, the caller asks)."""
        meta = manifest["metadata"]
        return self._create(
            lambda: self.core.create_namespaced_service(
                meta["namespace"], manifest, _request_timeout=REQUEST_TIMEOUT
            )
        )

    def read_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Service as stored now, as a plain dict, or None."""
        return self._read(
            lambda: self.core.read_namespaced_service(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        )

    def create_network_policy(self, manifest: dict[str, Any]) -> bool:
        """Create a NetworkPolicy; False when one of that name exists."""
        meta = manifest["metadata"]
        api = client.NetworkingV1Api(self.api)
        return self._create(
            lambda: api.create_namespaced_network_policy(
                meta["namespace"], manifest, _request_timeout=REQUEST_TIMEOUT
            )
        )

    def read_network_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A NetworkPolicy as stored now, as a plain dict, or None."""
        api = client.NetworkingV1Api(self.api)
        return self._read(
            lambda: api.read_namespaced_network_policy(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        )

    def _create(self, call: Callable[[], Any]) -> bool:
        try:
            call()
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status in (400, 422):
                raise Rejected(_api_message(exc)) from exc
            raise
        return True

    def _read(self, call: Callable[[], Any]) -> dict[str, Any] | None:
        try:
            found = call()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        plain: dict[str, Any] = self.api.sanitize_for_serialization(found)
        return plain

    def ensure_service_account(self, namespace: str, name: str) -> None:
        """Create the ServiceAccount job Pods run as in ``namespace``, unless it is there.

        Made without a token (automountServiceAccountToken false) and bound to
        no role: a Pod gets no API rights from it. One that exists is used as
        it is (an administrator may have made it, e.g. annotated for a cloud
        identity), never changed. Asked once per namespace and process.
        """
        if (namespace, name) in self.accounts:
            return
        try:
            self.core.read_namespaced_service_account(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/managed-by": COMPONENT},
                },
                "automountServiceAccountToken": False,
            }
            try:
                self.core.create_namespaced_service_account(
                    namespace, body, _request_timeout=REQUEST_TIMEOUT
                )
                log.info("Created ServiceAccount %s/%s for job Pods", namespace, name)
            except ApiException as again:
                if again.status != 409:
                    raise
        self.accounts.add((namespace, name))

    def delete_pod(
        self, namespace: str, name: str, *, now: bool = False, uid: str | None = None
    ) -> None:
        """Delete an attempt's Pod; one that is gone needs no deleting.

        `now` (grace period 0) is for Pods that have finished: there is no
        process left to stop, so there is nothing to wait for. ``uid``: only
        that Pod (a precondition the API server checks): a Pod someone else
        made under the name since is left alone.
        """
        # With a body, the API server reads the options from it alone (query parameters
        # are ignored): the grace period goes there too.
        options = client.V1DeleteOptions(
            grace_period_seconds=0 if now else None,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            with _unless_gone():
                _drain(
                    self.core.delete_namespaced_pod(
                        name,
                        namespace,
                        body=options,
                        _request_timeout=REQUEST_TIMEOUT,
                        _preload_content=False,
                    )
                )
                log.debug("Deleted Pod %s/%s", namespace, name)
        except ApiException as exc:
            if exc.status != 409:
                raise
            log.warning(
                "Not deleting Pod %s/%s: it is not the one this operator made", namespace, name
            )

    def pod_log(self, namespace: str, name: str) -> bytes | None:
        """What to archive of a Pod's main container log, or None when there is none to read.

        At most ``log_limit`` bytes (`bounded_read.log_archive`): a log larger
        than that keeps its end, after a line saying it was cut. The answer is
        streamed, never read whole, so a Pod that printed gigabytes costs the
        operator no more than the limit.
        """

        def open_log(limit_bytes: int | None, tail_lines: int | None) -> Iterator[bytes]:
            resp = self.core.read_namespaced_pod_log(
                name,
                namespace,
                limit_bytes=limit_bytes,
                tail_lines=tail_lines,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            try:
                yield from resp.stream(CHUNK)
            finally:
                resp.close()  # not read to its end: the connection is not reused

        try:
            return log_archive(open_log, self.log_limit)
        except ApiException as exc:
            if exc.status in (400, 404):
                return None
            raise

    def pod_log_since(
        self, namespace: str, name: str, since_seconds: int | None, limit: int
    ) -> bytes | None:
        """A running Pod's log lines, each after its timestamp, from ``since_seconds`` ago
        (None: from the start), at most ``limit`` bytes of them; None when there is no log
        to read (the Pod is gone, or its container has not started)."""
        try:
            resp = self.core.read_namespaced_pod_log(
                name,
                namespace,
                timestamps=True,
                since_seconds=since_seconds,
                limit_bytes=limit,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status in (400, 404):
                return None
            raise
        try:
            return first_bytes(resp.stream(CHUNK), limit)
        finally:
            resp.close()

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods as stored now (a live read, not the index), as plain dicts."""
        found = self.core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
        )
        plain = self.api.sanitize_for_serialization
        return [plain(p) for p in found.items]

    # ------------------------------------------------------------------ events

    def post_event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on a KineticJob or KineticBatch, so `kubectl describe` shows it.

        Events are for people; failing to post one is logged, never retried,
        so that it cannot block or repeat the decision it reports.
        """
        meta = owner.get("metadata") or {}
        now = datetime.now(UTC)
        event = {
            "metadata": {
                "name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": owner.get("apiVersion") or f"{GROUP}/{VERSION}",
                "kind": owner.get("kind") or JOB_KIND,
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(
                meta.get("namespace"),
                client.CoreV1Event.from_dict(event),
                _request_timeout=REQUEST_TIMEOUT,
            )
        except Exception as exc:  # noqa: BLE001 — best effort by design
            log.warning("Could not post event %s on %s: %s", reason, meta.get("name"), exc)

    # ------------------------------------------------------------------ configuration

    def patch_webhook_configuration(self, name: str, webhooks: list[dict[str, Any]]) -> None:
        """Replace the webhooks of the ValidatingWebhookConfiguration ``name`` (merge patch)."""
        client.AdmissionregistrationV1Api(self.api).patch_validating_webhook_configuration(
            name,
            {"webhooks": webhooks},
            _content_type=MERGE_PATCH,
            _request_timeout=REQUEST_TIMEOUT,
        )

    def read_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ConfigMap as a plain dict (with apiVersion and kind, for Events), or None."""
        try:
            cm = self.core.read_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        body = self.api.sanitize_for_serialization(cm)
        return {**body, "apiVersion": "v1", "kind": "ConfigMap"}

    def publish_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create or replace the ConfigMap from which clients learn the storage root."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": COMPONENT},
            },
            "data": data,
        }
        cm = client.V1ConfigMap.from_dict(body)
        try:
            self.core.create_namespaced_config_map(namespace, cm, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.replace_namespaced_config_map(
                name, namespace, cm, _request_timeout=REQUEST_TIMEOUT
            )


def _stamp(when: Any) -> str | None:
    """A timestamp the client decoded, back in the API's own format."""
    return fmt_time(when) if isinstance(when, datetime) else None


def _drain(response: Any) -> None:
    """Read an answer we do not need and give its connection back to the pool."""
    response.read()
    response.release_conn()


def _decoded(resp: Any) -> dict[str, Any]:
    """A custom object from a raw answer: decoded safely, since it may be nested very deep."""
    return deepjson.loads(resp.data)


@contextmanager
def _unless_gone() -> Iterator[None]:
    """Delete or change something that may already be gone: NotFound is success."""
    try:
        yield
    except ApiException as exc:
        if exc.status != 404:
            raise


def _api_message(exc: ApiException) -> str:
    """The API server's own sentence from an error response, else the HTTP reason."""
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)
