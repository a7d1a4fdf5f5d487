"""Reads of pod-written objects never hold more than their bound, however large the object.

``file://`` is real storage here; for ``gs://`` the lean backend talks to a
real HTTP server on localhost that streams a 2 GB body, so the bound is
proved on the wire, not assumed of a fake.
"""

from __future__ import annotations

import http.server
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kinetic import storage
from kinetic.storage.gcs_http import Anonymous, LeanGcs
from kinetic_operator.bounded_read import TooLarge, read_at_most

GB2 = 2 << 30
LIMIT = 64 * 1024
MB = 1 << 20


def peak_growth(call: Callable[[], object]) -> int:
    """Bytes the Python heap grew to at most while ``call`` ran (its error swallowed)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        try:
            call()
        except Exception:  # noqa: BLE001 — the refusal is what the caller expects
            pass
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def sparse(path: Path, size: int) -> str:
    with open(path, "wb") as f:
        f.truncate(size)
    return f"file://{path}"


def test_a_2gb_file_is_refused_by_its_size_without_being_read(tmp_path: Path) -> None:
    uri = sparse(tmp_path / "report.json", GB2)
    with pytest.raises(TooLarge) as err:
        read_at_most(uri, LIMIT)
    assert uri in str(err.value) and "2,147,483,648 bytes" in str(err.value)
    assert "65,536" in str(err.value)
    assert peak_growth(lambda: read_at_most(uri, LIMIT)) < MB


def test_what_fits_is_read_whole(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/small.json"
    storage.write_bytes(uri, b"x" * LIMIT)
    assert read_at_most(uri, LIMIT) == b"x" * LIMIT
    with pytest.raises(TooLarge):
        read_at_most(uri, LIMIT - 1)


def test_a_device_or_a_folder_is_no_object(tmp_path: Path) -> None:
    with pytest.raises(TooLarge, match="not a regular file"):
        read_at_most("file:///dev/zero", LIMIT)
    with pytest.raises(storage.NotFound):
        read_at_most(f"file://{tmp_path}/absent.json", LIMIT)
    with pytest.raises(storage.NotFound):
        read_at_most(f"file://{tmp_path}", LIMIT)


# --------------------------------------------------------------------------- gs://, lean


class _Huge(http.server.BaseHTTPRequestHandler):
    """Answers every download with a body of ``size`` zero bytes, streamed."""

    size = GB2
    sent: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 — http.server's name
        if "alt=media" not in self.path:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(self.size))
        self.send_header("x-goog-generation", "1")
        self.end_headers()
        chunk, sent = b"\0" * (1 << 16), 0
        try:
            while sent < self.size:
                piece = chunk[: self.size - sent]
                self.wfile.write(piece)
                sent += len(piece)
        except OSError:
            pass  # the reader hung up once it had enough
        finally:
            _Huge.sent.append(sent)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def huge_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_2gb_gcs_object_costs_the_lean_backend_its_bound_only(huge_server: str) -> None:
    lean = LeanGcs(huge_server, Anonymous())
    uri = "gs://bucket/namespaces/a/batches/g/u/reports/p.json"
    parsed = storage._parse(uri)
    with pytest.raises(TooLarge) as err:
        lean.read_at_most(parsed, uri, LIMIT)
    assert "2,147,483,648 bytes" in str(err.value) and uri in str(err.value)
    assert peak_growth(lambda: lean.read_at_most(parsed, uri, LIMIT)) < 4 * MB
    # The next call on the same thread gets a fresh connection, not the unread rest.
    _Huge.size = 10
    try:
        assert lean.read_at_most(parsed, uri, LIMIT) == b"\0" * 10
    finally:
        _Huge.size = GB2
