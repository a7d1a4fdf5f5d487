"""`kinetic.debug`, where the reference API keeps its debugging helpers.

`JobHandle.debug_attach()` returns the ``kubectl port-forward`` process;
`cleanup_port_forward(proc)` ends it. `DEBUGPY_PORT` (the reference's name
for `DEBUG_PORT`, 5678) is the port debugpy listens on in the Pod, and
`wait_for_debug_server(handle)` waits until it does, returning the Pod's
name. The code is in `kinetic.api.debug`.
"""

from __future__ import annotations

from kinetic.api.debug import (
    DEBUG_PORT,
    DEBUGPY_PORT,
    DebugAttachError,
    cleanup_port_forward,
    print_attach_instructions,
    start_port_forward,
    vscode_configuration,
    wait_for_debug_server,
)

__all__ = [
    "DEBUGPY_PORT",
    "DEBUG_PORT",
    "DebugAttachError",
    "cleanup_port_forward",
    "print_attach_instructions",
    "start_port_forward",
    "vscode_configuration",
    "wait_for_debug_server",
]
