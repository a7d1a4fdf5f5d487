"""The Argo CD health check, run by Lua 5.1 (Argo CD's dialect) on sample resources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from argocd_lua import ARGOCD_HEALTH, ArgoHealth

VALUES = Path(ARGOCD_HEALTH).with_name("values-argocd.yaml")


def batch(
    phase: str | None, *, generation: int = 1, observed: int | None = 1, **status: Any
) -> dict:
    body: dict[str, Any] = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {"name": "b", "namespace": "ml", "generation": generation},
    }
    if phase is not None:
        body["status"] = {"phase": phase, "observedGeneration": observed, **status}
    return body


def conditions(**values: str) -> list[dict[str, str]]:
    return [{"type": t, "status": s} for t, s in values.items()]


@pytest.mark.parametrize(
    ("obj", "health", "says"),
    [
        (batch(None), "Progressing", "Waiting for the Kinetic operator"),
        (batch("PENDING", conditions=conditions(Reconciling="True")), "Progressing", "Pending"),
        (
            batch("RUNNING", progress="3/10", message="3 running"),
            "Progressing",
            "3/10 succeeded: 3 running",
        ),
        (
            batch("SUCCEEDED", progress="10/10", conditions=conditions(Ready="True")),
            "Healthy",
            "10/10 succeeded",
        ),
        (
            batch(
                "FAILED",
                message="Invalid batch: spec.inputs.grid",
                conditions=conditions(Stalled="True"),
            ),
            "Degraded",
            "Invalid batch: spec.inputs.grid",
        ),
        (batch("CANCELLED"), "Degraded", "Cancelled"),
        # a new spec the operator has not acted on yet: the old outcome says nothing
        (batch("SUCCEEDED", generation=2, observed=1), "Progressing", "generation 2"),
        # a KineticJob's status has the same shape
        (
            {"kind": "KineticJob", "metadata": {"generation": 1}, "status": {"phase": "SUCCEEDED"}},
            "Healthy",
            "Succeeded",
        ),
        # text Lua must not mangle
        (
            batch("FAILED", message='exit 1: "bad" \\ naïve\nsecond line'),
            "Degraded",
            'exit 1: "bad" \\ naïve\nsecond line',
        ),
    ],
)
def test_health_from_phase_conditions_and_generation(
    argo_health: ArgoHealth, obj: dict, health: str, says: str
) -> None:
    status, message = argo_health(obj)
    assert status == health
    assert says in message


def test_the_argocd_values_snippet_carries_the_same_script_for_both_kinds() -> None:
    cm = yaml.safe_load(VALUES.read_text())["configs"]["cm"]
    script = Path(ARGOCD_HEALTH).read_text()
    assert cm == {
        "resource.customizations.health.kinetic.dev_KineticBatch": script,
        "resource.customizations.health.kinetic.dev_KineticJob": script,
    }


def test_progress_is_not_repeated_when_the_message_already_has_it(argo_health: ArgoHealth) -> None:
    obj = batch("FAILED", progress="0/2", message="Done with failures: 0/2 succeeded, 2 failed.")
    assert argo_health(obj) == ("Degraded", "Done with failures: 0/2 succeeded, 2 failed.")
