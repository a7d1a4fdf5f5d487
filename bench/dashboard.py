"""The dashboard with a 10,000-input batch: page loads, table pages, and the server's memory.

One KineticBatch of N inputs (a 100 x 100 grid running `true`, at most P at once,
so it moves while it is measured) and `kinetic dashboard` on it, driven by
Debian's headless Chromium:

- load: the batch's page loaded LOADS times in a fresh tab each, from navigation
  to the first page of its inputs table in the DOM (the page's own
  ``kinetic:first-table-page`` performance mark); the median must be under 2 s.
  The first load also pays for the server's read of the batch (its status, one
  LIST of its Pods, its manifest shards); later ones share that read;
- table: FETCHES requests for a page of 100 inputs (random pages and filters),
  timed from this process; the p95 must be under 200 ms;
- memory: TABS tabs left open on the batch's page for SOAK seconds while it
  runs; the server's RSS growth from the start of the soak to its end must stay
  under 5 MB (the full check is 600 s; shorter soaks say less).

Results go to bench/results/dashboard-latest.json (and a timestamped copy).

    python bench/dashboard.py --inputs 10000 --soak 600
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import benchlib as bl
from kinetic.api.kube import KubeClient
from kinetic.model import resources as r
from kinetic_dev import use_local_cluster
from rich.console import Console

kube = KubeClient()  # the client's own calls to the API server, through the current context

console = Console() if sys.stdout.isatty() else Console(width=120)

LOAD_LIMIT_S = 2.0
FETCH_P95_LIMIT_MS = 200.0
RSS_GROWTH_LIMIT_MB = 5.0
KINETIC = str(Path(sys.executable).with_name("kinetic"))


def submit(ns: str, name: str, inputs: int, parallel: int) -> None:
    side = int(round(inputs**0.5))
    if side * side != inputs:
        raise SystemExit(f"--inputs {inputs}: use a square (a side x side grid), e.g. 10000")
    grid = {"grid": {"a": list(range(side)), "b": list(range(side))}}
    body = bl.container_batch(ns, name, ["true"], grid, parallel, image="busybox:1.36")
    kube.create(r.BATCH_PLURAL, ns, body)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        obj = kube.get(r.BATCH_PLURAL, ns, name) or {}
        if (obj.get("status") or {}).get("total") == inputs:
            return
        time.sleep(0.5)
    raise TimeoutError(f"batch {ns}/{name} was not accepted within 120 s")


def start_dashboard(ns: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [KINETIC, "dashboard", "--port", "0", "--no-open", "-n", ns],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        found = [w for w in line.split() if "token=" in w]
        if found:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep it drained
            return proc, found[0]
    raise RuntimeError("the dashboard ended without printing its URL")


def browser(profile: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
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
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def first_table_page(driver: Any, url: str, timeout: float = 60) -> float:
    """Seconds from navigation to the first page of the inputs table in the DOM."""
    driver.switch_to.new_window("tab")
    driver.get(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mark = driver.execute_script(
            "const m = performance.getEntriesByName('kinetic:first-table-page');"
            "return m.length ? m[0].startTime : null;"
        )
        if mark is not None:
            return float(mark) / 1000
        time.sleep(0.02)
    raise TimeoutError(f"no table page within {timeout}s at {url}")


def fetch_pages(base: str, token_url: str, ns: str, name: str, count: int) -> list[float]:
    """Milliseconds per table-page request, through the cookie the first URL gives."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(token_url, timeout=30).read()
    rng = random.Random(31)
    took = []
    for _ in range(count):
        status = rng.choice(["", "SUCCEEDED", "PENDING", "RUNNING"])
        page = rng.randint(1, 100)
        url = f"{base}/api/batches/{ns}/{name}/inputs?page={page}&size=100"
        url += f"&status={status}" if status else ""
        t0 = time.perf_counter()
        with opener.open(url, timeout=30) as got:
            rows = json.loads(got.read())["rows"]
        took.append((time.perf_counter() - t0) * 1000)
        assert isinstance(rows, list)
    return took


