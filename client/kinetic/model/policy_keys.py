"""The policy keys the client follows: how `kinetic batches submit` behaves. Pure.

The administrator's policy is the ConfigMap ``kinetic-policy`` in the
operator's namespace. Most of its keys say what may be stored, and the
operator's webhook judges them (``kinetic_operator.logic.policy``). These say how a
person submits, which no webhook can see, so the client reads them:

``dryRunDefault`` (true unless set otherwise)
    ``kinetic batches submit`` only previews (checks and a server-side dry
    run, nothing created) unless told to submit: ``--no-dry-run`` or
    ``--yes`` on the command line, or the file's own ``dry_run: false``. The
    guide's "always preview first", and its ``dry_run`` default. A file's
    ``confirmed: true`` answers the confirmation; it does not turn the
    preview off, as in the guide, where ``dry_run`` and ``confirmed`` are two
    switches.
``requireConfirmation``
    Every submission is confirmed by a person, at a terminal, after seeing
    the preview. ``--yes`` (and a file's ``confirmed: true``) does not stand
    in for that answer, and without a terminal nothing is created. This is
    what a platform team means by "require explicit approval": a script or a
    stale flag must not approve a submission nobody looked at. Automation
    that must not stop for a prompt uses ``kubectl apply``, where the
    webhook still applies every admission key.
``defaultGpuType``
    The GPU type (``l4``, ``a100``, ...) of a guide job that counts ``gpus``
    but names no ``gpu_type``. Unset, such a job is refused, naming the types
    and this key: guessing a type would pick the price of someone's job.
``maxJobsPerRequest``
    The most objects one ``kinetic batches submit`` creates: the jobs of a
    request in the guide's format (its ``max_batch_size``), or the documents
    of a file. A larger request is refused whole, before anything is created.
    Not ``maxBatchSize``, the webhook's key, which bounds the inputs of one
    KineticBatch.

They are guard rails against accidents, not access control: a user can
always create objects with kubectl, and the webhook is what enforces limits.
The operator's parser accepts every key (a policy that sets them is valid)
and never refuses an object for them.

``allowedImages`` is the webhook's to enforce, but the client reads it too,
so that the preview refuses an image with the very rule and sentence the
operator uses (`kinetic.model.images`), even where the webhook is not
reached. An entry that is not one (the operator then keeps its previous
policy, which the client cannot see) turns that preview off, with a note.

A boolean that is not true or false (``requireConfirmation: enabled``) is
read as true, with a note: an administrator who wrote something meant to
turn the guard on, and the stricter reading only costs a prompt. A
``maxJobsPerRequest`` or ``defaultGpuType`` that cannot be read is left
unset, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import yaml
from pydantic import Field, TypeAdapter, ValidationError

from kinetic.model.images import pattern_problem

POLICY_CONFIG_MAP = "kinetic-policy"
DRY_RUN_DEFAULT = "dryRunDefault"
REQUIRE_CONFIRMATION = "requireConfirmation"
DEFAULT_GPU_TYPE = "defaultGpuType"
MAX_JOBS_PER_REQUEST = "maxJobsPerRequest"
ALLOWED_IMAGES = "allowedImages"

# Each key's value with no policy (no ConfigMap, or the key absent or empty).
DRY_RUN_DEFAULT_UNSET = True  # preview first, as the guide's dry_run defaults to true

_BOOL = TypeAdapter(bool)
_COUNT = TypeAdapter(Annotated[int, Field(ge=1)])
GPU_TYPE_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


@dataclass(frozen=True)
class SubmissionPolicy:
    """What the policy asks of `kinetic batches submit`; the defaults are no policy."""

    dry_run_default: bool = DRY_RUN_DEFAULT_UNSET
    require_confirmation: bool = False
    default_gpu_type: str | None = None
    max_jobs_per_request: int | None = None
    allowed_images: tuple[str, ...] = ()  # empty: any image (`kinetic.model.images`)


def submission_policy(data: Mapping[str, str] | None) -> tuple[SubmissionPolicy, list[str]]:
    """The client's keys from a policy ConfigMap's ``data`` (each value YAML), and notes on
    bad values.

    Other keys are the operator's business and are ignored here; an absent or
    empty key has its default (for allowedImages, no list).
    """
    values: dict[str, Any] = {}
    images, notes = _allowed_images((data or {}).get(ALLOWED_IMAGES))
    for key, field, read in (
        (DRY_RUN_DEFAULT, "dry_run_default", _flag),
        (REQUIRE_CONFIRMATION, "require_confirmation", _flag),
        (DEFAULT_GPU_TYPE, "default_gpu_type", _gpu_type),
        (MAX_JOBS_PER_REQUEST, "max_jobs_per_request", _count),
    ):
        text = (data or {}).get(key)
        if text is None or not str(text).strip():
            continue
        value, note = read(str(text))
        values[field] = value
        if note:
            notes.append(f"{key} {text!r} {note}")
    return SubmissionPolicy(**values, allowed_images=images), notes


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _flag(text: str) -> tuple[bool, str | None]:
    try:
        return _BOOL.validate_python(_yaml(text)), None
    except ValidationError:
        return True, "is not true or false; following it as true"


def _count(text: str) -> tuple[int | None, str | None]:
    try:
        return _COUNT.validate_python(_yaml(text), strict=True), None
    except ValidationError:
        return None, "is not a whole number of 1 or more; following no limit"


def _gpu_type(text: str) -> tuple[str | None, str | None]:
    value = _yaml(text)
    name = value.strip().lower().removeprefix("gpu-") if isinstance(value, str) else ""
    if re.match(GPU_TYPE_PATTERN, name):
        return name, None
    return None, "is not a GPU type (such as l4 or a100); following no default type"


def _allowed_images(text: str | None) -> tuple[tuple[str, ...], list[str]]:
    """allowedImages as the operator reads it (a YAML list, or one comma- or space-separated
    string), and a note when an entry is not one."""
    if text is None or not str(text).strip():
        return (), []
    text = str(text).strip()
    try:
        value = text if text == "*" else yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return (), [f"{ALLOWED_IMAGES} {text!r} is not a list of images; not previewing it"]
    problems = [why for entry in value if (why := pattern_problem(entry)) is not None]
    if problems:
        return (), [f"{ALLOWED_IMAGES}: {'; '.join(problems)}; not previewing it"]
    return tuple(value), []
