"""Kubeconfig files for the client's unit tests: what the client reads, never contacted
unless a test serves the address itself."""

from __future__ import annotations

from pathlib import Path

import yaml


def _write(
    path: Path, servers: dict[str, str], contexts: list[tuple[str, str]], current: str
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": name, "cluster": {"server": server}}
                    for name, server in servers.items()
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": name, "context": {"cluster": cluster, "user": "u"}}
                    for name, cluster in contexts
                ],
                "current-context": current,
            }
        )
    )
    return path


def kubeconfig(path: Path, server: str, context: str = "here") -> Path:
    """A kubeconfig of one context whose cluster is ``server``."""
    return _write(path, {"c": server}, [(context, "c")], context)


def kubeconfig_of(path: Path, *contexts: tuple[str, str], current: str | None = None) -> Path:
    """A kubeconfig with these (context, cluster) pairs, every cluster at a closed port."""
    servers = {cluster: "https://127.0.0.1:1" for cluster in sorted({c for _, c in contexts})}
    return _write(path, servers, list(contexts), current or (contexts[0][0] if contexts else ""))
