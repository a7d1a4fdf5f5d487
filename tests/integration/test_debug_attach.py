"""`@kinetic.run(debug=True)` and `JobHandle.debug_attach` on the real cluster.

The runner in the Pod (the project's runner image) starts debugpy and holds the
call; `debug_attach` forwards a local port with `kubectl port-forward`; the test
speaks the Debug Adapter Protocol through that forward (`dap_client`).
"""

from __future__ import annotations

import json
import socket
import subprocess

import kinetic
import pytest
from dap_client import DapClient
from kinetic.api.jobs import JobStatus
from kinetic.debug import DebugAttachError, cleanup_port_forward
from kube_helpers import Kube

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_debug_job_waits_for_a_debugger_attached_through_the_forward(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    @kinetic.run(namespace=ns, debug=True)
    def add(a: int, b: int) -> int:
        return a + b

    job = add.run_async(2, 3)
    assert job.debug is True and kinetic.attach(job.job_id, namespace=ns).debug is True
    port = _free_port()
    forward = job.debug_attach(local_port=port, timeout=300)
    try:
        shown = capsys.readouterr().out
        assert f'"port": {port}' in shown and '"request": "attach"' in shown
        with DapClient("127.0.0.1", port) as dap:
            reply = dap.initialize()
            assert reply["success"] is True and reply["command"] == "initialize"
            assert reply["body"]["supportsConfigurationDoneRequest"] is True
            # Attached but not yet configured: the call has not run.
            assert job.status() is JobStatus.RUNNING
            assert "debugger attached" not in job.tail(20)
            dap.attach_and_go()
            # A debug job's result keeps the job (cleanup=False by default).
            assert job.result(timeout=180) == 5
    finally:
        cleanup_port_forward(forward)
    assert forward.poll() is not None
    assert job.status() is JobStatus.SUCCEEDED
    job.cleanup(timeout=120)


def test_attaching_to_a_job_that_was_not_started_for_debugging_is_refused(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def one() -> int:
        return 1

    job = one.run_async()
    with pytest.raises(DebugAttachError, match="debug=True"):
        job.debug_attach()
    assert job.result(timeout=180) == 1


def test_debug_on_a_container_job_is_refused_at_admission_naming_the_field(
    kube: Kube, ns: str
) -> None:
    manifest = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "debug-container", "namespace": ns},
        "spec": {"container": {"image": "busybox", "command": ["true"]}, "debug": True},
    }
    refused = subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "spec.debug" in refused.stderr and "function jobs" in refused.stderr, refused.stderr
