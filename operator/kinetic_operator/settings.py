"""The operator's configuration, from `KINETIC_*` environment variables.

In a cluster the Helm chart renders these from its values (and its ConfigMap);
on the local cluster they come from `.local/env`. Complex values (the
accelerator catalog) accept JSON or YAML, so a chart can pass a block as is.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Literal

import yaml
from kinetic.model.catalog import Catalog, default_catalog
from kinetic.model.limits import (
    DEFAULT_GANG_SCHEDULING_SECONDS,
    DEFAULT_MAX_DISRUPTIONS,
    DEFAULT_MAX_INPUTS,
    DEFAULT_TARGET_UNIT_SECONDS,
    DEFAULT_UNIT_FIRST_INPUTS,
    DEFAULT_UNIT_MIN_SECONDS,
    DEFAULT_UNIT_STARTS_AT_ONCE,
    DEFAULT_UNSCHEDULABLE_SECONDS,
    MAX_CHUNK_SIZE,
    MAX_INPUTS_CEILING,
    MAX_REVIEW_BYTES,
)
from kinetic.model.names import DEFAULT_CLUSTER_DOMAIN
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class OperatorSettings(BaseSettings):
    """Everything the operator needs to know that is not in a KineticJob."""

    model_config = SettingsConfigDict(env_prefix="KINETIC_", extra="ignore")

    storage_root: str | None = Field(
        None,
        description="gs:// or file:// root for payloads, results and outputs "
        "(KINETIC_STORAGE_ROOT). Published to clients in the ConfigMap.",
    )
    default_image: str = Field(
        "kinetic-runner:0.1.0-py3.12",
        description="Image for container jobs that name none, and for data download init "
        "containers (KINETIC_DEFAULT_IMAGE).",
    )
    runner_image: str = Field(
        "kinetic-runner:0.1.0",
        description="Function jobs of Python 3.X run in <this>-py3.X unless they name an "
        "image (KINETIC_RUNNER_IMAGE).",
    )
    runner_pythons: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["3.12"],
        description="The Python versions runner images exist for, comma-separated "
        "(KINETIC_RUNNER_PYTHONS). Published to clients, which refuse others before upload.",
    )
    storage_emulator_host: str | None = Field(
        None,
        description="STORAGE_EMULATOR_HOST given to every job Pod: a fake GCS "
        "(KINETIC_STORAGE_EMULATOR_HOST). Empty on GKE.",
    )
    pip_index_url: str | None = Field(
        None, description="PIP_INDEX_URL for function Pods' requirements (KINETIC_PIP_INDEX_URL)."
    )
    pip_extra_index_urls: str | None = Field(
        None,
        description="PIP_EXTRA_INDEX_URL, space-separated (KINETIC_PIP_EXTRA_INDEX_URLS).",
    )
    pip_trusted_hosts: str | None = Field(
        None, description="PIP_TRUSTED_HOST, space-separated (KINETIC_PIP_TRUSTED_HOSTS)."
    )
    pip_proxy: str | None = Field(
        None, description="PIP_PROXY for requirement installs (KINETIC_PIP_PROXY)."
    )
    pip_ca_certificates: str | None = Field(
        None,
        max_length=16384,
        description="PEM certificates pip trusts besides the image's bundle "
        "(KINETIC_PIP_CA_CERTIFICATES).",
    )
    runner_command: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["python", "-m", "kinetic.runtime.runner"],
        description="Entrypoint of function jobs, shell-split (KINETIC_RUNNER_COMMAND).",
    )
    runner_service_account: str = Field(
        "kinetic-runner",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        max_length=253,
        description="Service account every job pod runs as, in the job's namespace; the "
        "operator creates it there on first use, without a token, and never 'default' "
        "(KINETIC_RUNNER_SERVICE_ACCOUNT).",
    )
    accelerator_catalog: Annotated[Catalog, NoDecode] = Field(
        default_factory=default_catalog,
        description="Accelerator catalog as JSON or YAML (KINETIC_ACCELERATOR_CATALOG).",
    )
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Namespaces to watch, comma-separated; empty means all (KINETIC_NAMESPACES).",
    )
    operator_namespace: str = Field(
        "kinetic-system",
        description="Namespace of the operator and its ConfigMap (KINETIC_OPERATOR_NAMESPACE).",
    )
    config_map_name: str = Field(
        "kinetic-config",
        description="ConfigMap the operator publishes for clients (KINETIC_CONFIG_MAP_NAME).",
    )
    max_disruptions: int = Field(
        DEFAULT_MAX_DISRUPTIONS,
        ge=0,
        description="Disruptions retried per job without using its retries "
        "(KINETIC_MAX_DISRUPTIONS).",
    )
    attempt_history: int = Field(
        10, ge=1, description="Attempt records kept in status (KINETIC_ATTEMPT_HISTORY)."
    )
    pod_grace_seconds: int = Field(
        30,
        ge=0,
        le=3600,
        description="terminationGracePeriodSeconds of every job Pod: how long a cancelled or "
        "deleted attempt has between SIGTERM and SIGKILL, e.g. to save a checkpoint "
        "(KINETIC_POD_GRACE_SECONDS).",
    )
    rendezvous: Literal["dns", "podIP"] = Field(
        "dns",
        description="How gang members reach rank 0: dns, its name under the owner's headless "
        "Service; podIP, its Pod IP, for clusters without DNS (rank 0 is then created first, "
        "the other ranks once it has an address) (KINETIC_RENDEZVOUS).",
    )
    gang_network_policy: bool = Field(
        True,
        description="Give each owner of gangs a NetworkPolicy that lets only Pods of its own "
        "namespace reach the members (rank 0's rendezvous store trusts whoever connects) "
        "(KINETIC_GANG_NETWORK_POLICY).",
    )
    cluster_domain: str = Field(
        DEFAULT_CLUSTER_DOMAIN,
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="The cluster's DNS domain, in the fully qualified names gang members reach "
        "each other by (KINETIC_CLUSTER_DOMAIN).",
    )
    gang_scheduling_seconds: float = Field(
        DEFAULT_GANG_SCHEDULING_SECONDS,
        ge=1,
        description="How long a gang member may wait for a node before the whole gang is "
        "torn down and its attempt fails as GangUnschedulable "
        "(KINETIC_GANG_SCHEDULING_SECONDS).",
    )
    seal_secret: str = Field(
        "kinetic-operator-seal",
        min_length=1,
        description="The Secret in the operator's namespace holding the key that seals every "
        "Pod the operator makes (created on first start) (KINETIC_SEAL_SECRET).",
    )
    unschedulable_seconds: float | None = Field(
        DEFAULT_UNSCHEDULABLE_SECONDS,
        ge=0,
        description="How long a single-host attempt's Pod may wait for a node before the "
        "attempt fails as Unschedulable (it spends a retry); 0: no bound. A request no "
        "node can ever meet (an accelerator the cluster lacks) ends instead of waiting for "
        "ever; a cluster autoscaler adding nodes has this long (KINETIC_UNSCHEDULABLE_SECONDS).",
    )
    unit_target_seconds: float = Field(
        DEFAULT_TARGET_UNIT_SECONDS,
        gt=0,
        le=86_400,
        description="chunkSize auto: about how many seconds of work one Pod is given, unless "
        "a batch sets spec.targetUnitSeconds (KINETIC_UNIT_TARGET_SECONDS).",
    )
    unit_first_inputs: int = Field(
        DEFAULT_UNIT_FIRST_INPUTS,
        ge=1,
        le=MAX_CHUNK_SIZE,
        description="chunkSize auto: inputs a unit is given before any input's duration is "
        "measured (KINETIC_UNIT_FIRST_INPUTS).",
    )
    unit_min_seconds: float = Field(
        DEFAULT_UNIT_MIN_SECONDS,
        ge=0,
        le=3600,
        description="chunkSize auto: the least work, in measured seconds, a unit is given "
        "while inputs are left: a Pod's start costs a node more than a shorter unit does "
        "(KINETIC_UNIT_MIN_SECONDS).",
    )
    unit_starts_at_once: int = Field(
        DEFAULT_UNIT_STARTS_AT_ONCE,
        ge=0,
        le=10_000,
        description="chunkSize auto: a batch's units whose Pods may be starting at once, at "
        "least (as many as are running, once more run); 0: no pacing "
        "(KINETIC_UNIT_STARTS_AT_ONCE).",
    )
    progress_interval: float = Field(
        3.0,
        gt=0,
        le=60,
        description="chunkSize auto: how often a running unit's log is read for the inputs "
        "that ended (KINETIC_PROGRESS_INTERVAL).",
    )
    pod_ttl_seconds: float = Field(
        120.0,
        ge=0,
        description="How long a finished attempt Pod is kept (for `kubectl logs` and "
        "`describe`) once its outcome is recorded; its log is archived to storage before it "
        "is deleted (KINETIC_POD_TTL_SECONDS).",
    )
    log_archive_bytes: int = Field(
        2 << 20,
        ge=4096,
        le=64 << 20,
        description="Most bytes of a finished Pod's log archived to storage; a longer log "
        "keeps its end, after a line saying it was cut. The reaper archives up to 16 logs "
        "at once, each held in memory (KINETIC_LOG_ARCHIVE_BYTES).",
    )
    status_interval: float = Field(
        0.5,
        ge=0,
        description="Least seconds between routine status writes of a busy batch; launches, "
        "and the end of a batch, are written at once (KINETIC_STATUS_INTERVAL).",
    )
    manifest_interval: float = Field(
        10.0,
        gt=0,
        description="Least seconds between routine manifest writes of one batch "
        "(KINETIC_MANIFEST_INTERVAL).",
    )

    policy_config_map: str = Field(
        "kinetic-policy",
        description="ConfigMap in the operator's namespace holding the administrator's "
        "admission policy, read live (KINETIC_POLICY_CONFIG_MAP).",
    )
    policy_poll_seconds: float = Field(
        2.0,
        gt=0,
        le=10,
        description="Seconds between reads of the policy ConfigMap; an edit takes effect "
        "within this (KINETIC_POLICY_POLL_SECONDS).",
    )

    max_inputs: int = Field(
        DEFAULT_MAX_INPUTS,
        ge=1,
        le=MAX_INPUTS_CEILING,
        description="Most inputs one KineticBatch may have (count, items or grid points); "
        "larger batches are refused at admission and failed by the operator "
        "(KINETIC_MAX_INPUTS). Published to clients, which refuse before uploading.",
    )

    webhook_enabled: bool = Field(
        True,
        description="Serve the validating admission webhook: the bounds of KineticJobs and "
        "KineticBatches and the immutable fields of a batch, at `kubectl apply` time "
        "(KINETIC_WEBHOOK_ENABLED).",
    )
    webhook_host: str | None = Field(
        None,
        description="Host name the API server uses to reach the webhook, e.g. the "
        "operator Service's DNS name (KINETIC_WEBHOOK_HOST). Empty: the listening address.",
    )
    webhook_service: str | None = Field(
        None,
        description="namespace/name of the Service in front of the webhook "
        "(KINETIC_WEBHOOK_SERVICE). Set (the chart does): the API server reaches the webhook "
        "through that Service's endpoints, as it must for an operator running in a pod. "
        "Empty: it calls https://<webhook host>:<port> directly.",
    )
    webhook_certfile: str | None = Field(
        None,
        description="PEM certificate the webhook serves (KINETIC_WEBHOOK_CERTFILE); the chart "
        "makes it with its CA and ships the configuration that trusts it. Set, the operator "
        "touches no webhook configuration. Empty: a self-signed certificate, and the operator "
        "patches the configuration itself (an operator run by hand).",
    )
    webhook_keyfile: str | None = Field(
        None, description="Its private key, PEM (KINETIC_WEBHOOK_KEYFILE)."
    )
    webhook_addr: str = Field(
        "0.0.0.0",
        description="Address the webhook server listens on (KINETIC_WEBHOOK_ADDR).",
    )
    webhook_port: int = Field(
        9443,
        ge=1,
        le=65535,
        description="Port the webhook server listens on; the API server calls this same "
        "port on the webhook host (KINETIC_WEBHOOK_PORT).",
    )

    webhook_max_review_bytes: int = Field(
        MAX_REVIEW_BYTES,
        ge=64 << 10,
        le=64 << 20,
        description="Largest admission review the webhook reads; a larger one is denied by "
        "name, unread (KINETIC_WEBHOOK_MAX_REVIEW_BYTES). The default is above the largest "
        "review the API server sends for objects etcd can store with its default request "
        "limit (1.5 MiB); raise it with etcd's --max-request-bytes.",
    )
    webhook_reviews: int = Field(
        4,
        ge=1,
        le=64,
        description="Admission reviews read, decoded and judged at once; more wait "
        "KINETIC_WEBHOOK_WAIT_SECONDS for room, then are denied as busy "
        "(KINETIC_WEBHOOK_REVIEWS). Their bodies together stay under one review of the "
        "largest size plus 1 MiB.",
    )
    webhook_wait_seconds: float = Field(
        2.0,
        gt=0,
        le=8,
        description="How long a review waits for room before it is denied as busy; below the "
        "webhook's 10 s timeout (KINETIC_WEBHOOK_WAIT_SECONDS).",
    )
    webhook_client_cafile: str | None = Field(
        None,
        description="PEM CA that must have signed the client certificate of every caller "
        "of the webhook (KINETIC_WEBHOOK_CLIENT_CAFILE): set it when the API server "
        "presents one (an AdmissionConfiguration's kubeConfigFile). Empty: no client "
        "certificate is asked for.",
    )
    webhook_client_names: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="With a client CA: the names (subject common name or DNS name) one of "
        "which the client certificate must claim, comma-separated "
        "(KINETIC_WEBHOOK_CLIENT_NAMES). Empty: any certificate the CA signed.",
    )

    metrics_port: int = Field(
        8000,
        ge=0,
        le=65535,
        description="Port of the Prometheus /metrics endpoint; 0 serves none "
        "(KINETIC_METRICS_PORT).",
    )

    tracemalloc_frames: int = Field(
        0,
        ge=0,
        le=100,
        description="Trace allocations with this many frames and write heap snapshots to the "
        "temporary directory on SIGUSR1; 0 (the default) traces nothing "
        "(KINETIC_TRACEMALLOC_FRAMES). For finding what holds memory, not for production.",
    )
    tracemalloc_seconds: float = Field(
        0.0,
        ge=0,
        description="With tracing on, also write a heap snapshot every this many seconds; "
        "0 writes them only on SIGUSR1 (KINETIC_TRACEMALLOC_SECONDS).",
    )

    @field_validator("unschedulable_seconds")
    @classmethod
    def _zero_is_no_bound(cls, value: float | None) -> float | None:
        return value or None

    @field_validator("runner_service_account")
    @classmethod
    def _not_default(cls, value: str) -> str:
        """Job pods never share the namespace's 'default' account: whatever an administrator
        grants that account for other workloads would be every job's too."""
        if value == "default":
            raise ValueError(
                "KINETIC_RUNNER_SERVICE_ACCOUNT (chart value runnerServiceAccount) may not be "
                "'default': job pods get an account of their own, which the operator creates "
                "in each namespace on first use; leave it unset for kinetic-runner, or name "
                "another"
            )
        return value

    @field_validator("runner_command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("runner_pythons", mode="before")
    @classmethod
    def _split_pythons(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    def runner_image_for(self, python: str | None) -> str:
        """The runner image for a function pickled by Python ``python`` (the first
        version's when the spec does not say)."""
        return f"{self.runner_image}-py{python or self.runner_pythons[0]}"

    def cluster_env(self) -> dict[str, str]:
        """What every job container (init containers too) needs to know of the cluster:
        the storage emulator's address, where there is one."""
        if self.storage_emulator_host:
            return {"STORAGE_EMULATOR_HOST": self.storage_emulator_host}
        return {}

    def package_index_env(self) -> dict[str, str]:
        """pip's own variables for a function Pod's requirement install (only pip reads
        them), plus the extra CA certificates the runner adds to pip's bundle."""
        pairs = {
            "PIP_INDEX_URL": self.pip_index_url,
            "PIP_EXTRA_INDEX_URL": self.pip_extra_index_urls,
            "PIP_TRUSTED_HOST": self.pip_trusted_hosts,
            "PIP_PROXY": self.pip_proxy,
            "KINETIC_PIP_CA_CERTIFICATES": self.pip_ca_certificates,
        }
        return {k: v for k, v in pairs.items() if v}

    @field_validator("webhook_client_names", mode="before")
    @classmethod
    def _split_client_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @model_validator(mode="after")
    def _names_need_a_ca(self) -> OperatorSettings:
        """Client names are read from a certificate only a client CA makes the server ask for:
        names without a CA would refuse every review."""
        if self.webhook_client_names and not self.webhook_client_cafile:
            raise ValueError(
                "KINETIC_WEBHOOK_CLIENT_NAMES (chart value webhook.clientNames) is set but "
                "KINETIC_WEBHOOK_CLIENT_CAFILE (webhook.clientCA) is not: give the CA that "
                "signs the API server's client certificate, or leave the names empty"
            )
        return self

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [ns.strip() for ns in value.split(",") if ns.strip()]
        return value

    @field_validator("accelerator_catalog", mode="before")
    @classmethod
    def _parse_catalog(cls, value: Any) -> Any:
        """Entries given here extend (or replace by name) the built-in catalog.

        A platform team adds its own GPU types or TPU slices without having to
        repeat the ones Kinetic already knows; an empty value keeps the built-in.
        """
        # YAML is a superset of JSON, so one parser takes both.
        extra = yaml.safe_load(value) if isinstance(value, str) else value
        if not isinstance(extra, dict):
            return default_catalog() if extra is None else extra
        merged = default_catalog().model_dump()
        for key, entry in extra.items():
            if key in ("gpus", "tpus") and isinstance(entry, dict):
                merged[key] = {**merged[key], **entry}
            else:
                merged[key] = entry
        return merged

    @field_validator("storage_root", mode="after")
    @classmethod
    def _strip_root(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else None
