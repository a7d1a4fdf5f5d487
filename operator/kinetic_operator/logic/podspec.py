"""One attempt as a Pod manifest. Pure: no API calls.

Security is decided here and nowhere else. The pod always runs under the
"restricted" Pod Security profile, as the operator's runner service account,
without a token, host namespaces or host paths. A KineticJob chooses only
the image, the command, the environment, resource requests and the
accelerator; none of those can widen what the pod may do.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kinetic.model import layout
from kinetic.model.catalog import resolve
from kinetic.model.gang import DEFAULT_RENDEZVOUS_PORT, rendezvous_env
from kinetic.model.names import (
    DEBUG_PORT,
    DEFAULT_CLUSTER_DOMAIN,
    ENV_CHUNK,
    ENV_COORDINATOR_ADDRESS,
    ENV_DEBUG_PORT,
    ENV_JOB_NAME,
    ENV_JOB_NAMESPACE,
    ENV_LOG_LIMIT,
    ENV_LOG_URI,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_PAYLOAD_URI,
    ENV_RESULT_URI,
    LABEL_ATTEMPT,
    LABEL_BATCH,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_RANK,
    MANAGED_BY,
    gang_address,
    gang_hostname,
    gang_pod_name,
    gang_service_name,
    job_pod_name,
)
from kinetic.model.resources import API_VERSION, JOB_KIND, KineticJobSpec

from kinetic_operator.logic import datavolumes
from kinetic_operator.settings import OperatorSettings

CONTAINER_NAME = "main"
RUN_AS_USER = 65532  # the conventional "nonroot" user of distroless images
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

# Set by the operator; a KineticJob's `env` cannot override them.
RESERVED_ENV = frozenset(
    {
        ENV_PAYLOAD_URI,
        "KINETIC_PAYLOAD_SHA256",
        ENV_RESULT_URI,
        "KINETIC_OUTPUT_DIR",
        "KINETIC_INPUT_URI",
        "KINETIC_INPUT_SHA256",
        "KINETIC_INPUT_JSON",
        "KINETIC_INPUT_MODE",
        ENV_JOB_NAME,
        ENV_JOB_NAMESPACE,
        "KINETIC_ATTEMPT",
        ENV_CHUNK,
        "KINETIC_REPORT_URI",
        "KINETIC_VOLUMES",
        ENV_DEBUG_PORT,
        ENV_LOG_URI,
        ENV_LOG_LIMIT,
    }
)

POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": False,
}


@dataclass(frozen=True)
class Owner:
    """The KineticJob or KineticBatch an attempt Pod belongs to (its controller)."""

    name: str
    namespace: str
    uid: str
    kind: str = JOB_KIND

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def job_home(owner: Owner, settings: OperatorSettings) -> layout.Home | None:
    """The KineticJob's own storage prefix (namespace and UID), or None with no root."""
    if not settings.storage_root:
        return None
    return layout.job_home(settings.storage_root, owner.namespace, owner.name, owner.uid)


def result_uri(home: layout.Home | None, spec: KineticJobSpec) -> str | None:
    """Where a function job's result.pkl goes: always its own prefix, never the spec's choice."""
    if spec.function is None or home is None:
        return None
    return home.result_uri


def output_dir(home: layout.Home | None, spec: KineticJobSpec) -> str | None:
    """KINETIC_OUTPUT_DIR for the job: the spec's, else one under the namespace's prefix."""
    if spec.output_dir:
        return spec.output_dir
    return home.output_dir if home is not None else None


def job_env(
    owner: Owner, spec: KineticJobSpec, settings: OperatorSettings, attempt: int
) -> dict[str, str]:
    """The operator's variables for an attempt of a KineticJob."""
    ours: dict[str, str] = {
        ENV_JOB_NAME: owner.name,
        ENV_JOB_NAMESPACE: owner.namespace,
        "KINETIC_ATTEMPT": str(attempt),
    }
    home = job_home(owner, settings)
    if (out := output_dir(home, spec)) is not None:
        ours["KINETIC_OUTPUT_DIR"] = out
    if spec.function is not None:
        ours |= function_env(spec)
        if (res := result_uri(home, spec)) is not None:
            ours[ENV_RESULT_URI] = res
    return ours


def function_env(spec: KineticJobSpec) -> dict[str, str]:
    """The runner's variables that come from `spec.function` (payload and input).

    The result URI is not among them: callers set it from the owner's storage
    prefix (`kinetic.model.layout.Home`), whatever the spec says.
    """
    fn = spec.function
    if fn is None:
        return {}
    ours = {ENV_PAYLOAD_URI: fn.payload_uri, "KINETIC_PAYLOAD_SHA256": fn.sha256}
    if fn.input_uri is not None:
        ours["KINETIC_INPUT_URI"] = fn.input_uri
    if fn.input_sha256 is not None:
        ours["KINETIC_INPUT_SHA256"] = fn.input_sha256
    if "input_json" in fn.model_fields_set:
        ours["KINETIC_INPUT_JSON"] = json.dumps(fn.input_json)
    if fn.input_mode is not None:
        ours["KINETIC_INPUT_MODE"] = fn.input_mode
    if spec.debug:
        ours[ENV_DEBUG_PORT] = str(DEBUG_PORT)
    return ours


