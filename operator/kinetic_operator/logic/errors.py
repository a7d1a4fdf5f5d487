"""The errors the operator's decisions raise, in one module the I/O side and the logic share.

They live apart from the modules that raise them so that a pure decision (building a Pod body,
reading a policy) never loads the Kubernetes wrapper just to name its refusal: `kube` raises
`Rejected` when the API server refuses an object, and the logic raises it (or `FuseUnavailable`)
when it refuses one itself, before any request is made.
"""

from __future__ import annotations


class Rejected(Exception):
    """The API server refused the object itself (400/422): retrying will not help."""


class FuseUnavailable(Rejected):
    """A fuse volume this cluster cannot mount: the attempt is refused with the message."""


class UnitRefused(Exception):
    """This unit cannot be given a Pod (e.g. an input without a hash); it fails."""


class PolicyError(ValueError):
    """The ConfigMap's data is not a policy; the message names the key and the fix."""


class PolicyUnavailable(Exception):
    """The policy cannot be judged by yet: whatever needs it waits (see `UnreadPolicy`)."""
