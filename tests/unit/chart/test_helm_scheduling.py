"""The chart's bound on Pods no node takes: what it renders, the operator reads as meant."""

from __future__ import annotations

from typing import Any

import helm_sdkpy as helm
import pytest
from helm_render import install, of_kind
from kinetic_operator.settings import OperatorSettings

BASE: dict[str, Any] = {"storageRoot": "gs://bucket/kinetic"}


def _settings(values: dict[str, Any]) -> OperatorSettings:
    """The operator's settings from the ConfigMap the chart renders, as its Pod reads them."""
    (cm,) = [
        o
        for o in of_kind(install(values), "ConfigMap")
        if o["metadata"]["name"] == "kinetic-operator-settings"
    ]
    return OperatorSettings.model_validate(
        {k.removeprefix("KINETIC_").lower(): v for k, v in cm["data"].items()}
    )


@pytest.mark.parametrize(
    ("scheduling", "seconds"),
    [
        (None, 600.0),  # by default: ten minutes, time for a cluster autoscaler to add a node
        ({"unschedulableSeconds": 90}, 90.0),
        ({"unschedulableSeconds": 0}, None),  # 0: wait for ever
    ],
)
def test_a_pod_no_node_takes_fails_after_the_charts_bound(
    scheduling: dict[str, Any] | None, seconds: float | None
) -> None:
    values = BASE if scheduling is None else {**BASE, "scheduling": scheduling}
    assert _settings(values).unschedulable_seconds == seconds


@pytest.mark.parametrize(
    ("scheduling", "path"),
    [
        ({"unschedulableSeconds": -1}, "/scheduling/unschedulableSeconds"),
        ({"unschedulable": 10}, "unschedulable"),
    ],
)
def test_bad_scheduling_values_are_refused_by_the_schema(
    scheduling: dict[str, Any], path: str
) -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "scheduling": scheduling})
    assert path in str(refused.value)
