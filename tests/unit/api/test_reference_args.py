"""The reference API's keyword arguments: accepted, each with the meaning it has on Kubernetes.

`cluster` picks a kubeconfig context (an unknown one is an error listing the
contexts); `backend="pathways"` is refused, naming what to use; the arguments
that cannot matter warn once per call, naming each and its equivalent; the
handles' `cleanup_timeout` bounds the wait for the deletion.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic.api import reference
from kinetic.api.config import ConfigError
from kinetic.api.handle import JobHandle
from kinetic.api.inputs import InputHandle
from kinetic_testing.kubeconfigs import kubeconfig_of


@pytest.fixture
def contexts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig outside any Pod: a local context and two GKE-named ones."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KINETIC_CONTEXT", raising=False)
    path = kubeconfig_of(
        tmp_path / "config",
        ("kinetic-local", "local"),
        ("gke_proj_us-central1-a_train", "gke_proj_us-central1-a_train"),
        ("gke_proj_europe-west4-a_eval", "gke_proj_europe-west4-a_eval"),
        current="kinetic-local",
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def one_warning(caught: list[warnings.WarningMessage]) -> str:
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in deprecations]
    assert deprecations[0].filename == __file__  # it points at the caller's line
    return str(deprecations[0].message)


# --------------------------------------------------------------------------- warnings


def test_run_warns_once_naming_each_ignored_argument_and_its_equivalent() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = kinetic.run(project="my-proj", zone="us-central1-a", base_image_repo="me/kinetic")(
            lambda: 1
        )
    message = one_warning(caught)
    assert message.startswith("kinetic.run(): project=, zone=, base_image_repo= are accepted")
    assert "project='my-proj': the cluster is the one of your kubeconfig context" in message
    assert "pass context= (or cluster= naming a context)" in message
    assert "zone='us-central1-a'" in message
    assert "base_image_repo='me/kinetic'" in message
    assert "runner image" in message and "image= (or container_image=)" in message
    # Recorded as given, for code that reads them back.
    assert (fn.options["project"], fn.options["zone"]) == ("my-proj", "us-central1-a")
    assert fn.options["base_image_repo"] == "me/kinetic"


@pytest.mark.parametrize("backend", ["gke", None])
def test_the_reference_default_backend_is_accepted_silently(backend: str | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = kinetic.run(backend=backend)(lambda: 1)
    assert fn.options["backend"] == backend


def test_pathways_is_refused_naming_the_argument_and_what_to_use() -> None:
    with pytest.raises(ValueError) as refused:
        kinetic.run(backend="pathways")
    message = str(refused.value)
    assert isinstance(refused.value, reference.UnsupportedBackend)
    assert "kinetic.run(backend='pathways')" in message
    assert "multi-host" in message and "not supported" in message
    assert "Leave backend= out (or pass backend='gke')" in message
    assert "hosts=N" in message


def test_an_unknown_backend_is_refused_too() -> None:
    with pytest.raises(ValueError, match=r"kinetic.attach\(backend='tpu'\): there is no such"):
        kinetic.attach("job-1", backend="tpu")


# --------------------------------------------------------------------------- cluster


@pytest.mark.parametrize(
    ("cluster", "context"),
    [
        ("kinetic-local", "kinetic-local"),  # a context of that name
        ("local", "kinetic-local"),  # the context of the cluster entry of that name
        ("train", "gke_proj_us-central1-a_train"),  # GKE's name for the reference's cluster
    ],
)
def test_cluster_selects_a_kubeconfig_context(contexts: Path, cluster: str, context: str) -> None:
    """(That attach, attach_batch, run and list_jobs then use it is checked on the live
    cluster: tests/integration/test_reference_args_live.py.)"""
    assert reference.context_for("kinetic.attach", cluster, None) == context


def test_an_unknown_cluster_is_an_error_listing_the_contexts(contexts: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        kinetic.attach("job-1", cluster="prod")
    message = str(refused.value)
    assert f"kinetic.attach(cluster='prod'): {contexts} has no context for that cluster" in message
    assert (
        "Its contexts: gke_proj_europe-west4-a_eval, gke_proj_us-central1-a_train, kinetic-local"
        in message
    )
    assert "leave it out to use the current context (now 'kinetic-local')" in message


def test_a_cluster_of_several_contexts_asks_for_the_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = kubeconfig_of(tmp_path / "config", ("admin@prod", "prod"), ("dev@prod", "prod"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(ConfigError, match=r"\(admin@prod, dev@prod\); pass context= the one"):
        kinetic.list_jobs(cluster="prod")


def test_cluster_without_a_kubeconfig_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"has none\. Point KUBECONFIG at a kubeconfig with"):
        kinetic.attach_batch("grp-1a2b3c4d", cluster="train")


def test_cluster_inside_a_pod_says_the_pod_talks_to_its_own_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"runs in a Pod and talks to its own cluster"):
        kinetic.attach("job-1", cluster="train")


def test_cluster_and_another_context_conflict(contexts: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        kinetic.attach("job-1", cluster="train", context="kinetic-local")
    assert "selects the kubeconfig context 'gke_proj_us-central1-a_train', not " in str(
        refused.value
    )
    assert "pass only one of them" in str(refused.value)


def test_cluster_and_the_same_context_agree(contexts: Path) -> None:
    chosen = reference.context_for("kinetic.attach", "train", "gke_proj_us-central1-a_train")
    assert chosen == "gke_proj_us-central1-a_train"


# --------------------------------------------------------------------------- handles
# What the handles do with these arguments against a real API server is in
# tests/integration/test_reference_args_live.py; here, the decision alone.


@pytest.mark.parametrize(
    ("timeout", "cleanup_timeout", "waits"),
    [(None, None, 180), (None, 7, 7), (9, None, 9), (5, 5, 5), (0.5, None, 0.5)],
)
def test_cleanup_timeout_bounds_the_wait_for_the_deletion(
    timeout: float | None, cleanup_timeout: float | None, waits: float
) -> None:
    assert reference.cleanup_wait("JobHandle.cleanup", timeout, cleanup_timeout) == waits


def test_two_different_deletion_timeouts_are_refused() -> None:
    with pytest.raises(ValueError) as refused:
        JobHandle(job_id="train-1", namespace="team-a").cleanup(timeout=5, cleanup_timeout=6)
    assert str(refused.value) == (
        "JobHandle.cleanup(): timeout=5 and cleanup_timeout=6 both bound the wait for the "
        "deletion; pass one of them."
    )


@pytest.mark.parametrize("value", [print, True, "60"])
def test_a_deletion_timeout_that_is_not_seconds_is_refused_naming_the_order(value: Any) -> None:
    """A callback or a flag where the reference has cleanup_timeout: most likely this
    client's old positional order (on_status_change, stream_logs third)."""
    with pytest.raises(TypeError) as refused, pytest.warns(reference.ArgumentMoved) as moved:
        JobHandle(job_id="train-1", namespace="team-a").result(3600, True, value)
    [warning] = moved.list
    assert f"{value!r} is cleanup_timeout= (it was on_status_change= before" in str(warning.message)
    message = str(refused.value)
    assert message.startswith(f"JobHandle.result(): cleanup_timeout={value!r} is not a number")
    assert "timeout, cleanup, cleanup_timeout, cleanup_poll_interval, stream_logs, " in message
    assert "on_status_change for result()" in message


def test_cleanup_poll_interval_warns_once_naming_the_watch() -> None:
    """Warned before anything is asked of the cluster (a handle of no cluster here)."""
    handle = InputHandle(
        job_id="grp-1a2b3c4d-2", namespace="team-a", group_id="grp-1a2b3c4d", group_index=2
    )
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ValueError):
        warnings.simplefilter("always")
        handle.cancel(3, 2, timeout=4)  # two bounds: refused after the warning
    message = one_warning(caught)
    assert message.startswith("InputHandle.cancel(): cleanup_poll_interval= is accepted")
    assert "a deletion is followed with a watch, not polled" in message
    assert "cleanup_timeout= (or timeout=) bounds the wait" in message
