"""The chart's PodDisruptionBudget, NetworkPolicy and refusals, as `helm install` renders them.

Every case installs the chart with the real Helm library against a stand-in API server
of a chosen Kubernetes version (helm_render): the objects checked are the ones Helm
would create, and a refusal is Helm's own values-schema error.
"""

from __future__ import annotations

from typing import Any

import helm_sdkpy as helm
import pytest
import yaml
from helm_render import CHART, install, of_kind

BASE: dict[str, Any] = {"storageRoot": "gs://bucket/kinetic"}
PRODUCTION = CHART / "values-production.yaml"


def _production(**overrides: Any) -> dict[str, Any]:
    values = yaml.safe_load(PRODUCTION.read_text())
    values.update(overrides)
    return values


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"{len(found)} {kind}s rendered"
    return found[0]


def _operator_pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    deployment = _one(objects, "Deployment")
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def _selects_operator(selector: dict[str, Any], objects: list[dict[str, Any]]) -> bool:
    labels = _operator_pod_labels(objects)
    wanted = selector["matchLabels"]
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _container_ports(objects: list[dict[str, Any]]) -> dict[str, int]:
    (container,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


# --- PodDisruptionBudget -------------------------------------------------------------


def test_default_budget_keeps_one_of_the_two_operator_pods() -> None:
    """Two replicas: minAvailable 1, so a drain moves one while the other serves the webhook."""
    objects = install(BASE, kube_minor=30)
    pdb = _one(objects, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert _one(objects, "Deployment")["spec"]["replicas"] == 2
    assert pdb["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in pdb["spec"]
    # A Pod that is not Ready never holds a drain either.
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert _selects_operator(pdb["spec"]["selector"], objects)
    assert pdb["metadata"]["namespace"] == "kinetic-system"


def test_budget_uses_the_api_each_kubernetes_version_serves() -> None:
    """policy/v1beta1 on 1.20 (the local cluster), without the 1.27 field; policy/v1 from 1.21."""
    old = _one(install(BASE, kube_minor=20), "PodDisruptionBudget")
    assert old["apiVersion"] == "policy/v1beta1"
    assert old["spec"]["minAvailable"] == 1
    assert "unhealthyPodEvictionPolicy" not in old["spec"]
    mid = _one(install(BASE, kube_minor=24), "PodDisruptionBudget")
    assert mid["apiVersion"] == "policy/v1"
    assert "unhealthyPodEvictionPolicy" not in mid["spec"]


def test_budget_numbers_can_be_set_or_the_budget_turned_off() -> None:
    pdb = _one(install({**BASE, "podDisruptionBudget": {"minAvailable": 1}}), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    pdb = _one(
        install({**BASE, "podDisruptionBudget": {"maxUnavailable": "50%"}}), "PodDisruptionBudget"
    )
    assert pdb["spec"]["maxUnavailable"] == "50%" and "minAvailable" not in pdb["spec"]
    assert (
        of_kind(install({**BASE, "podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget")
        == []
    )


def test_single_replica_budget_lets_a_drain_move_the_operator_pod() -> None:
    """One replica: maxUnavailable 1 (minAvailable 1 would hold every drain of its node)."""
    for election in (True, False):
        values = {**BASE, "operator": {"replicas": 1, "leaderElection": election}}
        objects = install(values)
        pdb = _one(objects, "PodDisruptionBudget")
        assert _one(objects, "Deployment")["spec"]["replicas"] == 1
        assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]


def test_budget_with_both_numbers_is_refused() -> None:
    both = {"minAvailable": 1, "maxUnavailable": 1}
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "podDisruptionBudget": both})
    assert "/podDisruptionBudget" in str(refused.value)


# --- NetworkPolicy -------------------------------------------------------------------


def test_network_policy_is_off_by_default() -> None:
    """The chart cannot know where Prometheus runs; closing metrics would stop scrapes."""
    assert of_kind(install(BASE), "NetworkPolicy") == []


def test_production_policy_opens_webhook_and_health_to_all_and_metrics_to_prometheus() -> None:
    values = _production()
    objects = install(values, kube_minor=30)
    policy = _one(objects, "NetworkPolicy")
    spec = policy["spec"]
    assert _selects_operator(spec["podSelector"], objects)
    assert spec["policyTypes"] == ["Ingress"]  # egress left open
    assert "egress" not in spec
    ports = _container_ports(objects)
    by_port = {port["port"]: rule.get("from") for rule in spec["ingress"] for port in rule["ports"]}
    # Exactly the operator's three ports, nothing else.
    assert set(by_port) == {ports["health"], ports["webhook"], ports["metrics"]}
    # The API server (webhook) and the kubelet (health) are not Pods: no `from` can name them.
    assert by_port[ports["webhook"]] is None
    assert by_port[ports["health"]] is None
    # Metrics only from the peers the values name.
    assert by_port[ports["metrics"]] == values["networkPolicy"]["metricsFrom"]
    assert all(p["protocol"] == "TCP" for r in spec["ingress"] for p in r["ports"])


def test_production_values_install_on_the_local_clusters_version_too() -> None:
    objects = install(_production(), kube_minor=20)
    assert _one(objects, "PodDisruptionBudget")["apiVersion"] == "policy/v1beta1"
    assert _one(objects, "NetworkPolicy")["apiVersion"] == "networking.k8s.io/v1"


def test_production_values_watch_named_namespaces_with_the_runner_account() -> None:
    values = _production()
    objects = install(values)
    settings = next(
        c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("settings")
    )
    assert settings["data"]["KINETIC_NAMESPACES"] == ",".join(values["watchNamespaces"])
    assert settings["data"]["KINETIC_RUNNER_SERVICE_ACCOUNT"] == "kinetic-runner"
    role_namespaces = {
        r["metadata"]["namespace"]
        for r in of_kind(objects, "Role")
        if r["metadata"]["name"] == "kinetic-operator"
        and r["metadata"]["namespace"] != "kinetic-system"
    }
    assert role_namespaces == set(values["watchNamespaces"])
    (cluster_role,) = of_kind(objects, "ClusterRole")
    assert not any("pods" in rule["resources"] for rule in cluster_role["rules"])


def test_metrics_port_is_closed_without_scrapers_and_egress_rules_restrict_egress() -> None:
    dns = {"to": [{"namespaceSelector": {}}], "ports": [{"port": 53, "protocol": "UDP"}]}
    values = {**BASE, "networkPolicy": {"enabled": True, "metricsFrom": [], "egress": [dns]}}
    objects = install(values)
    spec = _one(objects, "NetworkPolicy")["spec"]
    ports = _container_ports(objects)
    opened = {p["port"] for rule in spec["ingress"] for p in rule["ports"]}
    assert opened == {ports["health"], ports["webhook"]}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [dns]


def test_network_policy_follows_disabled_webhook_and_metrics() -> None:
    values = {
        **BASE,
        "webhook": {"enabled": False},
        "metrics": {"enabled": False},
        "networkPolicy": {"enabled": True, "metricsFrom": [{"podSelector": {}}]},
    }
    objects = install(values)
    spec = _one(objects, "NetworkPolicy")["spec"]
    assert [p["port"] for rule in spec["ingress"] for p in rule["ports"]] == [
        _container_ports(objects)["health"]
    ]


def test_a_mistyped_network_policy_peer_is_refused() -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "networkPolicy": {"enabled": True, "metricsFrom": [{"podSelectr": {}}]}})
    assert "/networkPolicy/metricsFrom/0" in str(refused.value)


# --- The runner's account, and the operator's identity -------------------------------


@pytest.mark.parametrize("values", [BASE, _production()], ids=["default", "production"])
def test_runner_account_default_is_refused_at_install(values: dict[str, Any]) -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**values, "runnerServiceAccount": "default"})
    message = str(refused.value)
    assert "runnerServiceAccount" in message, message
    assert "values don't meet the specifications of the schema" in message


