"""Integration fixtures: a real cluster from ``.local/env`` (make cluster-up) or ``$KUBECONFIG``.

The same suite runs against the local process-node cluster and against kind or
any other cluster.  Without a reachable cluster the tests are skipped with a
message, except under CI (``CI=true``), where that is an error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kinetic.model.resources import GROUP, JOB_PLURAL
from kinetic_dev.operator import DEPLOYMENT, NAMESPACE
from kinetic_testing.cluster import EFFECT_SECONDS, read_policy, unrestricted, write_policy
from kinetic_testing.gcs_emulator import start_fake_gcs
from kube_helpers import REPO, Kube, fresh_namespace, local_env, wait_for
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
    with fresh_namespace(kube) as name:
        yield name


# ----------------------------------------------------------------------- the operator


def _installed(kube: Kube) -> bool:
    """The chart's operator Deployment exists (`make cluster-up`, or a user's `helm install`)."""
    got = kube.kubectl(
        "get", "deployment", "-A", "-l", "app.kubernetes.io/name=kinetic", "-o", "name", check=False
    )
    return got.returncode == 0 and bool(got.stdout.strip())


@pytest.fixture(scope="session")
def operator(kube: Kube, kube_env: dict[str, str], tmp_path_factory) -> Iterator[None]:
    """CRDs installed and an operator serving every namespace."""
    applied = kube.kubectl("apply", "-f", str(REPO / "crds"), check=False)
    if applied.returncode != 0:
        present = kube.kubectl("get", "crd", f"{JOB_PLURAL}.{GROUP}", check=False)
        if present.returncode != 0:
            pytest.fail(f"cannot install the CRDs: {applied.stderr}", pytrace=False)
    wait_for(
        lambda: kube.kubectl("get", JOB_PLURAL, "-A", check=False).returncode == 0,
        what="the KineticJob API to be served",
    )

    external = os.environ.get("KINETIC_TEST_OPERATOR") == "external"
    if external or _installed(kube):
        yield
        return

    log_path = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {**os.environ, **local_env(), **kube_env}
    env.setdefault("KINETIC_RUNNER_COMMAND", f"{sys.executable} -m kinetic.runtime.runner")
    kopf = Path(sys.executable).with_name("kopf")
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [str(kopf), "run", "--standalone", "--all-namespaces", "-m", "kinetic_operator.main"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        wait_for(
            lambda: (
                proc.poll() is None
                and "Initial authentication has finished" in log_path.read_text()
            ),
            timeout=60,
            what=f"the operator to start (log: {log_path})",
        )
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"operator log: {log_path}", file=sys.stderr)


@pytest.fixture(scope="session")
def client_env(kube: Kube, kube_env: dict[str, str], operator: None) -> Iterator[dict[str, str]]:
    """os.environ set up for the in-process kinetic client, as a user's shell would be."""
    saved = dict(os.environ)
    os.environ.update({**local_env(), **kube_env})
    try:
        yield dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def runs(client_env: dict[str, str]) -> Iterator[str]:
    """Where this test's Pods record their runs (a fresh storage folder; `witness_command`)."""
    import uuid

    from kinetic import storage
    from kinetic.api.config import resolve

    prefix = storage.join(resolve().storage_root, "test-runs", uuid.uuid4().hex)
    yield prefix
    storage.delete_prefix(prefix + "/")


# ----------------------------------------------------------------------- shared by several files


@pytest.fixture
def ns(client_env: dict[str, str], namespace: str) -> str:
    """A fresh namespace, with the client set up as a user's shell would be."""
    return namespace


@pytest.fixture(scope="module")
def installed(kube: Kube, operator: None) -> None:
    """The operator installed by its Helm chart (not run beside the tests)."""
    got = kube.kubectl("get", "deployment", DEPLOYMENT, "-n", NAMESPACE, check=False)
    if got.returncode != 0:
        pytest.fail(
            "the operator is not installed by the chart in this cluster: "
            "`make cluster-up` (or `helm install` on kind) installs it",
            pytrace=False,
        )


@pytest.fixture
def policy(
    kube: Kube, operator: None, namespace: str
) -> Iterator[Callable[[dict[str, str]], None]]:
    """Set the policy for one test; the chart's policy is restored (and in force) afterwards."""
    # Read only once the chart's policy is in force: what is restored afterwards is never
    # another test's policy caught half-way.
    wait_for(lambda: unrestricted(kube), timeout=EFFECT_SECONDS * 2, what="the chart's policy")
    saved = read_policy(kube)
    yield lambda data: write_policy(kube, {**saved, **data})
    write_policy(kube, saved)
    wait_for(
        lambda: unrestricted(kube),
        timeout=EFFECT_SECONDS * 2,
        what="the chart's policy to be in force again",
    )


@pytest.fixture(scope="module")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """STORAGE_EMULATOR_HOST of a running fake-gcs-server, set in os.environ for the module."""
    existing = os.environ.get("STORAGE_EMULATOR_HOST")
    if existing:
        yield existing
        return
    endpoint, proc = start_fake_gcs(tmp_path_factory.mktemp("fake-gcs") / "server.log")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", endpoint)
        try:
            yield endpoint
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def gcs_bucket(gcs_server: str) -> str:
    """A fresh bucket on the emulator, as ``gs://<name>``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    name = f"kinetic-test-{uuid.uuid4().hex[:12]}"
    gcs.Client(project="kinetic-test", credentials=AnonymousCredentials()).create_bucket(name)
    return f"gs://{name}"
