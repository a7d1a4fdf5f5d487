"""`KubeClient`, the one object handles ask the API server through, as a caller sees it.

What it asks of a real API server is tested on the local cluster (every
integration test that reads a handle, and the dashboard's, which gives all its
handles one client). Here: what needs no server. Making a client reads
nothing; a call without a kubeconfig says how to fix it; each kubeconfig file
gets its own connection; a handle never saves its client; and a client of
one context is refused where another context is named.
"""

from __future__ import annotations

import copy
import pickle
import re
from pathlib import Path

import kinetic
import pytest
import urllib3
from kinetic.api.batches import BatchHandle
from kinetic.api.handle import JobHandle
from kinetic.api.inputs import InputHandle
from kinetic.api.kube import ClusterUnreachable, KubeClient, kubelet_lost_log, transient
from kinetic_testing.kubeconfigs import kubeconfig
from kubernetes.client import ApiException

NS = "team-a"


@pytest.fixture
def no_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside any Pod: the kubeconfig is what the client reads."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KINETIC_CONTEXT", raising=False)
    monkeypatch.delenv("KINETIC_CLUSTER", raising=False)


def test_making_a_client_reads_nothing_and_a_call_without_a_kubeconfig_says_what_to_do(
    no_pod: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    kube = KubeClient("prod")  # nothing is read yet
    assert repr(kube) == "KubeClient(context='prod')"
    with pytest.raises(ClusterUnreachable) as refused:
        kube.get("kineticjobs", NS, "train")
    message = str(refused.value)
    assert message.startswith(f"No usable kubeconfig ({missing}): ")
    assert "Point KUBECONFIG at your cluster" in message and "kinetic local up" in message


def test_each_kubeconfig_file_gets_its_own_connection_and_one_file_shares_one(
    no_pod: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KUBECONFIG is read at the call, not once per process: a process (a test, a
    notebook) that points it elsewhere reaches the other cluster."""
    first = kubeconfig(tmp_path / "first", "https://127.0.0.1:1")
    second = kubeconfig(tmp_path / "second", "https://127.0.0.1:2")
    monkeypatch.setenv("KUBECONFIG", str(first))
    assert KubeClient().api.configuration.host == "https://127.0.0.1:1"
    assert KubeClient("here").api is KubeClient("here").api  # one connection per context
    monkeypatch.setenv("KUBECONFIG", str(second))
    assert KubeClient().api.configuration.host == "https://127.0.0.1:2"


def test_a_client_is_how_to_ask_never_what_a_handle_saves() -> None:
    kube = KubeClient("prod")
    job = JobHandle(job_id="train-1", namespace=NS, kube=kube)
    assert job.context == "prod" and job.kube is kube  # it talks through the client's context
    saved = job.to_dict()
    assert "kube" not in saved and saved["context"] == "prod"
    again = JobHandle.from_dict(saved | {"kube": "from a file"})  # not taken from a dict
    assert again.kube is None and again.context == "prod"
    for copied in (pickle.loads(pickle.dumps(job)), copy.deepcopy(job)):
        assert copied.to_dict() == saved
        assert copied.kube is not None and copied.kube.context == "prod"


def test_a_batchs_inputs_ask_through_the_batchs_client() -> None:
    kube = KubeClient("prod")
    batch = BatchHandle(
        group_id="grp-1a2b3c4d",
        namespace=NS,
        name=None,
        tags={},
        total=4,
        storage_root="file:///tmp/kinetic",
        kube=kube,
    )
    child = batch.child(3)
    assert isinstance(child, InputHandle) and child.kube is kube and child.context == "prod"
    assert "kube" not in child.to_dict()


def test_a_client_of_another_context_is_refused_naming_both(no_pod: None) -> None:
    said = (
        "context='dev' and kube=KubeClient(context='prod') name two kubeconfig contexts; "
        "pass one of them"
    )
    with pytest.raises(ValueError, match=re.escape(said)):
        JobHandle(job_id="train-1", namespace=NS, context="dev", kube=KubeClient("prod"))
    # Refused before anything is read: no kubeconfig is needed to be told.
    with pytest.raises(ValueError, match=re.escape(said)):
        kinetic.attach("train-1", namespace=NS, context="dev", kube=KubeClient("prod"))
    with pytest.raises(ValueError, match=re.escape(said)):
        kinetic.attach_batch("grp-1a2b3c4d", namespace=NS, context="dev", kube=KubeClient("prod"))


@pytest.mark.parametrize(
    ("text", "lost"),
    [
        (
            "unable to retrieve container logs for containerd://a3c23eb52b35f055bac6663fb5a51\n",
            True,
        ),
        ("unable to retrieve container logs for docker://0f3e", True),
        ("", False),
        ("epoch 1 loss 0.3\n", False),
        # A user's own line that quotes the kubelet is still the user's log.
        ("retrying: unable to retrieve container logs for containerd://ab\nok\n", False),
        ("unable to retrieve container logs for my-pod", False),
    ],
)
def test_the_kubelet_word_for_a_removed_container_is_not_taken_for_its_log(
    text: str, lost: bool
) -> None:
    assert kubelet_lost_log(text) is lost


# ----------------------------------------------------------------- a watch that breaks off


@pytest.mark.parametrize(
    ("error", "again"),
    [
        (ConnectionResetError("connection reset by peer"), True),
        (urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead"), True),
        (ApiException(status=503, reason="Service Unavailable"), True),
        (ApiException(status=429, reason="Too Many Requests"), True),
        (ApiException(status=403, reason="Forbidden"), False),
        (ApiException(status=422, reason="Unprocessable Entity"), False),
        (TimeoutError("KineticJob team-a/x did not finish in 5 s"), False),
        (ValueError("not a fault of the connection"), False),
    ],
)
def test_only_faults_of_the_connection_or_a_briefly_unable_server_are_tried_again(
    error: BaseException, again: bool
) -> None:
    assert transient(error) is again


class Unreachable(KubeClient):
    """A client whose every read fails as the API server's would: a fault the local
    cluster does not produce on demand (the watch that breaks off once is tested there,
    tests/integration/test_client_jobs.py)."""

    WATCH_RETRY_SECONDS = 1.5

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error
        self.reads = 0

    def read_now(self, plural: str, namespace: str, name: str) -> tuple[dict | None, str]:
        self.reads += 1
        raise self.error


def test_a_watch_failing_for_good_raises_its_fault_after_the_retry_bound() -> None:
    kube = Unreachable(ConnectionRefusedError("connection refused"))
    with pytest.raises(ConnectionRefusedError):
        next(iter(kube.watch_one("kineticjobs", NS, "x", timeout=None)))
    assert kube.reads >= 2  # tried again before giving up


def test_a_refusal_is_raised_at_once_not_tried_again() -> None:
    kube = Unreachable(ApiException(status=403, reason="Forbidden"))
    with pytest.raises(ApiException):
        next(iter(kube.watch_one("kineticjobs", NS, "x", timeout=None)))
    assert kube.reads == 1