def build_pod(
    owner: Owner,
    spec: KineticJobSpec,
    settings: OperatorSettings,
    *,
    name: str,
    labels: Mapping[str, str],
    env: Mapping[str, str],
    fuse_driver: bool | None = None,
    volumes_at: str = "spec",
    home: layout.Home | None = None,
) -> dict[str, Any]:
    """One attempt as a Pod, owned by `owner`.

    `restartPolicy: Never` because retries are the operator's decision (so
    that a disruption does not spend one); `activeDeadlineSeconds` enforces
    `spec.deadlineSeconds` per attempt. `env` are the operator's variables,
    which always win over the spec's. `fuse_driver` and `volumes_at`: see
    `datavolumes.apply` (a fuse volume the cluster cannot mount raises
    `datavolumes.FuseUnavailable`, a `Rejected`). ``home``: the owner's storage, where a
    function Pod's runner archives the end of its own log (`runner_log_env`).
    """
    env = {**env, **runner_log_env(spec, settings, home, name)}
    placement = resolve(settings.accelerator_catalog, spec.accelerator, spec.spot)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": settings.pod_grace_seconds,
        "serviceAccountName": settings.runner_service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "containers": [_container(spec, settings, env, placement.limits)],
    }
    if placement.node_selector:
        pod_spec["nodeSelector"] = placement.node_selector
    if placement.tolerations:
        pod_spec["tolerations"] = placement.tolerations
    if spec.deadline_seconds is not None:
        pod_spec["activeDeadlineSeconds"] = spec.deadline_seconds
    annotations = datavolumes.apply(pod_spec, spec, settings, fuse_driver, volumes_at)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, **labels},
        "ownerReferences": [owner.reference()],
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def runner_log_env(
    spec: KineticJobSpec, settings: OperatorSettings, home: layout.Home | None, pod: str
) -> dict[str, str]:
    """Where a function Pod's runner archives the end of its log, and how much of it: it
    saw every byte, where the kubelet's rotated log may have lost the end."""
    if spec.function is None or home is None:
        return {}
    return {ENV_LOG_URI: home.log_uri(pod), ENV_LOG_LIMIT: str(settings.log_archive_bytes)}


def build_job_pod(
    owner: Owner,
    spec: KineticJobSpec,
    settings: OperatorSettings,
    attempt: int,
    fuse_driver: bool | None = None,
) -> dict[str, Any]:
    """The Pod of attempt `attempt` of the KineticJob `owner` (`fuse_driver`: whether the
    cluster has the GCS FUSE CSI driver, asked only when the spec has a fuse volume)."""
    return build_pod(
        owner,
        spec,
        settings,
        name=job_pod_name(owner.name, attempt),
        labels={LABEL_JOB: owner.name, LABEL_ATTEMPT: str(attempt)},
        env=job_env(owner, spec, settings, attempt),
        fuse_driver=fuse_driver,
        home=job_home(owner, settings),
    )


def renamed(manifest: dict[str, Any], name: str, home: layout.Home | None) -> dict[str, Any]:
    """The same Pod under another name (`handlers.owned`: its own was held by someone
    else's Pod); where its runner archives its log and writes its report follow the name.
    A gang member keeps its hostname: its peers reach it by that."""
    manifest["metadata"]["name"] = name
    for container in manifest["spec"]["containers"]:
        for var in container.get("env") or ():
            if home is not None and var.get("name") == ENV_LOG_URI:
                var["value"] = home.log_uri(name)
            elif home is not None and var.get("name") == "KINETIC_REPORT_URI":
                var["value"] = home.report_uri(name)
    return manifest


def gang_service(owner: Owner, name: str | None = None) -> dict[str, Any]:
    """The headless Service that names the owner's gang members in DNS (``<owner>-gang``, or
    ``name`` when someone else holds that: `handlers.owned`).

    ``publishNotReadyAddresses``: members must find rank 0 before any of them
    is ready. It selects every Pod of the owner; only gang members have the
    hostname and subdomain that give them a name under it.
    """
    owner_label = LABEL_JOB if owner.kind == JOB_KIND else LABEL_BATCH
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name or gang_service_name(owner.name),
            "namespace": owner.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, owner_label: owner.name},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {owner_label: owner.name},
            "ports": [{"name": "rendezvous", "port": DEFAULT_RENDEZVOUS_PORT}],
        },
    }


def gang_network_policy(owner: Owner, name: str) -> dict[str, Any]:
    """A NetworkPolicy that lets only Pods of the owner's own namespace reach its gang
    members, on any port: rank 0's rendezvous store (torch's, JAX's) trusts whoever
    connects. What it guarantees: nothing from another namespace, and nothing from outside
    the cluster, reaches them (where the cluster enforces NetworkPolicy). What it cannot:
    labels can be forged inside a namespace, so any Pod of this namespace still can, and
    anyone there who may write NetworkPolicies can open more (policies add up)."""
    owner_label = LABEL_JOB if owner.kind == JOB_KIND else LABEL_BATCH
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, owner_label: owner.name},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "podSelector": {"matchLabels": {owner_label: owner.name}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
        },
    }


