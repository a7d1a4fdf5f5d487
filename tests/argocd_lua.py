"""Run the shipped Argo CD health check with a real Lua 5.1 interpreter (Argo CD's dialect)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
ARGOCD_HEALTH = REPO / "gitops" / "argocd" / "health.lua"

ArgoHealth = Callable[[dict[str, Any]], tuple[str, str]]


def lua_literal(value: Any) -> str:
    """A JSON value as a Lua 5.1 table constructor (null becomes nil, as Argo CD does)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = "".join(
            ch
            if 32 <= ord(ch) < 127 and ch not in '"\\'
            else "".join(f"\\{b:03d}" for b in ch.encode())
            for ch in value
        )
        return f'"{escaped}"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    items = (f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items() if v is not None)
    return "{" + ", ".join(items) + "}"


def argo_health_runner() -> ArgoHealth:
    """A function running the shipped Argo CD health check on an object."""
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.fail("lua5.1 is not installed: run `make prereqs` (Debian package lua5.1)")

    def health(obj: dict[str, Any]) -> tuple[str, str]:
        program = (
            f"obj = {lua_literal(obj)}\n"
            f"local hs = dofile({lua_literal(str(ARGOCD_HEALTH))})\n"
            'io.write(hs.status, "\\t", hs.message or "")\n'
        )
        out = subprocess.run(
            [lua, "-"], input=program, capture_output=True, text=True, timeout=10, check=False
        )
        assert out.returncode == 0, out.stderr
        status, _, message = out.stdout.partition("\t")
        return status, message

    return health
