"""The administrator's policy as the client reads it: only the keys about submitting.

`kinetic.model.policy_keys` says what ``dryRunDefault``,
``requireConfirmation``, ``defaultGpuType`` and ``maxJobsPerRequest`` mean.
This module reads them from the ConfigMap ``kinetic-policy`` in the
operator's namespace (``KINETIC_OPERATOR_NAMESPACE``, else kinetic-system:
where the client finds the operator's published settings too). The chart
lets every authenticated user get that one ConfigMap; when the read fails
anyway (an older chart, another cluster's RBAC) the client follows the keys'
defaults (preview first, as the guide does) and returns a note saying so.
"""

from __future__ import annotations

from kubernetes.client import ApiException

from kinetic.api.config import operator_namespace
from kinetic.api.kube import KubeClient
from kinetic.model.policy_keys import POLICY_CONFIG_MAP, SubmissionPolicy, submission_policy

_DEFAULTS = "following no policy (its defaults: preview first, no default GPU type)"


def policy_source() -> str:
    """The policy's ConfigMap as messages name it: ``kinetic-policy in kinetic-system``."""
    return f"{POLICY_CONFIG_MAP} in {operator_namespace()}"


def read_submission_policy(context: str | None = None) -> tuple[SubmissionPolicy, str | None]:
    """The policy's submission keys, and a one-line note when it is not followed as written.

    No ConfigMap (404) is no policy, silently, as for the operator; any other
    failure to read it is no policy with a note naming why. No policy is each
    key's default: a preview first, no default GPU type, no request limit.
    """
    source = policy_source()
    try:
        cm = KubeClient(context).config_map(operator_namespace(), POLICY_CONFIG_MAP)
    except ApiException as exc:
        if exc.status == 404:
            return SubmissionPolicy(), None
        why = f"{exc.status} {exc.reason}".strip()
        return SubmissionPolicy(), f"{source} could not be read ({why}): {_DEFAULTS}"
    except Exception as exc:  # noqa: BLE001 — unreachable or a broken connection: no policy
        return SubmissionPolicy(), f"{source} could not be read ({exc}): {_DEFAULTS}"
    policy, notes = submission_policy(cm.data)
    return policy, (f"{source}: {'; '.join(notes)}" if notes else None)
