"""The reference API's arguments and names on the real cluster (issue 20, items 3 and 4).

``cluster=`` picks a kubeconfig context for real (the kubeconfig's current
context here points nowhere, so only the named one can work); a name that
selects nothing is refused before anything is uploaded; ``cleanup_timeout``
bounds real deletions; and code inside real Pods builds its own handle
(`JobHandle.from_job_context`) and imports `kinetic.job_status`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kinetic
import pytest
import yaml
from kinetic import storage
from kinetic.api.config import ConfigError, resolve
from kinetic.api.jobs import JobStatus
from kinetic.api.reference import IgnoredSetting
from kinetic.model import layout
from kinetic_testing.cluster import job_json, kubectl_in
from kinetic_testing.warned import moved
from kube_helpers import Kube, wait_for

pytestmark = pytest.mark.integration

TIMEOUT = 240


@pytest.fixture
def two_contexts(
    ns: str, client_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A kubeconfig whose current context points at a closed port, and a second context,
    named like a GKE one, for the real cluster: the name `cluster="train"` selects."""
    config = yaml.safe_load(Path(client_env["KUBECONFIG"]).read_text())
    real_ctx = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    real_cluster = next(
        c for c in config["clusters"] if c["name"] == real_ctx["context"]["cluster"]
    )
    broken = {**real_cluster["cluster"], "server": "https://10.244.0.1:1"}
    config["clusters"].append({"name": "nowhere", "cluster": broken})
    config["contexts"] = [
        {"name": "nowhere", "context": {**real_ctx["context"], "cluster": "nowhere"}},
        {"name": "gke_proj_europe-west4-a_train", "context": dict(real_ctx["context"])},
    ]
    config["current-context"] = "nowhere"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KINETIC_CONTEXT", raising=False)
    return "train"


def test_cluster_selects_the_context_for_run_attach_and_list(ns: str, two_contexts: str) -> None:
    @kinetic.run(namespace=ns, cluster=two_contexts)
    def double(x: int) -> int:
        return 2 * x

    job = double.run_async(21)
    assert job.context == "gke_proj_europe-west4-a_train"
    again = kinetic.attach(job.job_id, namespace=ns, cluster=two_contexts)
    assert again.result(timeout=TIMEOUT, cleanup=False) == 42
    assert [h.job_id for h in kinetic.list_jobs(namespace=ns, cluster=two_contexts)] == [job.job_id]

    batch = double.run_async_map([1, 2])
    same = kinetic.attach_batch(batch.group_id, namespace=ns, cluster=two_contexts)
    assert same.results(timeout=TIMEOUT) == [2, 4]
    job.cleanup(cleanup_timeout=120)
    assert job.status() is JobStatus.NOT_FOUND


