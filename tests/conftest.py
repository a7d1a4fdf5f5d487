"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import pytest
from argocd_lua import ArgoHealth, argo_health_runner


@pytest.fixture(scope="session")
def argo_health() -> ArgoHealth:
    """Run the shipped Argo CD health check on an object with a real Lua 5.1 interpreter."""
    return argo_health_runner()
