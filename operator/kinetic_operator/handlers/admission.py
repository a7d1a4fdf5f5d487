"""The validating webhook: CREATE and UPDATE of KineticJobs and KineticBatches.

What a structural schema cannot say is judged here, with the same pure
checks (`kinetic.model.limits`) that the operator applies again to whatever was
stored while the webhook was down, and that the client applies before it
uploads anything: the nesting depth and size of inline inputs, the number
of inputs (against the operator's ``maxInputs``), and where the input hash
list may live. An UPDATE of a batch is also refused when it changes a field
that cannot change on a running batch. Dry runs (`kubectl apply
--dry-run=server`) are judged the same way; the handlers have no side
effects.

The administrator's policy (`kinetic-policy`, see `kinetic_operator.logic.policy`)
is judged here too, against the policy in force at this moment. While that
policy is unknown (its ConfigMap not read yet) the webhook admits what the
other checks allow: the operator accepts nothing new until it can judge it. On UPDATE
of a batch only what the change adds is refused: a batch admitted under a
looser policy can still be cancelled or throttled after the policy
tightened (nothing else of it may change). An UPDATE of a KineticJob that
changes anything but ``spec.cancel`` is judged whole, as the operator
judges every changed generation (`job_logic.changed_after_acceptance`); a
cancel alone is never refused.

A ``fuse`` data volume (``spec.volumes[i].fuse``, and a batch's
``spec.template.volumes[i].fuse`` or ``spec.jobs[j].volumes[i].fuse``) is
refused where the cluster has no GCS FUSE CSI driver: the CSIDriver object is
read only for a spec that has one (`data_problems`). The operator judges it
again when it builds each Pod, for what got in while the webhook was down.

Every refusal is a 422 whose message names the field, the limit and the fix;
`kubectl` prints it after ``admission webhook "…" denied the request:``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kopf
from kinetic.model import limits
from kinetic.model.catalog import Catalog
from kinetic.model.data import GCSFUSE_DRIVER
from kinetic.model.gang import batch_hosts_problems, job_hosts_problems
from kinetic.model.rerun import from_batch_problems
from kinetic.model.resources import (
    GROUP,
    VERSION,
    KineticBatchSpec,
    KineticJobSpec,
    debug_problem,
)
from pydantic import ValidationError

from kinetic_operator.handlers.policy import current_policy
from kinetic_operator.logic.batch_logic import immutable_change
from kinetic_operator.logic.datavolumes import fuse_refusals, spec_volume_groups, uses_fuse
from kinetic_operator.logic.errors import PolicyUnavailable
from kinetic_operator.logic.policy import Kind, Policy, policy_violations
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import operator_state
from kinetic_operator.webhook import BATCH_HOOK, JOB_HOOK, Hook

log = logging.getLogger("kinetic.operator")


def job_problems(body: dict[str, Any] | None, catalog: Catalog | None = None) -> list[str]:
    """Why a KineticJob must be refused at admission (empty: admit it)."""
    spec = (body or {}).get("spec")
    return (
        limits.check_job_spec(spec)
        or debug_problems({"spec": spec})
        or (hosts_problems_of({"spec": spec}, catalog) if catalog is not None else [])
    )


def hosts_problems_of(specs: dict[str, Any], catalog: Catalog) -> list[str]:
    """``hosts`` that cannot run with its accelerator (`gang.job_hosts_problems`), by path.

    A spec that does not parse is left to the reconciler, as in `debug_problems`.
    """
    problems: list[str] = []
    for path, raw in specs.items():
        if not isinstance(raw, dict) or raw.get("hosts") is None:
            continue
        try:
            spec = KineticJobSpec.model_validate(raw)
        except ValidationError:
            continue
        problems += job_hosts_problems(spec, catalog, path)
    return problems


def debug_problems(specs: dict[str, Any]) -> list[str]:
    """`debug` set where no runner waits for a debugger (a container job), by field path.

    Refused at admission, so `kubectl apply` says so at once; a spec that does
    not parse is left to the reconciler, which reports every problem with it.
    """
    problems: list[str] = []
    for path, raw in specs.items():
        if not isinstance(raw, dict) or not raw.get("debug"):
            continue
        try:
            spec = KineticJobSpec.model_validate(raw)
        except ValidationError:
            continue
        if (problem := debug_problem(spec, path)) is not None:
            problems.append(problem)
    return problems


def _batch_job_specs(spec: Any) -> dict[str, Any]:
    """A batch's job specs by field path: its template, or each of its jobs."""
    if not isinstance(spec, dict):
        return {}
    jobs = spec.get("jobs")
    jobs = jobs if isinstance(jobs, list) else []
    return {"spec.template": spec.get("template")} | {
        f"spec.jobs[{i}]": job for i, job in enumerate(jobs)
    }