def test_runner_account_must_be_a_kubernetes_name() -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "runnerServiceAccount": "Kinetic Runner"})
    assert "runnerServiceAccount" in str(refused.value)
    ok = install({**BASE, "runnerServiceAccount": "team-a.runner"})
    assert _one(ok, "Deployment")


def test_operator_account_carries_its_workload_identity_annotation() -> None:
    identity = {"iam.gke.io/gcp-service-account": "kinetic-operator@p.iam.gserviceaccount.com"}
    objects = install({**BASE, "serviceAccount": {"annotations": identity}})
    annotations = _one(objects, "ServiceAccount")["metadata"]["annotations"]
    assert identity.items() <= annotations.items()
    plain = _one(install(BASE), "ServiceAccount")["metadata"]["annotations"]
    assert not any(key.startswith("iam.gke.io/") for key in plain)  # Helm's own only


# --- The webhook's bounds and its clients ----------------------------------------------


def _settings(objects: list[dict[str, Any]]) -> dict[str, str]:
    found = next(
        c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("settings")
    )
    data: dict[str, str] = found["data"]
    return data


def test_the_webhook_bounds_reach_the_operator_and_no_client_ca_by_default() -> None:
    from kinetic.model.limits import MAX_REVIEW_BYTES

    objects = install(BASE)
    settings = _settings(objects)
    assert settings["KINETIC_WEBHOOK_MAX_REVIEW_BYTES"] == str(MAX_REVIEW_BYTES)
    assert settings["KINETIC_WEBHOOK_REVIEWS"] == "4"
    assert settings["KINETIC_WEBHOOK_WAIT_SECONDS"] == "2"
    assert "KINETIC_WEBHOOK_CLIENT_CAFILE" not in settings
    assert not [c for c in of_kind(objects, "ConfigMap") if "client-ca" in c["metadata"]["name"]]


