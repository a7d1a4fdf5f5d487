"""What `debug_attach` prints and runs, and its refusals, without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys

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