def batch_problems(
    old: dict[str, Any] | None, new: dict[str, Any] | None, settings: OperatorSettings
) -> list[str]:
    """Why a KineticBatch create (``old`` None) or update must be refused (empty: admit it)."""
    problems = limits.check_batch_spec(
        (new or {}).get("spec"),
        storage_root=settings.storage_root,
        max_inputs=settings.max_inputs,
    ) + from_batch_problems((new or {}).get("spec"))
    problems = problems or debug_problems(_batch_job_specs((new or {}).get("spec")))
    problems = problems or _batch_hosts(new, settings.accelerator_catalog)
    if problems or old is None:
        return problems
    change = immutable_change_of(old, new)
    return [change] if change else []


def _batch_hosts(body: dict[str, Any] | None, catalog: Catalog) -> list[str]:
    """A batch's gangs (`gang.batch_hosts_problems`); left to the reconciler if unparsable."""
    try:
        spec = KineticBatchSpec.model_validate((body or {}).get("spec") or {})
    except ValidationError:
        return []
    return batch_hosts_problems(spec, catalog)


def immutable_change_of(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
    """The message for an update that changes an immutable field of a batch, else None.

    Only maxConcurrent, cancel and cancelIndexes may change on an existing
    batch. Updates this cannot judge are allowed: an old spec that does not
    parse (the operator never accepted it either), or a new one that does
    not (the operator fails the batch with a readable message). The
    operator-side refusal stays in place for updates that bypass the webhook.
    """
    try:
        before = KineticBatchSpec.model_validate((old or {}).get("spec") or {})
        after = KineticBatchSpec.model_validate((new or {}).get("spec") or {})
    except ValidationError:
        return None
    return immutable_change(before, after)


def check_spec_update(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """Raise `kopf.AdmissionError` (422) if an update changes an immutable field of a batch."""
    change = immutable_change_of(old, new)
    if change is not None:
        raise kopf.AdmissionError(change, code=422)


def policy_problems(
    kind: Kind,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    namespace: str,
    policy: Policy,
    settings: OperatorSettings,
) -> list[str]:
    """What ``policy`` refuses in a create (``old`` None), or what an update adds to refuse."""

    def judged(body: dict[str, Any] | None) -> list[str]:
        return policy_violations(
            kind,
            namespace,
            (body or {}).get("spec"),
            policy,
            settings.accelerator_catalog,
            settings.default_image,
        )

    try:
        found = judged(new)
    except PolicyUnavailable:
        return []  # the reconcile waits for the policy before it accepts anything new
    if old is None or not found:
        return found
    if kind == "KineticJob" and _but_cancel(old) != _but_cancel(new):
        return found  # a changed job spec runs from its next attempt on: judged whole
    before = set(judged(old))
    return [p for p in found if p not in before]


def data_problems(
    kind: Kind,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    driver: Callable[[], bool | None],
) -> list[str]:
    """The fuse volumes of a create (``old`` None) that this cluster cannot mount.

    An update is judged only when it changes a job's spec beyond ``cancel``
    (a batch's jobs cannot change). ``driver`` reads whether the GCS FUSE CSI
    driver is installed (None: cannot tell); it is called only for a spec
    with a fuse volume. If reading it fails, nothing is refused here: the
    operator judges the spec again when it builds the Pod.
    """
    if old is not None and (kind == "KineticBatch" or _but_cancel(old) == _but_cancel(new)):
        return []
    groups = spec_volume_groups(kind, (new or {}).get("spec"))
    if not any(uses_fuse(volumes) for _at, volumes in groups):
        return []
    try:
        present = driver()
    except Exception as exc:  # noqa: BLE001  # the operator's own check still applies
        log.warning("Cannot read CSIDriver %s at admission: %s", GCSFUSE_DRIVER, exc)
        return []
    return [why for at, volumes in groups for why in fuse_refusals(volumes, at, present)]


def _fuse_driver(memo: Any) -> Callable[[], bool | None]:
    return lambda: operator_state(memo).kube.csi_driver_installed(GCSFUSE_DRIVER)


def _but_cancel(body: dict[str, Any] | None) -> Any:
    spec = (body or {}).get("spec")
    return {k: v for k, v in spec.items() if k != "cancel"} if isinstance(spec, dict) else spec


def _namespace(body: dict[str, Any], namespace: str | None) -> str:
    return namespace or (body.get("metadata") or {}).get("namespace") or ""


def _refuse(problems: list[str]) -> None:
    if problems:
        raise kopf.AdmissionError("; ".join(problems), code=422)


def validate_job(
    body: kopf.Body,
    old: kopf.Body | None = None,
    operation: str = "CREATE",
    memo: Any = None,
    namespace: str | None = None,
    **_: Any,
) -> None:
    """The validating webhook of KineticJobs (main resource; CREATE and UPDATE)."""
    new = dict(body)
    before = dict(old) if operation == "UPDATE" and old is not None else None
    settings = operator_state(memo).settings
    problems = (
        job_problems(new, settings.accelerator_catalog)
        or data_problems("KineticJob", before, new, _fuse_driver(memo))
        or policy_problems(
            "KineticJob", before, new, _namespace(new, namespace), current_policy(memo), settings
        )
    )
    _refuse(problems)


def validate_batch(
    old: kopf.Body | None,
    body: kopf.Body,
    operation: str,
    memo: Any = None,
    namespace: str | None = None,
    **_: Any,
) -> None:
    """The validating webhook of KineticBatches (main resource; CREATE and UPDATE)."""
    new = dict(body)
    before = dict(old) if operation == "UPDATE" and old is not None else None
    settings = operator_state(memo).settings
    problems = (
        batch_problems(before, new, settings)
        or data_problems("KineticBatch", before, new, _fuse_driver(memo))
        or policy_problems(
            "KineticBatch", before, new, _namespace(new, namespace), current_policy(memo), settings
        )
    )
    _refuse(problems)


# The handler that judges each hook's reviews, in the order they are registered.
_VALIDATORS: dict[Hook, Callable[..., None]] = {JOB_HOOK: validate_job, BATCH_HOOK: validate_batch}


@kopf.on.startup()
def register_webhooks(memo: kopf.Memo, **_: Any) -> None:
    """Serve the validating webhooks, if the operator's settings enable them.

    Registered at start-up, not at import: importing this module registers no
    webhook, and the switch is read from the settings in Kopf's memo (under
    `kopf run -m kinetic_operator.main` as under `python -m kinetic_operator`).
    That is early enough: Kopf reads its webhook handlers only once every
    start-up handler has finished. In Kopf 1.45, `spawn_tasks`
    (``kopf/_core/reactor/running.py``) creates the webhook server, the
    webhook configuration managers and the resource observer (which learns
    the webhooks' resources) as tasks guarded by the flag that
    `startup_cleanup_activities` raises after the start-up handlers; each
    reads ``registry._webhooks`` only then, and each review looks its handler
    up in the registry when it arrives. Kopf runs a start-up handler again
    only if it raised, and nothing here raises once a handler is registered,
    so none is registered twice.
    """
    if operator_state(memo).settings.webhook_enabled:
        register_validators(kopf.get_default_registry())


def register_validators(registry: kopf.OperatorRegistry) -> None:
    """Add the validating handler of each hook (job, batch) to ``registry``."""
    for hook, fn in _VALIDATORS.items():
        _register(registry, hook, fn)


def _register(registry: kopf.OperatorRegistry, hook: Hook, fn: Callable[..., None]) -> None:
    # ignore_failures mirrors the configuration's failurePolicy Ignore (see webhook.py).
    kopf.on.validate(
        GROUP,
        VERSION,
        hook.plural,
        id=hook.id,
        operations=list(hook.operations),
        side_effects=False,
        ignore_failures=True,
        persistent=False,
        registry=registry,
    )(fn)
