"""Integration fixtures: a real cluster from ``.local/env`` (make cluster-up) or ``$KUBECONFIG``.

The same suite runs against the local process-node cluster and against kind or
any other cluster.  Without a reachable cluster the tests are skipped with a
message, except under CI (``CI=true``), where that is an error.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_helpers import Kube, local_env, wait_for
from kubernetes import client, config

__all__ = ["Kube", "wait_for"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def kube_env() -> dict[str, str]:
    """Environment for code under test: $KUBECONFIG wins, else .local/env."""
    env = local_env()
    if os.environ.get("KUBECONFIG"):
        env["KUBECONFIG"] = os.environ["KUBECONFIG"]
    return env


@pytest.fixture(scope="session")
def kube(kube_env: dict[str, str]) -> Kube:
    kubeconfig = kube_env.get("KUBECONFIG")
    problem = None
    if not kubeconfig or not Path(kubeconfig).exists():
        problem = "no cluster: run `make cluster-up` (writes .local/env) or set KUBECONFIG"
    else:
        try:
            cfg = client.Configuration()
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
            api = client.ApiClient(cfg)
            client.VersionApi(api).get_code(_request_timeout=5)
        except Exception as e:  # noqa: BLE001
            problem = f"cluster from {kubeconfig} not reachable: {e}"
    if problem:
        if _in_ci():
            pytest.fail(problem + " (CI=true: failing instead of skipping)", pytrace=False)
        pytest.skip(problem)
    local = local_env().get("KUBECONFIG")
    return Kube(
        kubeconfig=kubeconfig,
        api=api,
        core=client.CoreV1Api(api),
        batch=client.BatchV1Api(api),
        is_local=bool(local) and Path(local).resolve() == Path(kubeconfig).resolve(),
    )


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (its pods go with it)."""
    name = f"kt-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods are refused until the namespace's default ServiceAccount (and, on 1.20, its token)
    # exist; wait for them so tests do not race the controllers.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            sa = kube.core.read_namespaced_service_account("default", name)
            if sa.secrets or not _needs_sa_secret(kube):
                break
        except client.ApiException:
            pass
        time.sleep(0.2)
    yield name
    try:
        kube.core.delete_namespace(name, propagation_policy="Background")
    except client.ApiException:
        pass


_sa_secret_cache: dict[str, bool] = {}


def _needs_sa_secret(kube: Kube) -> bool:
    """Before 1.24, a Pod is admitted only once its SA's token Secret exists."""
    if "v" not in _sa_secret_cache:
        minor = client.VersionApi(kube.api).get_code().minor
        _sa_secret_cache["v"] = int("".join(ch for ch in minor if ch.isdigit()) or 99) < 24
    return _sa_secret_cache["v"]