def test_a_client_ca_is_mounted_where_the_operator_reads_it() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    values = {**BASE, "webhook": {"clientCA": pem, "clientNames": ["kube-apiserver-webhooks"]}}
    objects = install(values)
    settings = _settings(objects)
    assert settings["KINETIC_WEBHOOK_CLIENT_NAMES"] == "kube-apiserver-webhooks"
    cafile = settings["KINETIC_WEBHOOK_CLIENT_CAFILE"]
    (ca,) = [c for c in of_kind(objects, "ConfigMap") if "client-ca" in c["metadata"]["name"]]
    assert ca["data"] == {"ca.crt": pem}
    pod = _one(objects, "Deployment")["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "webhook-client-ca"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "webhook-client-ca"]
    assert volume["configMap"]["name"] == ca["metadata"]["name"]
    assert cafile == f"{mount['mountPath']}/ca.crt" and mount["readOnly"] is True


def test_client_names_without_a_client_ca_are_refused_naming_both() -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "webhook": {"clientNames": ["kube-apiserver-webhooks"]}})
    assert "webhook.clientNames is set but webhook.clientCA is not" in str(refused.value)


def test_the_webhook_port_can_be_opened_to_the_api_server_alone() -> None:
    apiserver = [{"ipBlock": {"cidr": "172.16.0.2/32"}}]
    values = {**BASE, "networkPolicy": {"enabled": True, "webhookFrom": apiserver}}
    objects = install(values)
    spec = _one(objects, "NetworkPolicy")["spec"]
    ports = _container_ports(objects)
    by_port = {port["port"]: rule.get("from") for rule in spec["ingress"] for port in rule["ports"]}
    assert by_port[ports["webhook"]] == apiserver
    assert by_port[ports["health"]] is None  # the kubelet's probes still get in


@pytest.mark.parametrize(
    "webhook,where",
    [
        ({"maxReviewBytes": 1000}, "/webhook/maxReviewBytes"),
        ({"reviewsAtOnce": 0}, "/webhook/reviewsAtOnce"),
        ({"waitSeconds": 30}, "/webhook/waitSeconds"),
    ],
)
def test_webhook_bounds_out_of_range_are_refused(webhook: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.InstallError) as refused:
        install({**BASE, "webhook": webhook})
    assert where in str(refused.value)
