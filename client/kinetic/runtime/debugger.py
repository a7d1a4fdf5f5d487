"""A debug job's wait for its debugger: debugpy on the Pod's loopback, before any call.

`@kinetic.run(debug=True)` sets ``KINETIC_DEBUG_PORT`` on the Pod. The runner
then starts debugpy there and holds the function until a client attaches, so
breakpoints set in the editor are in place before the first line runs.

Why loopback only: whoever can reach debugpy runs code as the job.
``kubectl port-forward`` (what `JobHandle.debug_attach` starts) connects from
inside the Pod's network namespace, so it needs no wider listener, and nothing
else on the cluster network can attach.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kinetic.model.names import DEBUG_READY_LINE, ENV_DEBUG_PORT

__all__ = ["debug_port", "wait_for_debugger"]


def debug_port(environ: Mapping[str, str]) -> tuple[int | None, str | None]:
    """The port to listen on (None when not a debug job), or the problem with the value."""
    text = environ.get(ENV_DEBUG_PORT, "").strip()
    if not text:
        return None, None
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        return None, f"{ENV_DEBUG_PORT} must be a port number (1-65535); got {text!r}"
    return int(text), None


def wait_for_debugger(port: int, log: Callable[[str], None]) -> str | None:
    """Listen on 127.0.0.1:`port` and block until a debugger attaches.

    Returns None once attached, or why debugging cannot start (the image has no
    debugpy, or the port is taken) for the runner to report as a setup failure.
    """
    try:
        import debugpy  # the runner image installs it (the client's "debug" extra)
    except ImportError:
        return (
            "debug=True needs debugpy in the job's image: use the kinetic runner image, or add "
            "`pip install debugpy` to your own image (or run without debug=True)"
        )
    try:
        debugpy.listen(("127.0.0.1", port))
    except (OSError, RuntimeError) as e:
        return f"debugpy could not listen on 127.0.0.1:{port}: {e}"
    log(f"{DEBUG_READY_LINE} (127.0.0.1:{port})")
    debugpy.wait_for_client()
    log("debugger attached; running the function")
    return None
