"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import os

import pytest
from argocd_lua import ArgoHealth, argo_health_runner


@pytest.fixture(scope="session")
def argo_health() -> ArgoHealth:
    """Run the shipped Argo CD health check on an object with a real Lua 5.1 interpreter."""
    return argo_health_runner()


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under CI=true a skipped test is a failure: CI starts the whole local cluster, so
    a test that finds something missing there has found a fault, not a limit."""
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (a skip is a failure there): {reason}"
