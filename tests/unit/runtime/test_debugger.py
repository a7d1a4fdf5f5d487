"""The runner's debug mode: debugpy on loopback, holding the call until a debugger attaches.

The waiting process is a subprocess (debugpy traces the process it runs in), and
the client is `dap_client`, which speaks the Debug Adapter Protocol itself.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from dap_client import DapClient
from kinetic.model.names import DEBUG_READY_LINE, ENV_DEBUG_PORT
from kinetic.runtime.debugger import debug_port


@pytest.mark.parametrize(
    "value, port, problem",
    [
        (None, None, None),
        ("", None, None),
        ("5678", 5678, None),
        (" 6000 ", 6000, None),
        ("0", None, "KINETIC_DEBUG_PORT must be a port number (1-65535); got '0'"),
        ("70000", None, "KINETIC_DEBUG_PORT must be a port number (1-65535); got '70000'"),
        ("x", None, "KINETIC_DEBUG_PORT must be a port number (1-65535); got 'x'"),
    ],
)
def test_debug_port_from_the_environment(value, port, problem):
    environ = {} if value is None else {ENV_DEBUG_PORT: value}
    assert debug_port(environ) == (port, problem)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WAITER = """
import sys, time
from kinetic.runtime.debugger import wait_for_debugger
problem = wait_for_debugger(int(sys.argv[1]), lambda m: print(m, flush=True))
print("RAN" if problem is None else problem, flush=True)
"""


def test_the_call_waits_until_a_debugger_attaches_over_dap():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert DEBUG_READY_LINE in ready and f"127.0.0.1:{port}" in ready
        with DapClient("127.0.0.1", port) as dap:
            reply = dap.initialize()
            assert reply["success"] is True and reply["command"] == "initialize"
            assert reply["body"]["supportsConfigurationDoneRequest"] is True
            time.sleep(0.5)
            assert proc.poll() is None, "it went on before the debugger had attached"
            dap.attach_and_go()
            assert proc.stdout.readline().startswith("debugger attached")
            assert proc.stdout.readline().strip() == "RAN"
    finally:
        proc.kill()
        proc.wait()


def test_only_loopback_listens():
    """Whoever reaches debugpy runs code as the job: nothing but the Pod itself may."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and DEBUG_READY_LINE in proc.stdout.readline()
        out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        listeners = [
            line.split()[3] for line in out.splitlines() if line.split()[3].endswith(f":{port}")
        ]
        assert listeners == [f"127.0.0.1:{port}"], listeners
    finally:
        proc.kill()
        proc.wait()