def gang_member(
    pod: dict[str, Any],
    owner: Owner,
    rank: int,
    hosts: int,
    *,
    dns: bool,
    coordinator: str | None = None,
    tpu: bool = False,
    home: layout.Home | None = None,
    service: str | None = None,
    domain: str = DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, Any]:
    """Rank ``rank`` of a gang of ``hosts``, from the Pod its attempt would have on one host.

    Each member is named ``<attempt pod>-<rank>``, labelled with its rank, and
    given a hostname under the owner's headless Service (``service``, by default
    `names.gang_service_name`), so members resolve each other by fully qualified
    names in cluster domain ``domain`` where the cluster has DNS (``dns``). Where
    it has not, ``coordinator`` is rank 0's Pod IP, which every other rank
    needs, and rank 0 is told its own through the downward API. Only rank 0
    writes the job's result: any other rank's function result goes to
    `layout.Home.member_result_uri`.
    """
    member = copy.deepcopy(pod)
    meta, spec = member["metadata"], member["spec"]
    attempt_pod = meta["name"]
    meta["name"] = name = gang_pod_name(attempt_pod, rank)
    meta["labels"][LABEL_RANK] = str(rank)
    service = service or gang_service_name(owner.name)
    spec["hostname"], spec["subdomain"] = gang_hostname(gang_pod_name(attempt_pod, rank)), service
    hostnames = [
        gang_address(gang_hostname(gang_pod_name(attempt_pod, r)), service, owner.namespace, domain)
        for r in range(hosts)
    ]
    if not dns and rank > 0 and not coordinator:
        raise ValueError("without DNS, ranks above 0 need rank 0's Pod IP (coordinator)")
    own_ip = not dns and rank == 0
    address = hostnames[0] if dns else coordinator or "0.0.0.0"  # rank 0: its own IP below
    env = rendezvous_env(rank, hosts, address, hostnames=hostnames, tpu=tpu)
    container = spec["containers"][0]
    container["env"] = _member_outputs(_member_env(container["env"], env, own_ip), rank, name, home)
    return member


def _member_outputs(
    env: list[dict[str, Any]], rank: int, name: str, home: layout.Home | None
) -> list[dict[str, Any]]:
    """A member's variables with its own log archive and, past rank 0, its own result and no
    debugger port."""
    for var in env:
        if var["name"] == ENV_LOG_URI and home is not None:
            var["value"] = home.log_uri(name)  # each member archives its own log
    if rank > 0:
        # A debugger attaches to rank 0 (`kinetic jobs debug`): the others run on and meet
        # it at the rendezvous rather than each wait for a debugger of its own.
        env = [v for v in env if v["name"] != ENV_DEBUG_PORT]
        if home is not None:
            for var in env:
                if var["name"] == ENV_RESULT_URI:
                    var["value"] = home.member_result_uri(name)
    return env


def _member_env(
    env: list[dict[str, Any]], rendezvous: Mapping[str, str], own_ip: bool
) -> list[dict[str, Any]]:
    """The container's variables with the gang's, which win over any of the user's."""
    kept = [v for v in env if v["name"] not in rendezvous]
    added: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in rendezvous.items()]
    if own_ip:  # rank 0 without DNS: its own address, known only once the Pod has one
        ip = {"name": ENV_MASTER_ADDR, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        added = [ip if v["name"] == ENV_MASTER_ADDR else v for v in added]
        port = rendezvous[ENV_MASTER_PORT]
        own = {"name": ENV_COORDINATOR_ADDRESS, "value": f"$({ENV_MASTER_ADDR}):{port}"}
        added = [own if v["name"] == ENV_COORDINATOR_ADDRESS else v for v in added]
    return kept + added


def _container(
    spec: KineticJobSpec,
    settings: OperatorSettings,
    env: Mapping[str, str],
    limits: Mapping[str, str],
) -> dict[str, Any]:
    cluster = settings.cluster_env()
    if spec.container is not None:
        image = spec.container.image or spec.image or settings.default_image
        command, args = list(spec.container.command), list(spec.container.args)
    else:
        python = spec.function.python if spec.function is not None else None
        image = spec.image or settings.runner_image_for(python)
        command, args = list(settings.runner_command), []
        cluster |= settings.package_index_env()

    user = [{"name": e.name, "value": e.value} for e in spec.env if e.name not in RESERVED_ENV]
    ours = cluster | dict(env)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": command,
        "env": user + [{"name": k, "value": v} for k, v in ours.items()],
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }
    if args:
        container["args"] = args
    resources = _resources(spec, limits)
    if resources:
        container["resources"] = resources
    return container


def _resources(spec: KineticJobSpec, accelerator_limits: Mapping[str, str]) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = dict(accelerator_limits)
    if spec.resources is not None:
        if spec.resources.cpu:
            requests["cpu"] = spec.resources.cpu
        if spec.resources.memory:
            requests["memory"] = limits["memory"] = spec.resources.memory
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out
