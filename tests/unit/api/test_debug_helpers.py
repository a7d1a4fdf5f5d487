"""What `debug_attach` prints and runs, and its refusals, without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import kinetic
import pytest
from kinetic.api.debug import (
    DebugAttachError,
    cleanup_port_forward,
    port_forward_argv,
    vscode_configuration,
)
from kinetic.api.jobs import JobHandle


def test_the_vscode_configuration_attaches_to_the_forwarded_port_with_identity_mappings(tmp_path):
    config = vscode_configuration(6001, str(tmp_path))
    assert config["request"] == "attach" and config["type"] == "debugpy"
    assert config["connect"] == {"host": "localhost", "port": 6001}
    assert config["pathMappings"] == [{"localRoot": str(tmp_path), "remoteRoot": str(tmp_path)}]
    assert vscode_configuration(5678)["pathMappings"][0]["localRoot"] == os.getcwd()


def test_the_forward_listens_on_loopback_in_the_handles_context():
    argv = port_forward_argv("kubectl", "p-1", "team", 6001, 5678, "prod")
    assert argv == [
        "kubectl", "port-forward", "--namespace", "team", "--address", "127.0.0.1",
        "--context", "prod", "pod/p-1", "6001:5678",
    ]  # fmt: skip
    assert "--context" not in port_forward_argv("kubectl", "p", "n", 1, 2, None)


def test_attaching_to_a_job_started_without_debug_is_refused_before_any_call():
    handle = JobHandle(job_id="plain", namespace="team")  # no cluster is reached
    with pytest.raises(DebugAttachError, match=r"debug=True"):
        handle.debug_attach()


def test_cleanup_port_forward_ends_the_process_and_may_be_called_twice():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cleanup_port_forward(proc)
    assert proc.poll() is not None
    cleanup_port_forward(proc)


def test_kinetic_debug_is_the_reference_import_path():
    assert kinetic.debug.cleanup_port_forward is cleanup_port_forward
    assert kinetic.debug.DEBUG_PORT == 5678


def test_a_debug_handle_round_trips_through_its_saved_form():
    handle = JobHandle(job_id="j", namespace="n", debug=True)
    assert JobHandle.from_dict(handle.to_dict()).debug is True
    assert JobHandle.from_resource(
        {"metadata": {"name": "j", "namespace": "n"}, "spec": {"debug": True, "function": {}}}
    ).debug


def test_the_reference_handles_other_fields_say_what_they_are_here():
    job = JobHandle(job_id="j", namespace="n", func_name="train", storage_root="gs://bkt/root")
    assert (job.backend, job.project, job.zone, job.cluster_name) == ("gke", None, None, None)
    assert (job.k8s_name, job.display_name, job.bucket_name) == ("j", "train", "bkt")
    assert JobHandle(job_id="g-3", namespace="n", group_id="g", group_index=3).k8s_name == "g"
    assert JobHandle(job_id="j", namespace="n", storage_root="file:///tmp/x").bucket_name is None


# --------------------------------------------------------------------------- a blocking debug call


def test_a_port_in_use_is_replaced_by_a_free_one():
    import socket

    from kinetic.api.debug import free_local_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        other = free_local_port(taken)
        assert other != taken and 0 < other < 65536
    assert free_local_port(other) == other  # free: kept


FAKE_KUBECTL = """#!/bin/sh
echo "Forwarding from 127.0.0.1:$LOCAL -> 5678"
echo "Handling connection for $LOCAL"
echo "Handling connection for $LOCAL"
exec sleep 60
"""


def test_the_forward_says_once_when_a_debugger_connects(tmp_path, monkeypatch):
    """A stand-in for kubectl prints what `kubectl port-forward` prints: the forward is
    returned once it forwards, and the first connection is told once."""
    from kinetic.api.debug import start_port_forward

    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LOCAL", "6001")
    connected: list[str] = []
    proc = start_port_forward("p-1", "team", 6001, on_connection=lambda: connected.append("x"))
    try:
        deadline = time.monotonic() + 10
        while not connected and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # the second connection line is read, and not told
        assert connected == ["x"]
        assert proc.poll() is None  # still forwarding
    finally:
        cleanup_port_forward(proc)


def test_the_attach_command_names_the_namespace_and_context():
    from kinetic.api.handle import debug_command

    assert debug_command(JobHandle(job_id="add-1", namespace="team")) == (
        "kinetic jobs debug add-1 -n team"
    )
    assert debug_command(JobHandle(job_id="add-1", namespace="team", context="prod")) == (
        "kinetic jobs debug add-1 -n team --context prod"
    )
