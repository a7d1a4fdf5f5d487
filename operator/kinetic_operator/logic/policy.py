"""The administrator's admission policy: the ``kinetic-policy`` ConfigMap, and what it refuses.

A platform team caps what one user may ask for: how many inputs one batch
may have (``maxBatchSize``), how many accelerator chips one job's Pod may
request (``maxAcceleratorsPerJob``, counted through the operator's
accelerator catalog), which namespaces may run Kinetic work at all
(``allowedNamespaces``; ``"*"`` is any namespace) and which images jobs may
run (``allowedImages``: registries, repository paths matched by whole parts,
exact tags or digests, or ``"*"``; `kinetic.model.images` is the rule).
Every key is optional; absent or empty means unlimited. Four more keys,
``dryRunDefault``, ``requireConfirmation``, ``defaultGpuType`` and
``maxJobsPerRequest``, say how ``kinetic batches submit`` behaves: the
client reads them (`kinetic.model.policy_keys`); they are parsed here so
that a policy setting them is valid, and never refuse an object. The client
reads ``allowedImages`` too, to preview what admission will say.

The ConfigMap lives in the operator's namespace and is read live (see
`handlers/policy.py`), so an administrator's ``kubectl edit`` holds within
seconds, without a restart. This module is pure: parsing the ConfigMap's
data and judging one object's raw spec against a parsed policy.

Decisions where the issue was silent:

* A policy is judged when an object is admitted (the webhook, CREATE and
  UPDATE, dry runs included) and when the operator first accepts an object
  (its status has no phase yet: it was stored while the webhook was down).
  A policy tightened later does not touch objects the operator already
  accepted: killing a running batch because an administrator lowered a cap
  would lose work the policy allowed when it was submitted.
* The operator's own default image is always allowed: the administrator
  chose it, and a job that names no image cannot be refused for it.
* A ConfigMap that does not parse keeps the last good policy in force (and
  the operator says so, in its log and a Warning Event on the ConfigMap): a
  typo must not silently lift every limit. A missing ConfigMap means no
  policy, as before the chart shipped one.
* Until the ConfigMap has been read once (an API error, a ConfigMap that does
  not parse from the start), the policy is unknown (`UnreadPolicy`), not
  empty: judging by it raises `PolicyUnavailable`, so the operator accepts
  nothing new (the reconcile fails, says why on the object and is retried)
  and the webhook leaves the object to that reconcile. A read that fails
  after a good one keeps the good one, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import yaml
from kinetic.model.catalog import Catalog, UnknownAccelerator, resolve
from kinetic.model.gang import effective_hosts
from kinetic.model.images import image_refusals, job_specs, pattern_problem
from kinetic.model.limits import MAX_HOSTS, spec_total
from kinetic.model.policy_keys import (
    DEFAULT_GPU_TYPE,
    DRY_RUN_DEFAULT,
    DRY_RUN_DEFAULT_UNSET,
    GPU_TYPE_PATTERN,
    MAX_JOBS_PER_REQUEST,
    POLICY_CONFIG_MAP,
    REQUIRE_CONFIRMATION,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kinetic_operator.logic.errors import PolicyError, PolicyUnavailable

ANY_NAMESPACE = "*"

Kind = Literal["KineticJob", "KineticBatch"]


class Policy(BaseModel):
    """What the administrator allows; None or empty means no limit on that axis."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    max_batch_size: int | None = Field(
        None, ge=0, alias="maxBatchSize", description="Most inputs (or jobs) in one batch."
    )
    max_accelerators_per_job: int | None = Field(
        None,
        ge=0,
        alias="maxAcceleratorsPerJob",
        description="Most GPUs or TPU chips one job may request, over all of its hosts.",
    )
    max_hosts_per_job: int | None = Field(
        None,
        ge=1,
        le=MAX_HOSTS,
        alias="maxHostsPerJob",
        description="Most Pods one attempt of a multi-host job may run as (its gang).",
    )
    allowed_namespaces: tuple[str, ...] = Field(
        (),
        alias="allowedNamespaces",
        description='Namespaces that may run Kinetic work; "*" is any namespace.',
    )
    allowed_images: tuple[str, ...] = Field(
        (),
        alias="allowedImages",
        description="Images jobs may run: registries, repositories (and what is below them), "
        'exact tags or digests; "*" is any image (kinetic.model.images).',
    )
    # The client's keys (kinetic.model.policy_keys): valid here, never judged by the webhook.
    dry_run_default: bool = Field(
        DRY_RUN_DEFAULT_UNSET,
        alias=DRY_RUN_DEFAULT,
        description="kinetic batches submit only previews unless told to submit.",
    )
    require_confirmation: bool = Field(
        False,
        alias=REQUIRE_CONFIRMATION,
        description="kinetic batches submit needs a person's yes at a terminal.",
    )
    default_gpu_type: str | None = Field(
        None,
        alias=DEFAULT_GPU_TYPE,
        pattern=GPU_TYPE_PATTERN,
        description="The GPU type of a guide job that counts gpus but names no gpu_type.",
    )
    max_jobs_per_request: int | None = Field(
        None,
        ge=1,
        alias=MAX_JOBS_PER_REQUEST,
        description="Most objects one kinetic batches submit creates (the guide's "
        "max_batch_size); not maxBatchSize, the inputs of one KineticBatch.",
    )
    source: str = Field(
        f"{POLICY_CONFIG_MAP} in kinetic-system",
        exclude=True,
        description="Where this policy came from, quoted in every refusal.",
    )

    @field_validator(
        "max_batch_size",
        "max_accelerators_per_job",
        "max_hosts_per_job",
        "max_jobs_per_request",
        "default_gpu_type",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if value in ("", None) else value

    @field_validator("allowed_namespaces", "allowed_images", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        """A YAML list, or one comma- or space-separated string (easier in `kubectl edit`)."""
        if value is None:
            return ()
        if isinstance(value, str):
            return tuple(v for v in value.replace(",", " ").split() if v)
        return value

    @field_validator("dry_run_default", mode="before")
    @classmethod
    def _blank_is_the_default(cls, value: Any) -> Any:
        return DRY_RUN_DEFAULT_UNSET if value in ("", None) else value

    @field_validator("require_confirmation", mode="before")
    @classmethod
    def _blank_is_false(cls, value: Any) -> Any:
        return False if value in ("", None) else value

    @field_validator("allowed_namespaces")
    @classmethod
    def _only_a_lone_star(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """A lone "*" is any namespace; "team-*" would silently match none, so it is refused."""
        for name in value:
            if "*" in name and name != ANY_NAMESPACE:
                raise ValueError(
                    f'{name!r} is not a namespace: "*" alone allows every namespace; '
                    "other names are matched exactly"
                )
        return value

    @field_validator("allowed_images")
    @classmethod
    def _image_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry is a registry, a repository, an image:tag, an image@digest or "*"."""
        problems = [why for entry in value if (why := pattern_problem(entry)) is not None]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    def allows_namespace(self, namespace: str) -> bool:
        """Whether work may run in ``namespace``: no list, a listed name, or "*"."""
        allowed = self.allowed_namespaces
        return not allowed or ANY_NAMESPACE in allowed or namespace in allowed


class UnreadPolicy(Policy):
    """The policy in force before its ConfigMap could be read: unknown, so it allows nothing
    new (`policy_violations` raises `PolicyUnavailable`); ``why`` says what the read met."""

    why: str = Field("it has not been read yet", exclude=True)


def parse_policy(data: dict[str, str] | None, source: str) -> Policy:
    """The policy in a ConfigMap's ``data`` (each value YAML); raises PolicyError.

    Unknown keys are errors, not ignored: a misspelt ``maxBatchSzie`` would
    otherwise lift the limit the administrator meant to set. A lone ``*``
    (``allowedNamespaces: "*"`` in `kubectl edit`) is that string, not the
    YAML alias it would otherwise start.
    """
    values: dict[str, Any] = {}
    for key, text in (data or {}).items():
        text = text.strip()
        try:
            values[key] = text if text in ("", ANY_NAMESPACE) else yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PolicyError(f"{source}: data.{key} is not valid YAML: {exc}") from exc
    try:
        return Policy.model_validate({**values, "source": source})
    except ValidationError as exc:
        raise PolicyError(f"{source}: {_explain(exc)}") from exc


def policy_after_read(
    config_map: dict[str, Any] | None, held: Policy, source: str
) -> tuple[Policy, str | None]:
    """The policy to hold after reading its ConfigMap, and why the read was not taken.

    A missing ConfigMap (None) is no policy; one that does not parse keeps
    ``held`` and returns the reason, for the log and a Warning Event. With no
    policy read before (``held`` is an `UnreadPolicy`), the policy stays
    unknown, and the reason becomes its ``why``.
    """
    if config_map is None:
        return Policy(source=source), None
    try:
        return parse_policy(config_map.get("data"), source), None
    except PolicyError as exc:
        if isinstance(held, UnreadPolicy):
            return UnreadPolicy(source=source, why=str(exc)), (
                f"{exc}. No policy was read before, so nothing new is accepted until this is fixed."
            )
        return held, f"{exc}. The previous policy stays in force until this is fixed."


def policy_after_error(held: Policy, error: str) -> Policy:
    """The policy to hold after its ConfigMap could not be read: the one held, if one was
    ever read; else still unknown, now saying why."""
    if isinstance(held, UnreadPolicy):
        return UnreadPolicy(source=held.source, why=error)
    return held


def _explain(exc: ValidationError) -> str:
    known = ", ".join(f.alias or n for n, f in Policy.model_fields.items() if n != "source")
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parts.append(f"data.{key} is not a policy key (known keys: {known})")
        else:
            parts.append(f"data.{key}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)


# --------------------------------------------------------------------------- judging


def accelerator_count(catalog: Catalog, accelerator: Any) -> int:
    """GPUs or TPU chips one Pod of ``accelerator`` requests (0 for cpu or an unknown name:
    the catalog check refuses that one with its own message)."""
    if not isinstance(accelerator, str):
        return 0
    try:
        placement = resolve(catalog, accelerator)
    except UnknownAccelerator:
        return 0
    wanted = (catalog.gpu_resource, catalog.tpu_resource)
    return sum(int(v) for k, v in placement.limits.items() if k in wanted)


def policy_violations(
    kind: Kind,
    namespace: str,
    spec: Any,
    policy: Policy,
    catalog: Catalog,
    default_image: str | None = None,
) -> list[str]:
    """Why ``policy`` refuses this object (empty: it may run), one actionable sentence each.

    Raises `PolicyUnavailable` when the policy is not known yet (`UnreadPolicy`).
    """
    if isinstance(policy, UnreadPolicy):
        raise PolicyUnavailable(
            f"the admission policy ({policy.source}) cannot be read: {policy.why}. Nothing new "
            "is accepted until it can be (a missing ConfigMap means no policy; an unreadable "
            "one is waited for): check the operator's log and its permission to get the "
            "ConfigMap"
        )
    if not isinstance(spec, dict):
        return []
    at = f"({policy.source})"
    problems: list[str] = []
    if not policy.allows_namespace(namespace):
        problems.append(
            f"namespace {namespace!r} may not run Kinetic jobs; allowed namespaces: "
            f"{', '.join(policy.allowed_namespaces)} {at}"
        )
    if kind == "KineticBatch" and policy.max_batch_size is not None:
        size = spec_total(spec, policy.max_batch_size)
        if size > policy.max_batch_size:
            problems.append(
                f"batch size {size:,} exceeds maxBatchSize {policy.max_batch_size:,} {at}: "
                "split the work into several batches"
            )
    for path, job in job_specs(kind, spec):
        problems += _job_violations(path, job, policy, catalog, default_image, at)
    return problems


def _job_violations(
    path: str,
    job: Mapping[str, Any],
    policy: Policy,
    catalog: Catalog,
    default_image: str | None,
    at: str,
) -> list[str]:
    problems = _hosts_violations(path, job, policy, catalog, at)
    limit = policy.max_accelerators_per_job
    if limit is not None:
        hosts = job_hosts(catalog, job)
        count = accelerator_count(catalog, job.get("accelerator")) * hosts
        if count > limit:
            across = f" across {hosts} hosts" if hosts > 1 else ""
            problems.append(
                f"{path}.accelerator {job['accelerator']!r} requests {count} accelerators per "
                f"job{across}, which exceeds maxAcceleratorsPerJob {limit} {at}: choose a "
                "smaller accelerator" + (" or fewer hosts" if hosts > 1 else "")
            )
    return problems + image_refusals(path, job, policy.allowed_images, default_image, policy.source)


def job_hosts(catalog: Catalog, job: Mapping[str, Any]) -> int:
    """The Pods one attempt of a job spec runs as (a gang's hosts; 1 for a malformed value,
    which the schema refuses with its own message)."""
    hosts, accelerator = job.get("hosts"), job.get("accelerator")
    if hosts is not None and (isinstance(hosts, bool) or not isinstance(hosts, int)):
        return 1
    return effective_hosts(hosts, catalog, accelerator if isinstance(accelerator, str) else None)


def _hosts_violations(
    path: str, job: Mapping[str, Any], policy: Policy, catalog: Catalog, at: str
) -> list[str]:
    """More hosts than ``maxHostsPerJob``, asked for or implied by a multi-host accelerator."""
    limit = policy.max_hosts_per_job
    hosts = job_hosts(catalog, job)
    if limit is None or hosts <= limit:
        return []
    if job.get("hosts") is not None:
        return [
            f"{path}.hosts is {hosts}, above maxHostsPerJob {limit} {at}: ask for at most "
            f"{limit} hosts"
        ]
    return [
        f"{path}.accelerator {job.get('accelerator')!r} is a slice of {hosts} hosts, above "
        f"maxHostsPerJob {limit} {at}: choose a slice of at most {limit} hosts"
    ]


def accepted_before(status: Any) -> bool:
    """Whether the operator accepted the object whose status this is.

    Acceptance writes ``observedGeneration``; any phase past PENDING also
    means it acted. ``phase`` alone does not: the CRD defaults it to PENDING
    in every status the API server returns, so the first status write of any
    kind (a ReconcileFailed condition, say) makes it appear. Taking that for
    acceptance let an object whose first reconcile failed (the policy
    unreadable, for one) run unjudged on the next.
    """
    if not isinstance(status, dict):
        return False
    if status.get("observedGeneration") is not None:
        return True
    return status.get("phase") not in (None, "", "PENDING")


def first_acceptance_violations(
    kind: Kind,
    body: dict[str, Any],
    policy: Policy,
    catalog: Catalog,
    default_image: str | None = None,
) -> list[str]:
    """The operator's check, for objects stored while the webhook was down.

    Only an object the operator has not accepted yet is judged: once
    accepted, a later, tighter policy leaves it alone (`accepted_before`).
    """
    if not isinstance(body, dict) or accepted_before(body.get("status")):
        return []
    namespace = (body.get("metadata") or {}).get("namespace") or ""
    return policy_violations(kind, namespace, body.get("spec"), policy, catalog, default_image)
