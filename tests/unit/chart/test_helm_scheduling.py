"""The chart's bound on Pods no node takes: what it renders, the operator reads as meant."""

from __future__ import annotations

from typing import Any

import helm_sdkpy as helm
import pytest
from bench_scripts import load
from helm_render import install, of_kind
from kinetic.model.limits import DEFAULT_TARGET_UNIT_SECONDS
from kinetic_dev.config import LocalConfig
from kinetic_dev.operator import chart_values
from kinetic_operator.handlers.batch_units import sizing_rules
from kinetic_operator.logic.unit_sizing import DEFAULT_RULES, SizingRules
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


@pytest.mark.parametrize(
    ("units", "target", "interval"),
    [
        (None, 30.0, 3.0),  # by default: about half a minute of work per Pod
        ({"targetSeconds": 120}, 120.0, 3.0),
        ({"targetSeconds": 2.5, "progressSeconds": 1}, 2.5, 1.0),
    ],
)
def test_the_work_a_unit_is_given_is_the_charts(
    units: dict[str, Any] | None, target: float, interval: float
) -> None:
    settings = _settings(BASE if units is None else {**BASE, "units": units})
    assert (settings.unit_target_seconds, settings.progress_interval) == (target, interval)
    assert DEFAULT_TARGET_UNIT_SECONDS == _settings(BASE).unit_target_seconds  # one default


@pytest.mark.parametrize(
    ("units", "rules"),
    [
        (None, DEFAULT_RULES),  # the chart's defaults are the policy's
        (
            {"firstInputs": 8, "minSeconds": 5, "startsAtOnce": 2},
            SizingRules(first_unit=8, min_unit_seconds=5.0, start_at_once=2),
        ),
        ({"startsAtOnce": 0}, SizingRules(start_at_once=None)),  # 0: no pacing
    ],
)
def test_how_units_are_sized_and_paced_is_the_charts(
    units: dict[str, Any] | None, rules: SizingRules
) -> None:
    values = BASE if units is None else {**BASE, "units": units}
    assert sizing_rules(_settings(values)) == rules


def test_the_local_cluster_sizes_units_for_its_small_node() -> None:
    """`kinetic local up` installs the chart with the small-node settings the unit
    simulation chose for a node like its own (bench/UNITS.md)."""
    values = chart_values(LocalConfig())
    assert sizing_rules(_settings(values)) == load("unitsim").SMALL_NODE_RULES
    assert sizing_rules(_settings(values)) != DEFAULT_RULES


@pytest.mark.parametrize(
    ("units", "path"),
    [
        ({"targetSeconds": 0}, "/units/targetSeconds"),
        ({"progressSeconds": 600}, "/units/progressSeconds"),
        ({"target": 10}, "target"),
        ({"firstInputs": 0}, "/units/firstInputs"),
        ({"minSeconds": -1}, "/units/minSeconds"),
        ({"startsAtOnce": 1.5}, "/units/startsAtOnce"),
    ],
)
def test_bad_unit_values_are_refused_by_the_schema(units: dict[str, Any], path: str) -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "units": units})
    assert path in str(refused.value)
