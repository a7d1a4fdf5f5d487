"""The kubelet's log endpoint, so `kubectl logs [--tail N] [-f]` works through the API server.

The API server proxies ``pods/log`` to ``https://<node InternalIP>:<kubeletEndpoint
port>/containerLogs/<ns>/<pod>/<container>`` presenting its kubelet client
certificate; we require a client certificate signed by the cluster CA.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

log = logging.getLogger("kinetic.node.logs")

# (namespace, pod, container) -> (log file, is-the-container-still-running)
Resolver = Callable[[str, str, str], "tuple[Path, Callable[[], bool]] | None"]


def tail_bytes(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data`` (a trailing newline does not count as a line)."""
    if lines <= 0:
        return b""
    end = len(data)
    body = data[:-1] if data.endswith(b"\n") else data
    idx = len(body)
    for _ in range(lines):
        idx = body.rfind(b"\n", 0, idx)
        if idx == -1:
            return data
    return data[idx + 1 : end]


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last ``lines`` lines start (reads backwards in blocks)."""
    size = path.stat().st_size
    if lines < 0:
        return 0
    block = 64 * 1024
    pos = size
    buf = b""
    with open(path, "rb") as f:
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            body = buf[:-1] if buf.endswith(b"\n") and pos + len(buf) == size else buf
            if body.count(b"\n") >= lines:
                break
    tail = tail_bytes(buf, lines)
    return size - len(tail)


class _Handler(BaseHTTPRequestHandler):
    server: LogServer
    protocol_version = "HTTP/1.0"  # body ends at close: simplest streaming for follow

    def log_message(self, fmt: str, *args: object) -> None:  # route to our logger
        log.debug("%s %s", self.address_string(), fmt % args)

    def do_GET(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        if parts[:1] == ["healthz"]:
            ok = self.server.healthy()
            self._text(200 if ok else 503, "ok" if ok else "starting")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._text(404, f"not supported by the kinetic process node: {url.path}")
            return
        _, ns, pod, container = parts
        q = urllib.parse.parse_qs(url.query)
        if q.get("previous", ["false"])[0] == "true":
            self._text(
                400,
                "logs of a previous container instance are not kept by the kinetic process node",
            )
            return
        found = self.server.resolver(ns, pod, container)
        if found is None:
            self._text(404, f"container {container!r} in pod {ns}/{pod} not found on this node")
            return
        path, running = found
        follow = q.get("follow", ["false"])[0] == "true"
        tail = int(q["tailLines"][0]) if "tailLines" in q else -1
        limit = int(q["limitBytes"][0]) if "limitBytes" in q else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            self._stream(path, running, follow, tail, limit)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    def _stream(
        self, path: Path, running: Callable[[], bool], follow: bool, tail: int, limit: int | None
    ) -> None:
        # Wait briefly for the file: kubectl may ask the instant the container starts.
        for _ in range(50):
            if path.exists():
                break
            time.sleep(0.1)
        if not path.exists():
            return
        sent = 0
        with open(path, "rb") as f:
            f.seek(tail_offset(path, tail) if tail >= 0 else 0)
            while True:
                chunk = f.read(64 * 1024)
                if chunk:
                    if limit is not None:
                        chunk = chunk[: max(0, limit - sent)]
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent += len(chunk)
                    if limit is not None and sent >= limit:
                        return
                    continue
                if not follow:
                    return
                if not running():
                    # one last read for output written just before exit
                    rest = f.read()
                    if rest:
                        if limit is not None:
                            rest = rest[: max(0, limit - sent)]
                        self.wfile.write(rest)
                        self.wfile.flush()
                    return
                time.sleep(0.2)

    def _text(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LogServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        port: int,
        cert: str,
        key: str,
        client_ca: str | None,
        resolver: Resolver,
        healthy: Callable[[], bool] = lambda: True,
    ):
        super().__init__(("127.0.0.1", port), _Handler)
        self.resolver = resolver
        self.healthy = healthy
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        if client_ca:
            ctx.load_verify_locations(client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED  # only the API server (cert from our CA) may ask
        # Handshake lazily in the handler thread, so one slow client cannot block accept().
        self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("log request from %s failed", client_address, exc_info=True)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="log-server", daemon=True)
        t.start()
        return t
