"""`kinetic.debug`, where the reference API keeps its debugging helpers.

`JobHandle.debug_attach()` returns the ``kubectl port-forward`` process;
`cleanup_port_forward(proc)` ends it. The code is in `kinetic.api.debug`.
"""

from __future__ import annotations

from kinetic.api.debug import (
    DEBUG_PORT,
    DebugAttachError,
    cleanup_port_forward,
    print_attach_instructions,
    start_port_forward,
    vscode_configuration,
)

__all__ = [
    "DEBUG_PORT",
    "DebugAttachError",
    "cleanup_port_forward",
    "print_attach_instructions",
    "start_port_forward",
    "vscode_configuration",
]
