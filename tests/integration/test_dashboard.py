"""`kinetic dashboard` in a real browser (Debian's headless Chromium) on the local cluster.

The command runs as a user runs it (a subprocess printing its URL); the page is
driven through chromedriver. What is asserted is what a person sees: rows and
bars that move without a reload, a failure's traceback and log, a cancel that
reaches the batch's spec, the API server's own refusal, and a door shut to
requests without the token. Set KINETIC_DASHBOARD_SCREENSHOTS to a folder to
keep the screenshots (the README's come from there: docs/images).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic_testing.cluster import KINETIC, service_account_kubeconfig
from kube_helpers import Kube, wait_for

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TIMEOUT = 180
# --------------------------------------------------------------------------- the server


@dataclass
class Dashboard:
    url: str  # the first URL, with its token
    port: int
    proc: subprocess.Popen[str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def dashboard(env: dict[str, str], *args: str) -> Iterator[Dashboard]:
    """`kinetic dashboard --port 0 --no-open ARGS` until the block ends."""
    proc = subprocess.Popen(
        [KINETIC, "dashboard", "--port", "0", "--no-open", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")))  # type: ignore[union-attr]
    reader.daemon = True
    reader.start()
    try:
        url = wait_for(
            lambda: next((w for line in lines for w in line.split() if "token=" in w), None),
            30,
            what=f"the dashboard to print its URL (it printed: {lines})",
        )
        assert isinstance(url, str) and url.startswith("http://127.0.0.1:")
        port = int(url.split(":")[2].split("/")[0])
        yield Dashboard(url, port, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


# --------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium with a fresh profile, driven by Debian's chromedriver."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        message = (
            "no Chromium: apt-get install chromium chromium-driver (scripts/install-prereqs.sh)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="kinetic-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1300,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shot(driver: Any, name: str) -> None:
    """Keep a screenshot of the page as it is now (for the README) when asked to."""
    folder = os.environ.get("KINETIC_DASHBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"dashboard-{name}.png"))


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def open_page(driver: Any, dash: Dashboard, path: str) -> None:
    """Go to ``path`` through the first URL (the token becomes this browser's cookie)."""
    driver.get(dash.url)
    driver.get(dash.base + path)


def no_reload_marker(driver: Any) -> None:
    driver.execute_script("window.__sameDocument = true;")


def same_document(driver: Any) -> bool:
    return bool(driver.execute_script("return window.__sameDocument === true;"))


# --------------------------------------------------------------------------- the tests


def container_batch(kube: Kube, ns: str, name: str, command: str, items: int, at_once: int) -> None:
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticBatch",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "container": {"image": "busybox:1.36", "command": ["sh", "-c", command]}
                },
                "inputs": {"items": list(range(items))},
                "maxConcurrent": at_once,
            },
        },
    )


def test_a_running_batch_row_and_its_bar_advance_without_a_reload(
    browser: Any, kube: Kube, namespace: str, client_env: dict[str, str]
) -> None:
    total = 8
    with dashboard(client_env, "-n", namespace) as dash:
        open_page(browser, dash, "/")
        no_reload_marker(browser)
        container_batch(kube, namespace, "sweep", "sleep 2", total, 2)
        bar = '#objects tr[data-name="sweep"] [role=progressbar]'

        def ended() -> int:
            value = browser.execute_script(
                "const b = document.querySelector(arguments[0]);"
                "return b ? Number(b.getAttribute('aria-valuenow')) : -1;",
                bar,
            )
            return int(value)

        wait_for(lambda: ended() >= 0, 60, 0.2, "the new batch's row to appear")
        seen = {ended()}
        wait_for(lambda: 0 < ended() < total, TIMEOUT, 0.2, "the bar to move part way")
        seen.add(ended())
        shot(browser, "list")
        wait_for(lambda: ended() == total, TIMEOUT, 0.2, "the bar to reach the end")
        seen.add(ended())
        assert len(seen) >= 3, seen  # it moved in steps, on the page as it was
        assert same_document(browser)
        wait_for(lambda: "SUCCEEDED" in text_of(browser, '#objects tr[data-name="sweep"]'), 30)

        open_page(browser, dash, f"/batches/{namespace}/sweep")
        wait_for(lambda: "8\ntotal" in text_of(browser, "#counts"), 30, what="the batch page")
        assert text_of(browser, '[data-count="succeeded"] b') == str(total)
        rows = wait_for(lambda: text_of(browser, "#inputs tbody"), 30)
        assert str(rows).count("SUCCEEDED") == total


# A user's module, as the user wrote it: what it prints and raises is markup, to be shown as text.
SWEEP = """
def shout(word):
    print(f"<b>shouting</b> {word}", flush=True)
    if word == "bad":
        raise ValueError("bad word <img src=x onerror=alert(1)>")
    return word.upper()
"""


def users_function(source: str, name: str, filename: str) -> Any:
    """Function ``name`` of a module ``filename`` holding ``source`` (its traceback names that
    file, as a user's own would, rather than this test's)."""
    scope: dict[str, Any] = {"__name__": filename.removesuffix(".py")}
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


