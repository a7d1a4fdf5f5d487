"""The chart's gang settings and rights: what it renders, the operator reads as meant.

Installed with the real Helm library against a stand-in API server (helm_render), so the
objects are the ones Helm would create and a refusal is Helm's own values-schema error.
"""

from __future__ import annotations

from typing import Any

import helm_sdkpy as helm
import pytest
from helm_render import install, of_kind
from kinetic_operator.logic.policy import parse_policy
from kinetic_operator.settings import OperatorSettings

BASE: dict[str, Any] = {"storageRoot": "gs://bucket/kinetic"}


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def _settings(values: dict[str, Any]) -> OperatorSettings:
    """The operator's settings from the ConfigMap the chart renders, as its Pod reads them."""
    data = _named(install(values), "ConfigMap", "kinetic-operator-settings")["data"]
    return OperatorSettings.model_validate(
        {k.removeprefix("KINETIC_").lower(): v for k, v in data.items()}
    )


def test_by_default_members_find_rank_0_by_dns_and_wait_five_minutes_for_nodes() -> None:
    settings = _settings(BASE)
    assert settings.rendezvous == "dns"
    assert settings.gang_scheduling_seconds == 300


def test_a_cluster_without_dns_asks_for_pod_ips() -> None:
    values = {**BASE, "gangs": {"rendezvous": "podIP", "schedulingSeconds": 60}}
    settings = _settings(values)
    assert (settings.rendezvous, settings.gang_scheduling_seconds) == ("podIP", 60)


@pytest.mark.parametrize(
    ("gangs", "path"),
    [
        ({"rendezvous": "mdns"}, "/gangs/rendezvous"),
        ({"schedulingSeconds": 0}, "/gangs/schedulingSeconds"),
        ({"deadline": 10}, "deadline"),
    ],
)
def test_bad_gang_values_are_refused_by_the_schema(gangs: dict[str, Any], path: str) -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "gangs": gangs})
    assert path in str(refused.value)


def test_the_operator_may_make_and_read_a_gangs_service_and_network_policy_and_nothing_more():
    """Made once per owner; read only to tell its own from one someone else made first."""
    objects = install(BASE)
    rules = [
        rule
        for role in of_kind(objects, "ClusterRole")
        for rule in role.get("rules", [])
        if {"services", "networkpolicies"} & set(rule.get("resources", []))
    ]
    assert rules == [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "create"]},
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["networkpolicies"],
            "verbs": ["get", "create"],
        },
    ]


def test_gangs_get_a_network_policy_and_fully_qualified_names_by_default() -> None:
    settings = _settings(BASE)
    assert settings.gang_network_policy and settings.cluster_domain == "cluster.local"
    values = {**BASE, "gangs": {"networkPolicy": False}, "clusterDomain": "corp.example"}
    settings = _settings(values)
    assert not settings.gang_network_policy and settings.cluster_domain == "corp.example"


def test_max_hosts_per_job_renders_as_the_operator_reads_it() -> None:
    data = _named(install({**BASE, "policy": {"maxHostsPerJob": 8}}), "ConfigMap", "kinetic-policy")
    assert parse_policy(data["data"], "here").max_hosts_per_job == 8
    unlimited = _named(install(BASE), "ConfigMap", "kinetic-policy")["data"]
    assert parse_policy(unlimited, "here").max_hosts_per_job is None
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "policy": {"maxHostsPerJob": 0}})
    assert "/policy/maxHostsPerJob" in str(refused.value)
