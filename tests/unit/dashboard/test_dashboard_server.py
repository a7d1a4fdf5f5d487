"""The server's door, end to end in this process: real HTTP through aiohttp's test server.

No cluster is needed for what is tested here (the watches it starts fail quietly
and retry); the pages' data is tested against the local cluster in
tests/integration/test_dashboard.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from kinetic.dashboard import guard, server

TOKEN = "unit-token"


@pytest_asyncio.fixture
async def client(monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # no cluster: streams just retry
    sock = server.loopback_socket(0)
    port = sock.getsockname()[1]
    sock.close()
    settings = server.Settings(port=port, token=TOKEN, namespaces=("unit",))
    app = server.make_app(settings)
    test_server = TestServer(app, host="127.0.0.1", port=port)
    async with TestClient(test_server) as c:
        yield c


def host(c) -> dict[str, str]:
    return {"Host": f"127.0.0.1:{c.port}"}


@pytest.mark.asyncio
async def test_no_token_no_cookie_is_403_with_the_security_headers(client):
    got = await client.get("/", headers=host(client))
    assert got.status == 403
    assert "no token" in await got.text()
    for name, value in guard.SECURITY_HEADERS.items():
        assert got.headers[name] == value


@pytest.mark.asyncio
async def test_the_token_becomes_an_http_only_same_site_cookie_and_leaves_the_url(client):
    got = await client.get(
        f"/batches/ns/grp-1?token={TOKEN}", headers=host(client), allow_redirects=False
    )
    assert got.status == 303 and got.headers["Location"] == "/batches/ns/grp-1"
    cookie = got.headers["Set-Cookie"]
    assert cookie.startswith(f"{guard.cookie_name(client.port)}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age" not in cookie
    page = await client.get(
        "/batches/ns/grp-1",
        headers=host(client) | {"Cookie": f"{guard.cookie_name(client.port)}={TOKEN}"},
    )
    assert page.status == 200 and "/static/app.js" in await page.text()
    assert page.headers["Content-Security-Policy"] == guard.CONTENT_SECURITY_POLICY


def with_cookie(c) -> dict[str, str]:
    return host(c) | {"Cookie": f"{guard.cookie_name(c.port)}={TOKEN}"}


@pytest.mark.asyncio
async def test_another_host_name_is_refused_even_with_the_cookie(client):
    got = await client.get("/", headers=with_cookie(client) | {"Host": f"evil.test:{client.port}"})
    assert got.status == 403 and "DNS rebinding" in await got.text()


@pytest.mark.asyncio
async def test_an_action_needs_the_pages_own_origin(client):
    body = {"action": "cancel-batch", "namespace": "ns", "name": "grp-1"}
    got = await client.post("/api/actions", json=body, headers=with_cookie(client))
    assert got.status == 403 and "without an Origin" in await got.text()
    got = await client.post(
        "/api/actions", json=body, headers=with_cookie(client) | {"Origin": "http://evil.test"}
    )
    assert got.status == 403


@pytest.mark.asyncio
async def test_bad_requests_say_what_is_wrong(client):
    got = await client.get("/api/batches/ns/grp-1/inputs?size=9999", headers=with_cookie(client))
    assert got.status == 400 and "size=9999" in (await got.json())["error"]
    got = await client.get("/api/nothing", headers=with_cookie(client))
    assert got.status == 404 and "no such API path" in (await got.json())["error"]
    origin = {"Origin": f"http://127.0.0.1:{client.port}"}
    got = await client.post(
        "/api/actions", json={"action": "explode"}, headers=with_cookie(client) | origin
    )
    assert got.status == 400 and "action='explode'" in (await got.json())["error"]
    got = await client.post(
        "/api/jobs/ns/j/value", json={"unpickle": False}, headers=with_cookie(client) | origin
    )
    assert got.status == 400 and "runs code" in (await got.json())["error"]


@pytest.mark.asyncio
async def test_only_the_packages_own_files_are_served(client):
    ok = await client.get("/static/app.js", headers=with_cookie(client))
    assert ok.status == 200 and ok.content_type == "text/javascript"
    for path in ("/static/..%2F__init__.py", "/static/.hidden", "/static/nothing.js"):
        got = await client.get(path, headers=with_cookie(client))
        assert got.status == 404, path


def test_without_the_extra_the_command_says_how_to_install_it():
    code = (
        "import sys; sys.modules['aiohttp'] = None\n"
        "from kinetic.cli.main import app\n"
        "app(['dashboard', '--no-open', '--port', '0'], prog_name='kinetic')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip install 'kinetic[dashboard]'" in " ".join(done.stderr.split())