def soak(driver: Any, url: str, pid: int, tabs: int, seconds: float) -> dict[str, Any]:
    """Open ``tabs`` tabs on the batch and sample the server's RSS for ``seconds``."""
    for _ in range(tabs):
        driver.switch_to.new_window("tab")
        driver.get(url)
    time.sleep(min(30.0, seconds / 4))  # let the tabs and the server settle
    samples: list[tuple[float, int]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        rss = bl.rss_bytes(pid)
        if rss is not None:
            samples.append((time.monotonic() - t0, rss))
        time.sleep(5)
    start, end = samples[0][1], samples[-1][1]
    return {
        "tabs": tabs,
        "seconds": seconds,
        "rss_start_mb": bl.mb(start),
        "rss_end_mb": bl.mb(end),
        "rss_peak_mb": bl.mb(max(s for _, s in samples)),
        "growth_mb": bl.mb(end - start),
        "samples": [[round(t, 1), bl.mb(s)] for t, s in samples],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", "-n", type=int, default=10_000)
    parser.add_argument("--parallel", "-p", type=int, default=2, help="the batch's maxConcurrent")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--fetches", type=int, default=200)
    parser.add_argument("--tabs", type=int, default=3)
    parser.add_argument("--soak", type=float, default=600.0, help="seconds of the memory check")
    args = parser.parse_args(argv)
    use_local_cluster()
    ns, name = f"kinetic-bench-dash-{uuid.uuid4().hex[:6]}", "grp-dashbench"
    bl.ensure_namespace(ns)
    profile = tempfile.mkdtemp(prefix="kinetic-bench-chromium-")
    proc = None
    driver = None
    try:
        console.print(f"submitting a {args.inputs}-input batch in {ns} ...")
        submit(ns, name, args.inputs, args.parallel)
        proc, token_url = start_dashboard(ns)
        base = token_url.split("/?")[0]
        page_url = f"{base}/batches/{ns}/{name}"
        driver = browser(profile)
        driver.get(token_url)  # the cookie
        loads = [first_table_page(driver, page_url) for _ in range(args.loads)]
        console.print(f"loads to the first table page (s): {[round(x, 3) for x in loads]}")
        fetches = fetch_pages(base, token_url, ns, name, args.fetches)
        p95 = statistics.quantiles(fetches, n=20)[18]
        console.print(
            f"table page fetch: median {statistics.median(fetches):.1f} ms, p95 {p95:.1f} ms"
        )
        console.print(f"soak: {args.tabs} tabs for {args.soak:.0f} s ...")
        memory = soak(driver, page_url, proc.pid, args.tabs, args.soak)
        console.print(
            f"server RSS {memory['rss_start_mb']} -> {memory['rss_end_mb']} MB "
            f"(growth {memory['growth_mb']} MB, peak {memory['rss_peak_mb']} MB)"
        )
        status = (kube.get(r.BATCH_PLURAL, ns, name) or {}).get("status") or {}
        result = {
            "when": bl.now_iso(),
            "inputs": args.inputs,
            "batch_counts_at_end": status.get("counts"),
            "load_seconds": loads,
            "load_median_s": statistics.median(loads),
            "fetch_ms_median": statistics.median(fetches),
            "fetch_ms_p95": p95,
            "memory": memory,
            "limits": {
                "load_median_s": LOAD_LIMIT_S,
                "fetch_ms_p95": FETCH_P95_LIMIT_MS,
                "growth_mb": RSS_GROWTH_LIMIT_MB,
            },
        }
        ok = (
            result["load_median_s"] < LOAD_LIMIT_S
            and p95 < FETCH_P95_LIMIT_MS
            and memory["growth_mb"] < RSS_GROWTH_LIMIT_MB
        )
        result["within_limits"] = ok
        bl.RESULTS.mkdir(exist_ok=True)
        out = bl.RESULTS / "dashboard-latest.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        stamp = result["when"].replace(":", "").replace("-", "")
        (bl.RESULTS / f"dashboard-{stamp}.json").write_text(out.read_text())
        console.print(f"{'within' if ok else 'OVER'} the limits; results in {out}")
        return 0 if ok else 1
    finally:
        if driver is not None:
            driver.quit()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=15)
        shutil.rmtree(profile, ignore_errors=True)
        kube.core.delete_namespace(ns, propagation_policy="Background")


if __name__ == "__main__":
    sys.exit(main())
