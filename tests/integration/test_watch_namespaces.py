"""The chart's watchNamespaces, installed for real: the operator serves those namespaces only.

The release is upgraded with one watched namespace (a Role there, `--namespace`
flags), checked, and upgraded back to the local defaults, even when the test fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import helm_sdkpy as helm
import pytest
from kinetic.model import resources as r
from kube_helpers import REPO, Kube, fresh_namespace, wait_for, wait_operator_ready
from kubernetes import client

pytestmark = pytest.mark.integration

IDENTITY = "system:serviceaccount:kinetic-system:kinetic-operator"


def _upgrade(kube: Kube, values: dict) -> None:
    from kinetic_dev.operator import NAMESPACE, RELEASE, chart_dir

    config = helm.Configuration(namespace=NAMESPACE, kubeconfig=kube.kubeconfig)
    chart = str(chart_dir(REPO))
    asyncio.run(helm.Upgrade(config).run(RELEASE, chart, values=values, wait=False))


def _operator_args(kube: Kube) -> list[str] | None:
    """The command of the operator's Pods once the rollout is complete and one of them
    leads, or None while they are being replaced."""
    from kinetic_dev import operator as local_operator
    from kinetic_dev.config import LocalConfig

    cfg = LocalConfig()
    if not local_operator.ready(cfg):
        return None
    commands = {
        tuple(p["spec"]["containers"][0]["command"]) for p in local_operator.operator_pods(cfg)
    }
    return list(commands.pop()) if len(commands) == 1 else None


@pytest.fixture
def watched_only(kube: Kube, operator: None, namespace: str) -> Iterator[tuple[str, str]]:
    """The release watching only ``namespace``; another namespace it must leave alone."""
    from kinetic_dev.config import LocalConfig
    from kinetic_dev.operator import installed_values

    defaults = installed_values(LocalConfig())
    with fresh_namespace(kube) as other:
        try:
            _upgrade(kube, {**defaults, "watchNamespaces": [namespace]})
            wait_for(
                lambda: (args := _operator_args(kube)) and f"--namespace={namespace}" in args,
                timeout=120,
                what="the operator to restart watching one namespace",
            )
            yield namespace, other
        finally:
            _upgrade(kube, defaults)
            wait_for(
                lambda: (args := _operator_args(kube)) and "--all-namespaces" in args,
                timeout=120,
                what="the operator to watch every namespace again",
            )
            wait_operator_ready(kube)


def _job(kube: Kube, ns: str, name: str) -> dict:
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.JOB_KIND,
        "metadata": {"name": name},
        "spec": {"container": {"command": ["true"]}},
    }
    kube.apply(ns, body)
    return body


def _phase(kube: Kube, ns: str, name: str) -> str | None:
    obj = client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
        r.GROUP, r.VERSION, ns, r.JOB_PLURAL, name
    )
    return (obj.get("status") or {}).get("phase")


def _can(kube: Kube, verb: str, resource: str, ns: str) -> bool:
    out = kube.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as={IDENTITY}", check=False)
    return out.stdout.strip() == "yes"


def test_the_operator_serves_only_the_namespaces_it_watches(
    kube: Kube, watched_only: tuple[str, str]
) -> None:
    watched, other = watched_only
    args = _operator_args(kube)
    assert args is not None and "--all-namespaces" not in args
    assert _can(kube, "create", "pods", watched) and not _can(kube, "create", "pods", other)
    assert not _can(kube, "list", "kineticjobs.kinetic.dev", other)

    _job(kube, other, "ignored")
    _job(kube, watched, "served")
    wait_for(lambda: _phase(kube, watched, "served") == "SUCCEEDED", timeout=120, what="served")
    time.sleep(3)  # the operator is plainly working; the other namespace's job stays untouched
    assert _phase(kube, other, "ignored") is None
    assert not kube.core.list_namespaced_pod(other).items
