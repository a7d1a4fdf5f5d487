"""Creating the operator's Pods: sealed, and under a name no one else holds.

Pod names are deterministic (`kinetic.model.names`): creating an attempt's
Pod twice is a no-op, which exactly-once rests on. But anyone who may create
Pods in the namespace can take a name first. So a name that turns out to be
held is looked at: a Pod the operator made (its seal, `kinetic_operator.logic.seal`)
is this very attempt's, made by an earlier run; anyone else's Pod is left
alone, and the attempt takes its first alternative name at once
(`names.alternative_pod_name`, from a token only the operator can derive), so
squatting a name stalls nothing and needs no restart. Pods are found by their
labels and seal afterwards, whatever name they got.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kinetic.model.names import (
    alternative_pod_name,
    alternative_service_name,
    gang_policy_name,
    gang_service_name,
)

from kinetic_operator.kube import Kube
from kinetic_operator.logic import podspec
from kinetic_operator.logic.errors import Rejected
from kinetic_operator.logic.seal import Sealer, controller_uid
from kinetic_operator.settings import OperatorSettings

log = logging.getLogger("kinetic.operator")

ALTERNATIVES = 3  # more than one held means someone read the ones before: then give up

Rename = Callable[[dict[str, Any], str], dict[str, Any]]
"""``rename(manifest, name)``: the same Pod under another name (whatever in it follows the
name, e.g. where its log is archived, follows too)."""


@dataclass(frozen=True)
class Made:
    """The attempt's Pod exists under ``name``; ``created``: by this call."""

    name: str
    created: bool


class NamesHeld(Rejected):
    """Every name the attempt could have is held by Pods the operator did not make."""


def create_sealed(kube: Kube, manifest: dict[str, Any], rename: Rename) -> Made:
    """Create ``manifest`` sealed, under its own name or, where a Pod the operator did not
    make holds that, under the first alternative nobody holds."""
    sealer = kube.sealer
    canonical = manifest["metadata"]["name"]
    held: list[str] = []
    for k in range(ALTERNATIVES + 1):
        name = (
            canonical if k == 0 else alternative_pod_name(canonical, _token(sealer, canonical, k))
        )
        body = manifest if k == 0 else rename(copy.deepcopy(manifest), name)
        made = _create_or_find(kube, sealer, body)
        if made is not None:
            if held:
                log.warning("Pods %s hold the names of %s: created it as %s", held, canonical, name)
            return made
        held.append(name)
    raise NamesHeld(
        f"the names {', '.join(held)} are all held by Pods this operator did not create "
        "(someone in the namespace made Pods under its names): delete them, or submit again"
    )


def _create_or_find(kube: Kube, sealer: Sealer | None, body: dict[str, Any]) -> Made | None:
    """The Pod under this name: created now, or made by the operator before; None when
    someone else's Pod holds the name."""
    meta = body["metadata"]
    if sealer is not None:
        sealer.seal(body)
    for _ in range(2):  # the Pod seen holding the name may be gone by the time it is read
        if kube.create_pod(body):
            return Made(meta["name"], True)
        found = kube.read_pod(meta["namespace"], meta["name"])
        if found is None:
            continue
        return Made(meta["name"], False) if _ours(sealer, found, body) else None
    return None


def _ours(sealer: Sealer | None, found: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the Pod holding the name is the one the operator made for this owner."""
    mine = controller_uid(wanted["metadata"])
    if controller_uid(found.get("metadata") or {}) != mine:
        return False
    return sealer is None or sealer.verdict(found) == "sealed"


def _token(sealer: Sealer | None, canonical: str, k: int) -> str:
    if sealer is None:
        return str(k)  # no key (a test's operator): deterministic all the same
    return sealer.token(canonical, k)


def ensure_gang_object(kube: Kube, manifest: dict[str, Any]) -> str:
    """Make an object an owner's gangs use (its Service, its NetworkPolicy) unless this
    process made it already, sealed like its Pods; returns the name it has.

    One held by an object the operator did not make (a Service squatted under the name,
    which would otherwise name whoever it selects as the gang's members) is left alone, and
    this one takes a keyed alternative name: a gang uses objects the operator made, or none.
    """
    meta = manifest["metadata"]
    kind, canonical = manifest["kind"], meta["name"]
    mine = controller_uid(meta) or ""
    key = (kind, meta["namespace"], canonical, mine)
    if key in kube.owned:
        return kube.owned[key]
    create, read = (
        (kube.create_service, kube.read_service)
        if kind == "Service"
        else (kube.create_network_policy, kube.read_network_policy)
    )
    sealer = kube.sealer
    for k in range(ALTERNATIVES + 1):
        name = (
            canonical
            if k == 0
            else alternative_service_name(canonical, _token(sealer, canonical, k))
        )
        body = copy.deepcopy(manifest)
        body["metadata"]["name"] = name
        if sealer is not None:
            sealer.seal(body)
        if create(body):
            kube.owned[key] = name
            return name
        found = read(meta["namespace"], name)
        if found is not None and _ours(sealer, found, body):
            kube.owned[key] = name
            return name
        log.warning(
            "%s %s/%s is not the operator's: trying another name", kind, meta["namespace"], name
        )
    raise NamesHeld(
        f"{kind} names for {canonical} are all held by objects this operator did not create"
    )


def ensure_gang_objects(kube: Kube, owner: podspec.Owner, settings: OperatorSettings) -> str | None:
    """What an owner's gangs need besides their Pods, made once: the NetworkPolicy that keeps
    other namespaces from the members (unless the chart turns it off), and, where the
    cluster has DNS, the headless Service that names them. Returns the Service's name (None
    without DNS: a Service would name nobody, and its endpoints cost writes)."""
    service = None
    if settings.rendezvous == "dns":
        service = ensure_gang_object(kube, podspec.gang_service(owner))
    if settings.gang_network_policy:
        name = gang_policy_name(service or gang_service_name(owner.name))
        ensure_gang_object(kube, podspec.gang_network_policy(owner, name))
    return service
