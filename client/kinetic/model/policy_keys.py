"""The policy keys the client follows: how `kinetic batches submit` behaves. Pure.

The administrator's policy is the ConfigMap ``kinetic-policy`` in the
operator's namespace. Most of its keys say what may be stored, and the
operator's webhook judges them (``kinetic_operator.policy``). Two say how a
person submits, which no webhook can see, so the client reads them:

``dryRunDefault``
    ``kinetic batches submit`` only previews (checks and a server-side dry
    run, nothing created) unless the command says to submit: ``--yes``,
    ``--no-dry-run``, or the file's own ``dry_run: false`` / ``confirmed:
    true``. The guide's "always preview first".
``requireConfirmation``
    Every submission is confirmed by a person, at a terminal, after seeing
    the preview. ``--yes`` (and a file's ``confirmed: true``) does not stand
    in for that answer, and without a terminal nothing is created. This is
    what a platform team means by "require explicit approval": a script or a
    stale flag must not approve a submission nobody looked at. Automation
    that must not stop for a prompt uses ``kubectl apply``, where the
    webhook still applies every admission key.

Both are guard rails against accidents, not access control: a user can
always create objects with kubectl, and the webhook is what enforces limits.
The operator's parser accepts both keys (a policy that sets them is valid)
and never refuses an object for them.

``allowedImages`` is the webhook's to enforce, but the client reads it too,
so that the preview refuses an image with the very rule and sentence the
operator uses (`kinetic.model.images`), even where the webhook is not
reached. An entry that is not one (the operator then keeps its previous
policy, which the client cannot see) turns that preview off, with a note.

A value that is not true or false (``requireConfirmation: enabled``) is read
as true, with a note: an administrator who wrote something meant to turn the
guard on, and the stricter reading only costs a prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import yaml
from pydantic import TypeAdapter, ValidationError

from kinetic.model.images import pattern_problem

POLICY_CONFIG_MAP = "kinetic-policy"
DRY_RUN_DEFAULT = "dryRunDefault"
REQUIRE_CONFIRMATION = "requireConfirmation"
ALLOWED_IMAGES = "allowedImages"

_BOOL = TypeAdapter(bool)


@dataclass(frozen=True)
class SubmissionPolicy:
    """What the policy asks of `kinetic batches submit`; the defaults are no policy."""

    dry_run_default: bool = False
    require_confirmation: bool = False
    allowed_images: tuple[str, ...] = ()  # empty: any image (`kinetic.model.images`)


def submission_policy(data: Mapping[str, str] | None) -> tuple[SubmissionPolicy, list[str]]:
    """The client's keys from a policy ConfigMap's ``data`` (each value YAML), and notes on
    bad values.

    Other keys are the operator's business and are ignored here; an empty or
    absent key is false (or, for allowedImages, no list).
    """
    values: dict[str, bool] = {}
    images, notes = _allowed_images((data or {}).get(ALLOWED_IMAGES))
    for key, field in (
        (DRY_RUN_DEFAULT, "dry_run_default"),
        (REQUIRE_CONFIRMATION, "require_confirmation"),
    ):
        text = (data or {}).get(key)
        if text is None or not str(text).strip():
            continue
        try:
            values[field] = _BOOL.validate_python(yaml.safe_load(str(text)))
        except (yaml.YAMLError, ValidationError):
            values[field] = True
            notes.append(f"{key} {text!r} is not true or false; following it as true")
    return SubmissionPolicy(**values, allowed_images=images), notes


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
