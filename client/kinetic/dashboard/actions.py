"""What the page's buttons do: each is asked of the API server as a dry run first.

An action is taken in two requests. The first (``confirm`` false) sends the
exact write with ``dryRun=All``: RBAC, the schema and the operator's admission
webhook all judge it, nothing is stored, and the page shows either what will
happen or the API server's refusal in its own words. The second (``confirm``
true, after the user said yes) dry-runs it again (rights can change in
between) and then makes it with the same call the client's handles make.

The server acts with the user's kubeconfig only, through its one
`kinetic.api.kube.KubeClient`: what they may not do, it cannot do either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes.client import ApiException

from kinetic.api.batch_rerun import rerun_body, source_view
from kinetic.api.batches import new_group_id, rerun_batch
from kinetic.api.config import resolve
from kinetic.api.inputs import add_cancel_indexes
from kinetic.api.kube import KubeClient, kube_reason
from kinetic.model import resources as r
from kinetic.model.ranges import IndexSet

ActionName = Literal["cancel-batch", "cancel-input", "cancel-job", "rerun-failed", "delete"]
ACTIONS: tuple[ActionName, ...] = (
    "cancel-batch",
    "cancel-input",
    "cancel-job",
    "rerun-failed",
    "delete",
)
DRY_RUN = "All"


class BadAction(ValueError):
    """The request names no action we take, or lacks what it needs; the message says which."""


@dataclass(frozen=True)
class Ask:
    """One action as the page asked for it."""

    action: str
    namespace: str
    name: str
    kind: str = "batch"  # what "delete" deletes: "batch" or "job"
    index: int | None = None  # "cancel-input": which input

    def check(self) -> Ask:
        """Refuse a malformed ask, naming the field and what it may be."""
        if self.action not in ACTIONS:
            raise BadAction(f"action={self.action!r}: choose one of {', '.join(ACTIONS)}")
        if not self.namespace or not self.name:
            raise BadAction("namespace and name are required: the object to act on")
        if self.kind not in ("batch", "job"):
            raise BadAction(f"kind={self.kind!r}: choose batch or job")
        if self.action == "cancel-input" and (
            not isinstance(self.index, int) or isinstance(self.index, bool) or self.index < 0
        ):
            raise BadAction(
                f"index={self.index!r}: cancel-input needs the input's index, 0 or more"
            )
        return self

    @property
    def plural(self) -> str:
        batch = self.action != "cancel-job" and (self.action != "delete" or self.kind == "batch")
        return r.BATCH_PLURAL if batch else r.JOB_PLURAL


@dataclass(frozen=True)
class Outcome:
    """What an action did, or would do, or why the API server refused it."""

    ok: bool
    done: bool  # False: only dry-run
    says: str  # what will happen, what happened, or the API server's refusal

    def wire(self) -> dict[str, Any]:
        return {"ok": self.ok, "done": self.done, "says": self.says}


def take(ask: Ask, confirm: bool, kube: KubeClient) -> Outcome:
    """Dry-run the action; with ``confirm``, then take it. A refusal is an Outcome, not an
    error: the page shows it as the API server said it."""
    ask = ask.check()
    plan = _PLANS[ask.action]
    try:
        says, dry_run, act = plan(ask, kube)
        dry_run()
    except ApiException as e:
        return Outcome(False, False, f"the API server refused it: {e.status} {kube_reason(e)}")
    except (LookupError, ValueError) as e:  # nothing to rerun, the batch is gone, ...
        return Outcome(False, False, str(e))
    if not confirm:
        return Outcome(True, False, says)
    try:
        return Outcome(True, True, act())
    except ApiException as e:
        return Outcome(False, False, f"the API server refused it: {e.status} {kube_reason(e)}")
    except (LookupError, ValueError) as e:
        return Outcome(False, False, str(e))


Plan = tuple[str, Callable[[], Any], Callable[[], str]]


def _patch_dry(ask: Ask, kube: KubeClient, spec: dict[str, Any]) -> None:
    kube.custom.patch_namespaced_custom_object(
        r.GROUP, r.VERSION, ask.namespace, ask.plural, ask.name, {"spec": spec}, dry_run=DRY_RUN
    )


def _cancel(ask: Ask, kube: KubeClient) -> Plan:
    what = "batch" if ask.plural == r.BATCH_PLURAL else "job"
    says = (
        f"Cancel {what} {ask.namespace}/{ask.name}: sets spec.cancel; the operator stops its "
        f"running Pods{' and launches no more inputs' if what == 'batch' else ''}."
    )

    def act() -> str:
        if kube.patch_spec(ask.plural, ask.namespace, ask.name, {"cancel": True}) is None:
            raise LookupError(f"{what} {ask.namespace}/{ask.name} is gone")
        return f"{what} {ask.name}: spec.cancel is set; the operator is stopping it"

    return says, lambda: _patch_dry(ask, kube, {"cancel": True}), act


def _cancel_input(ask: Ask, kube: KubeClient) -> Plan:
    index = ask.index if ask.index is not None else -1
    obj = kube.get(r.BATCH_PLURAL, ask.namespace, ask.name)
    if obj is None:
        raise LookupError(f"batch {ask.namespace}/{ask.name} is gone")
    current = IndexSet.parse((obj.get("spec") or {}).get("cancelIndexes", ""))
    wanted = str(current | IndexSet([index]))
    says = (
        f"Cancel input {index} of batch {ask.name}: adds it to spec.cancelIndexes; "
        "the other inputs carry on."
    )

    def act() -> str:
        if add_cancel_indexes(ask.namespace, ask.name, [index], kube) is None:
            raise LookupError(f"batch {ask.namespace}/{ask.name} is gone")
        return f"input {index} of {ask.name}: cancel asked (spec.cancelIndexes)"

    return says, lambda: _patch_dry(ask, kube, {"cancelIndexes": wanted}), act


def _rerun(ask: Ask, kube: KubeClient) -> Plan:
    cfg = resolve(namespace=ask.namespace, context=kube.context)
    source = source_view(ask.name, ask.namespace, cfg.storage_root, kube)
    new_name = new_group_id()
    body, chosen = rerun_body(source, failed=True, namespace=ask.namespace, new_name=new_name)
    says = (
        f"Create batch {new_name} running the {len(chosen)} failed input(s) of {ask.name} "
        f"again ({chosen}), each keeping its original index."
    )

    def dry_run() -> None:
        kube.custom.create_namespaced_custom_object(
            r.GROUP, r.VERSION, ask.namespace, r.BATCH_PLURAL, body, dry_run=DRY_RUN
        )

    def act() -> str:
        made = rerun_batch(ask.name, failed=True, name=new_name, namespace=ask.namespace, kube=kube)
        return f"created batch {made.group_id} ({made.total} input(s))"

    return says, dry_run, act


def _delete(ask: Ask, kube: KubeClient) -> Plan:
    says = (
        f"Delete {ask.kind} {ask.namespace}/{ask.name}: its Pods go with it. Stored results, "
        "logs and the manifest stay (`kinetic jobs cleanup` or `batches cleanup` deletes them)."
    )

    def dry_run() -> None:
        kube.custom.delete_namespaced_custom_object(
            r.GROUP, r.VERSION, ask.namespace, ask.plural, ask.name, dry_run=DRY_RUN
        )

    def act() -> str:
        if not kube.delete(ask.plural, ask.namespace, ask.name):
            raise LookupError(f"{ask.kind} {ask.namespace}/{ask.name} was already gone")
        return f"{ask.kind} {ask.name} is being deleted"

    return says, dry_run, act


_PLANS: dict[str, Callable[[Ask, KubeClient], Plan]] = {
    "cancel-batch": _cancel,
    "cancel-job": _cancel,
    "cancel-input": _cancel_input,
    "rerun-failed": _rerun,
    "delete": _delete,
}