def test_run_selects_the_context_at_submission_not_when_decorating(
    ns: str, two_contexts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module imported in a Pod decorates too, where the kubeconfig does not exist."""
    kubeconfig = os.environ["KUBECONFIG"]
    monkeypatch.setenv("KUBECONFIG", str(Path(kubeconfig).parent / "absent"))

    @kinetic.run(namespace=ns, cluster=two_contexts)
    def one() -> int:
        return 1

    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    job = one.run_async()
    assert job.context == "gke_proj_europe-west4-a_train"
    assert job.result(timeout=TIMEOUT) == 1


def reference_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """The reference arguments' warnings, each pointing at the caller's line."""
    said = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert all(w.filename == __file__ for w in said), [w.filename for w in said]
    return [str(w.message) for w in said]


def test_attach_warns_once_for_the_reference_arguments_it_ignores(ns: str) -> None:
    """Warned before the handle is looked for (here, for a job and a batch that are not there)."""
    with warnings.catch_warnings(record=True) as caught, pytest.raises(LookupError):
        warnings.simplefilter("always")
        kinetic.attach_batch(
            "grp-1a2b3c4d", namespace=ns, project="p", poll_interval=10.0, poll_timeout=60
        )
    (message,) = reference_warnings(caught)
    assert message.startswith("kinetic.attach_batch(): project=, poll_interval=, poll_timeout=")
    assert "poll_interval=10.0: a KineticBatch holds every input" in message
    assert "batch.wait(timeout=...)" in message

    with warnings.catch_warnings(record=True) as caught, pytest.raises(LookupError):
        warnings.simplefilter("always")
        kinetic.attach("job-1", namespace=ns, project="p", zone="z")
    (message,) = reference_warnings(caught)
    assert "kinetic.attach(): project=, zone= are accepted" in message

    with warnings.catch_warnings(record=True) as caught, pytest.raises(LookupError) as missing:
        warnings.simplefilter("always")
        kinetic.attach("job-1", namespace=ns)
    assert reference_warnings(caught) == []
    assert f"No KineticJob 'job-1' in namespace '{ns}'" in str(missing.value)


# --------------------------------------------------------------------------- old callers


@pytest.fixture
def default_ns(ns: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``ns`` as the client's default namespace: a namespace argument misread as one would
    show as another name in what the calls look in."""
    monkeypatch.setenv("KINETIC_NAMESPACE", ns)
    monkeypatch.delenv("KINETIC_CONTEXT", raising=False)
    monkeypatch.delenv("KINETIC_CLUSTER", raising=False)
    return ns


@pytest.mark.parametrize(
    ("call", "where", "kind"),
    [
        (lambda: kinetic.attach("job-1", "team-a"), "kinetic.attach", "KineticJob 'job-1'"),
        (
            lambda: kinetic.attach_batch("grp-1a2b3c4d", "team-a"),
            "kinetic.attach_batch",
            "KineticBatch 'grp-1a2b3c4d'",
        ),
    ],
    ids=["attach", "attach_batch"],
)
def test_a_namespace_passed_in_the_old_order_warns_and_is_not_looked_in(
    default_ns: str, call: Callable[[], Any], where: str, kind: str
) -> None:
    with warnings.catch_warnings(record=True) as caught, pytest.raises(LookupError) as missing:
        warnings.simplefilter("always")
        call()
    message = moved(caught, __file__)
    assert message.startswith(f"{where}(): positional arguments follow the reference API's order")
    assert "'team-a' is project= (it was namespace= before this release; pass namespace= by " in (
        message
    )
    # Looked for in the default namespace: never silently in 'team-a'.
    assert f"No {kind} in namespace '{default_ns}'" in str(missing.value)


def test_list_jobs_in_the_old_order_warns_and_lists_the_default_namespace(
    default_ns: str, kube: Kube
) -> None:
    applied = kubectl_in(kube, job_json("listed", default_ns), "apply")
    assert applied.returncode == 0, applied.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        listed = kinetic.list_jobs("team-a")
    assert "'team-a' is project= (it was namespace= before this release" in moved(caught, __file__)
    assert [h.job_id for h in listed] == ["listed"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        listed = kinetic.list_jobs(None, "ctx-a")
    assert "'ctx-a' is zone= (it was context= before this release" in moved(caught, __file__)
    assert [h.job_id for h in listed] == ["listed"]  # the current context, not one named ctx-a


def test_keyword_callers_and_unchanged_positions_are_not_warned(
    default_ns: str, kube: Kube
) -> None:
    applied = kubectl_in(kube, job_json("keyed", default_ns), "apply")
    assert applied.returncode == 0, applied.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kinetic.attach("keyed", namespace=default_ns).namespace == default_ns
        assert [h.job_id for h in kinetic.list_jobs(namespace=default_ns)] == ["keyed"]
        with pytest.raises(LookupError, match=f"in namespace '{default_ns}'"):
            kinetic.attach_batch("grp-1a2b3c4d", None, None, namespace=default_ns)
        fn = kinetic.run("cpu", "busybox:1")(lambda: 1)  # image, as before
    assert fn.options["image"] == "busybox:1"


def test_an_unknown_cluster_is_refused_before_anything_is_uploaded(
    ns: str, two_contexts: str
) -> None:
    @kinetic.run(namespace=ns, cluster="prod")
    def one() -> int:
        return 1

    with pytest.raises(ConfigError) as refused:
        one.run_async()
    assert "prod" in str(refused.value) and "gke_proj_europe-west4-a_train" in str(refused.value)
    root = resolve(namespace=ns, context="gke_proj_europe-west4-a_train").storage_root
    assert storage.list_prefix(layout.namespace_prefix(root, ns)) == []


def test_cleanup_timeout_bounds_real_deletions_and_the_poll_interval_warns(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def nap(seconds: float) -> str:
        import time

        time.sleep(seconds)
        return "woke"

    done = nap.run_async(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert done.result(timeout=TIMEOUT, cleanup_timeout=120, cleanup_poll_interval=2) == "woke"
    assert done.status() is JobStatus.NOT_FOUND  # deleted, and the deletion was waited for
    [warning] = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "cleanup_poll_interval=2" in str(warning.message)

    sleeping = nap.run_async(600)
    assert sleeping.cancel(cleanup_timeout=120) is JobStatus.CANCELLED
    assert sleeping.status() is JobStatus.NOT_FOUND  # deleted once stopped, as the reference

    # An input of a batch takes them in the same order: (cleanup_timeout, cleanup_poll_interval)
    # and (k8s, gcs, cleanup_timeout); it has no object of its own, so it stays CANCELLED.
    batch = nap.run_async_map([600])
    one = wait_for(lambda: batch.jobs[0], timeout=TIMEOUT, what="the input to be launched")
    with pytest.warns(DeprecationWarning, match="InputHandle.cancel\\(\\): cleanup_poll_interval="):
        assert one.cancel(120, 2) is JobStatus.CANCELLED
    one.cleanup(True, False, 60)
    assert one.status() is JobStatus.CANCELLED


def test_kinetic_cluster_selects_the_context_and_kinetic_project_warns(
    ns: str, two_contexts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference's variables: KINETIC_CLUSTER as cluster=, KINETIC_PROJECT warned about
    (the current context points nowhere, so only the selected one can work)."""
    monkeypatch.setenv("KINETIC_CLUSTER", two_contexts)
    monkeypatch.setenv("KINETIC_PROJECT", "my-gcp-project")

    @kinetic.run(namespace=ns)
    def triple(x: int) -> int:
        return 3 * x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # as Python shows them: once per place
        job = triple.run_async(2)
        assert job.context == "gke_proj_europe-west4-a_train"
        assert [h.job_id for h in kinetic.list_jobs(namespace=ns)] == [job.job_id]
        assert kinetic.attach(job.job_id, namespace=ns).result(timeout=TIMEOUT) == 6
    said = [str(w.message) for w in caught if issubclass(w.category, IgnoredSetting)]
    assert len(said) == 1 and said[0].startswith("KINETIC_PROJECT='my-gcp-project' is the ")


def test_code_in_the_pod_builds_its_own_handle_and_imports_job_status(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def whoami(_: Any = None) -> dict[str, Any]:
        from kinetic.api.jobs import JobHandle
        from kinetic.job_status import JobStatus as Status

        me = JobHandle.from_job_context()
        return {
            "job_id": me.job_id,
            "namespace": me.namespace,
            "group": [me.group_id, me.group_kind, me.group_index],
            "status_names": [s.value for s in Status],
        }

    job = whoami.run_async()
    mine = job.result(timeout=TIMEOUT)
    assert mine["job_id"] == job.job_id and mine["namespace"] == ns
    assert mine["group"] == [None, None, None]
    assert mine["status_names"] == [s.value for s in JobStatus]

    # In a batch whose Pods run two inputs each, each input's code gets its own handle,
    # as if it had a Pod of its own.
    batch = whoami.run_async_map([0, 1, 2], chunk_size=2)
    got = batch.results(timeout=TIMEOUT)
    assert [g["group"] for g in got] == [[batch.group_id, "map", i] for i in range(3)]
    assert [g["job_id"] for g in got] == [f"{batch.group_id}-{i}" for i in range(3)]