def test_a_failed_input_shows_its_traceback_and_log_as_text(
    browser: Any, namespace: str, client_env: dict[str, str]
) -> None:
    from selenium.webdriver.common.by import By

    shout = kinetic.run(namespace=namespace)(users_function(SWEEP, "shout", "sweep.py"))
    batch = shout.run_async_map(["good", "bad"], max_concurrent=None)
    batch.wait(timeout=TIMEOUT)
    with dashboard(client_env, "-n", namespace) as dash:
        open_page(browser, dash, f"/batches/{namespace}/{batch.group_id}")
        wait_for(lambda: "bad word" in text_of(browser, "#failures"), 60, what="the failures")
        assert "ValueError" in text_of(browser, '#failures [data-index="1"] pre')
        shot(browser, "batch-failed")

        open_page(browser, dash, f"/batches/{namespace}/{batch.group_id}/inputs/1")
        wait_for(lambda: "in shout" in text_of(browser, "#traceback"), 60, what="the traceback")
        traceback = text_of(browser, "#traceback")
        assert "ValueError: bad word <img src=x onerror=alert(1)>" in traceback
        assert 'File "sweep.py", line 5, in shout' in traceback
        wait_for(lambda: "<b>shouting</b> bad" in text_of(browser, "#log"), 60, what="the log")
        assert "failure" in text_of(browser, "#attempts")
        # What the Pod wrote is text on the page: no element was made from it.
        assert (
            browser.execute_script("return document.querySelectorAll('main img, #log b').length")
            == 0
        )
        assert len(text_of(browser, "#result-sha")) == 64  # the digest the status vouches for
        size = text_of(browser, "#result-size")
        assert size.endswith((" B", " KiB")) and float(size.split()[0]) > 0, size
        shot(browser, "input-failed")

        # The value (here the exception) is loaded only on an explicit, confirmed click.
        assert text_of(browser, "#value") == ""
        browser.find_element(By.ID, "load-value").click()
        wait_for(lambda: "runs code" in text_of(browser, "#confirm-text"), 30)
        browser.find_element(By.ID, "confirm-yes").click()
        wait_for(lambda: "ValueError('bad word" in text_of(browser, "#value"), 60, what="the value")


def test_cancel_from_the_page_sets_the_batchs_cancel_field(
    browser: Any, kube: Kube, namespace: str, client_env: dict[str, str]
) -> None:
    from selenium.webdriver.common.by import By

    container_batch(kube, namespace, "long", "sleep 300", 3, 3)
    with dashboard(client_env, "-n", namespace) as dash:
        open_page(browser, dash, f"/batches/{namespace}/long")
        wait_for(lambda: "RUNNING" in text_of(browser, "#batch-head h1"), TIMEOUT, 0.5, "RUNNING")
        browser.find_element(By.CSS_SELECTOR, '[data-action="cancel-batch"]').click()
        wait_for(lambda: "sets spec.cancel" in text_of(browser, "#confirm-text"), 30)
        shot(browser, "cancel-confirm")
        browser.find_element(By.ID, "confirm-yes").click()
        wait_for(lambda: "spec.cancel is set" in text_of(browser, "[data-outcome]"), 30)

        got = kube.kubectl("get", "kb", "long", "-n", namespace, "-o", "json")
        assert json.loads(got.stdout)["spec"]["cancel"] is True
        wait_for(
            lambda: "CANCELLED" in text_of(browser, "#batch-head h1"),
            TIMEOUT,
            0.5,
            "the page to show the batch cancelled",
        )


def test_a_namespace_the_user_may_not_read_shows_the_api_servers_refusal(
    browser: Any, kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    kubeconfig = service_account_kubeconfig(kube, namespace, "onlooker", tmp_path / "config")
    env = client_env | {"KUBECONFIG": str(kubeconfig)}
    who = f"system:serviceaccount:{namespace}:onlooker"
    with dashboard(env, "-n", "kube-system") as dash:
        open_page(browser, dash, "/")
        refusal = '.refused[data-namespace="kube-system"]'
        wait_for(lambda: "forbidden" in text_of(browser, refusal), 60, what="the refusal")
        said = text_of(browser, refusal)
        assert who in said and "cannot list resource" in said and "kube-system" in said
        shot(browser, "refused")

        open_page(browser, dash, "/batches/kube-system/grp-00000000")
        wait_for(lambda: "forbidden" in text_of(browser, "#batch-head .refused"), 60)
        assert who in text_of(browser, "#batch-head .refused")


def test_without_the_token_every_request_gets_403_and_it_listens_on_loopback_only(
    client_env: dict[str, str], namespace: str
) -> None:
    with dashboard(client_env, "-n", namespace) as dash:
        for path in ("/", "/api/objects", "/api/events", "/static/app.js", "/operator"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(dash.base + path, timeout=10)
            assert refused.value.code == 403, path
        with pytest.raises(urllib.error.HTTPError) as wrong:
            urllib.request.urlopen(f"{dash.base}/?token=not-the-token", timeout=10)
        assert wrong.value.code == 403

        class Stay(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        with pytest.raises(urllib.error.HTTPError) as exchanged:
            urllib.request.build_opener(Stay).open(dash.url, timeout=10)
        assert exchanged.value.code == 303
        assert "HttpOnly" in exchanged.value.headers["Set-Cookie"]

        listening = listeners(dash.port)
        assert listening == ["127.0.0.1"], listening


def listeners(port: int) -> list[str]:
    """The local addresses of every listening TCP socket on ``port`` (IPv4 and IPv6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(_address(address))
    return found


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:  # IPv4, little-endian
        return ".".join(str(int(hex_address[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return hex_address  # IPv6: shown raw; any at all is a failure here
