"""The client's configuration when the operator's published settings cannot be read.

No operator (404) or no right to read them (403) is "no published settings": the
error says to pass a storage root or install the operator. An API server that fails
to answer (a 5xx while it restarts or sheds load) is not that, and says so: the
message names the status, and that trying again may do. The server here is a stand-in
that only answers with those statuses, a fault a healthy local cluster will not give
on demand.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kinetic.api.config import ConfigError, resolve
from kinetic_testing.kubeconfigs import kubeconfig


def _answering(status: int, reason: str) -> type[BaseHTTPRequestHandler]:
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            body = json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": reason,
                    "code": status,
                    "message": reason,
                }
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Answer


@pytest.fixture
def api_server(request: pytest.FixtureRequest) -> Iterator[str]:
    status, reason = request.param
    server = ThreadingHTTPServer(("127.0.0.1", 0), _answering(status, reason))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def pointed_at(api_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", api_server)
    monkeypatch.setenv("KUBECONFIG", str(path))
    for name in (
        "KUBERNETES_SERVICE_HOST",
        "KINETIC_CONTEXT",
        "KINETIC_CLUSTER",
        "KINETIC_STORAGE_ROOT",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("api_server", [(503, "ServiceUnavailable")], indirect=True)
def test_an_api_server_that_fails_to_answer_is_not_taken_for_no_operator(
    pointed_at: None,
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(namespace="team-a")
    message = str(caught.value)
    assert "Could not read the operator's settings" in message
    assert "kinetic-system/kinetic-config" in message and "503" in message
    assert "try again" in message and "storage_root=" in message
    assert "install the Kinetic operator" not in message


@pytest.mark.parametrize("api_server", [(404, "NotFound"), (403, "Forbidden")], indirect=True)
def test_no_operator_or_no_access_asks_for_a_storage_root(pointed_at: None) -> None:
    with pytest.raises(ConfigError, match="No storage root .* install the Kinetic operator"):
        resolve(namespace="team-a")


@pytest.mark.parametrize("api_server", [(503, "ServiceUnavailable")], indirect=True)
def test_a_storage_root_given_needs_no_published_settings(
    pointed_at: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_STORAGE_ROOT", "gs://bucket/kinetic")
    assert resolve(namespace="team-a").storage_root == "gs://bucket/kinetic"
