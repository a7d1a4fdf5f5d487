"""`kinetic dashboard`: start the local web dashboard and print (and open) its URL.

The server is the optional extra ``kinetic[dashboard]``; without it the command
says how to install it rather than failing on an import.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from kinetic.cli.jobs import CONTEXT
from kinetic.cli.output import console, fail

NAMESPACES = typer.Option(
    [],
    "--namespace",
    "-n",
    help="Namespace to show (repeat for several; default: the context's). More can be "
    "added from the page.",
)
MISSING = (
    "the dashboard is an optional part of the client: pip install 'kinetic[dashboard]' "
    "(in this repository, `make venv` installs it)"
)


def dashboard(
    port: int = typer.Option(
        8765, "--port", "-p", help="Port on 127.0.0.1 to listen on (0: any free port)."
    ),
    namespace: list[str] = NAMESPACES,
    all_namespaces: bool = typer.Option(
        False, "--all-namespaces", "-A", help="Show every namespace (needs cluster-wide list)."
    ),
    context: str | None = CONTEXT,
    open_browser: bool = typer.Option(
        True, "--open/--no-open", help="Open the URL in a browser, where one is available."
    ),
) -> None:
    """A live web view of jobs and batches, on this machine only, acting with your
    kubeconfig: follow a batch, read a failure's traceback and log, cancel or rerun."""
    if not 0 <= port <= 65535:
        raise fail(f"--port {port}: choose a port from 1 to 65535, or 0 for any free one")
    try:
        from kinetic.dashboard import guard, server
    except ModuleNotFoundError as e:
        if e.name not in ("aiohttp", "multidict", "yarl"):
            raise
        raise fail(escape(f"kinetic dashboard: {MISSING}")) from None
    try:
        sock = server.loopback_socket(port)
    except OSError as e:
        raise fail(
            f"cannot listen on 127.0.0.1:{port} ({e.strerror}): choose another --port"
        ) from None
    chosen = sock.getsockname()[1]
    token = guard.new_token()
    settings = server.Settings(
        port=chosen,
        token=token,
        context=context,
        namespaces=tuple(namespace),
        all_namespaces=all_namespaces,
    )
    url = guard.first_url(chosen, token)
    console.print(f"Kinetic dashboard on this machine only: {url}", soft_wrap=True)
    console.print("Anyone with this URL acts as you in the cluster. Ctrl-C stops it.", style="dim")
    if open_browser:
        _open(url)
    server.serve(settings, sock)


def _open(url: str) -> None:
    """Open ``url`` in a browser when this machine has one (a terminal over ssh has none)."""
    import webbrowser

    try:
        webbrowser.get()
    except webbrowser.Error:
        return
    webbrowser.open(url, new=2)
