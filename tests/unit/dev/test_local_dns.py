"""The local cluster's DNS: from Service and Endpoints bodies to dnsmasq's hosts lines.

Tables of the objects the API server holds, as the feeder receives them (JSON),
against the names a Pod then resolves, per the Kubernetes DNS specification.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kinetic_dev import clusterdns
from kinetic_dev.clusterdns import Feeder, Record
from kinetic_dev.config import LocalConfig

DOMAIN = "cluster.local"


def service(
    name: str,
    ns: str = "team",
    cluster_ip: str = "None",
    *,
    publish: bool = False,
    kind: str = "ClusterIP",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind, "publishNotReadyAddresses": publish}
    if cluster_ip:
        spec["clusterIP"] = cluster_ip
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def endpoints(name: str, ns: str = "team", *subsets: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "subsets": list(subsets)}


def address(ip: str, hostname: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"ip": ip, "targetRef": {"kind": "Pod", "name": f"pod-{ip}"}}
    if hostname is not None:
        found["hostname"] = hostname
    return found


def names_of(svc: dict[str, Any], eps: dict[str, Any] | None) -> set[tuple[str, str]]:
    return {(r.name, r.ip) for r in clusterdns.service_records(svc, eps, DOMAIN)}


GANG = "job-gang.team.svc.cluster.local"

CASES = [
    pytest.param(
        service("web", cluster_ip="10.0.0.17"),
        None,
        {("web.team.svc.cluster.local", "10.0.0.17")},
        id="a ClusterIP Service: its ClusterIP, with or without endpoints",
    ),
    pytest.param(
        service("web", cluster_ip="10.0.0.17"),
        endpoints("web", "team", {"addresses": [address("10.244.0.5", "h")]}),
        {("web.team.svc.cluster.local", "10.0.0.17")},
        id="a ClusterIP Service never names its Pods",
    ),
    pytest.param(
        service("job-gang"),
        endpoints(
            "job-gang",
            "team",
            {"addresses": [address("10.244.0.5", "job-1-0"), address("10.244.0.6", "job-1-1")]},
        ),
        {
            (GANG, "10.244.0.5"),
            (GANG, "10.244.0.6"),
            (f"job-1-0.{GANG}", "10.244.0.5"),
            (f"job-1-1.{GANG}", "10.244.0.6"),
        },
        id="a headless Service: each endpoint, and each Pod hostname under it",
    ),
    pytest.param(
        service("plain"),
        endpoints("plain", "team", {"addresses": [address("10.244.0.7")]}),
        {("plain.team.svc.cluster.local", "10.244.0.7")},
        id="a Pod without a hostname under it adds an address only",
    ),
    pytest.param(
        service("job-gang"),
        endpoints(
            "job-gang",
            "team",
            {
                "addresses": [address("10.244.0.5", "job-1-0")],
                "notReadyAddresses": [address("10.244.0.6", "job-1-1")],
            },
        ),
        {(GANG, "10.244.0.5"), (f"job-1-0.{GANG}", "10.244.0.5")},
        id="not-ready Pods are left out of a Service that does not publish them",
    ),
    pytest.param(
        service("job-gang", publish=True),
        endpoints(
            "job-gang",
            "team",
            {
                "addresses": [address("10.244.0.5", "job-1-0")],
                "notReadyAddresses": [address("10.244.0.6", "job-1-1")],
            },
        ),
        {
            (GANG, "10.244.0.5"),
            (GANG, "10.244.0.6"),
            (f"job-1-0.{GANG}", "10.244.0.5"),
            (f"job-1-1.{GANG}", "10.244.0.6"),
        },
        id="publishNotReadyAddresses: not-ready Pods are named too",
    ),
    pytest.param(
        service("job-gang"),
        endpoints(
            "job-gang",
            "team",
            {"addresses": [address("10.244.0.5", "a")], "ports": [{"port": 1}]},
            {"addresses": [address("10.244.0.5", "a")], "ports": [{"port": 2}]},
        ),
        {(GANG, "10.244.0.5"), (f"a.{GANG}", "10.244.0.5")},
        id="an address in several subsets (ports) is one record",
    ),
    pytest.param(
        service("job-gang"),
        None,
        set(),
        id="a headless Service before its endpoints names nothing",
    ),
    pytest.param(
        service("pending", cluster_ip=""),
        None,
        set(),
        id="a Service without an address yet names nothing",
    ),
    pytest.param(
        service("ext", cluster_ip="", kind="ExternalName"),
        None,
        set(),
        id="ExternalName Services (a CNAME) are not served",
    ),
    pytest.param(
        service("job-gang"),
        endpoints(
            "job-gang",
            "team",
            {
                "addresses": [
                    address("10.244.0.5", "ok"),
                    address("10.244.0.6", "bad name"),
                    address("10.244.0.7", "evil\n10.9.9.9 pypi.org"),
                    address("10.244.0.8", "a.b"),
                    address("not-an-ip", "x"),
                    address("10.244.0.9", "UPPER"),
                    {"ip": "10.244.0.11", "hostname": 7},
                ]
            },
        ),
        {
            (GANG, "10.244.0.5"),
            (f"ok.{GANG}", "10.244.0.5"),
            (GANG, "10.244.0.6"),
            (GANG, "10.244.0.7"),
            (GANG, "10.244.0.8"),
            (GANG, "10.244.0.9"),
            (GANG, "10.244.0.11"),
        },
        id="a hostname that is no DNS label, or an address that is no IP, writes no line",
    ),
]


@pytest.mark.parametrize(("svc", "eps", "expected"), CASES)
def test_the_names_a_service_gives(
    svc: dict[str, Any], eps: dict[str, Any] | None, expected: set[tuple[str, str]]
) -> None:
    assert names_of(svc, eps) == expected


def test_endpoints_count_only_for_the_service_of_their_own_name_and_namespace() -> None:
    services = {
        ("team", "job-gang"): service("job-gang", "team"),
        ("other", "job-gang"): service("job-gang", "other"),
    }
    eps = {
        ("team", "job-gang"): endpoints(
            "job-gang", "team", {"addresses": [address("10.244.0.5", "h")]}
        ),
        ("team", "orphan"): endpoints("orphan", "team", {"addresses": [address("10.244.0.9")]}),
    }
    found = clusterdns.records(services, eps, DOMAIN)
    assert found == [
        Record("h.job-gang.team.svc.cluster.local", "10.244.0.5"),
        Record("job-gang.team.svc.cluster.local", "10.244.0.5"),
    ]


def test_the_domain_is_the_clusters_and_names_stay_within_dns_limits() -> None:
    svc = service("web", cluster_ip="10.0.0.17")
    found = clusterdns.service_records(svc, None, "corp.internal")
    assert found == [Record("web.team.svc.corp.internal", "10.0.0.17")]
    long_domain = ".".join(["d" * 63] * 4)  # a name past 253 characters is no DNS name
    assert clusterdns.service_records(svc, None, long_domain) == []


def test_the_hosts_file_has_one_line_per_address_its_own_name_first() -> None:
    text = clusterdns.hosts_text(
        [
            Record(GANG, "10.244.0.10"),
            Record(f"job-1-1.{GANG}", "10.244.0.10"),
            Record(GANG, "10.244.0.9"),
            Record(f"job-1-0.{GANG}", "10.244.0.9"),
            Record("kubernetes.default.svc.cluster.local", "10.0.0.1"),
            Record("v6.team.svc.cluster.local", "fd00::1"),
        ]
    )
    lines = text.splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == [
        "10.0.0.1 kubernetes.default.svc.cluster.local",
        f"10.244.0.9 job-1-0.{GANG} {GANG}",  # numeric order, not text order
        f"10.244.0.10 job-1-1.{GANG} {GANG}",
        "fd00::1 v6.team.svc.cluster.local",
    ]
    assert clusterdns.hosts_text([]).splitlines()[1:] == []


def test_watch_events_add_change_and_remove_objects() -> None:
    store: dict[clusterdns.Key, dict[str, Any]] = {}
    one = service("a", cluster_ip="10.0.0.2")
    clusterdns.apply_event(store, "ADDED", one)
    moved = service("a", cluster_ip="10.0.0.3")
    clusterdns.apply_event(store, "MODIFIED", moved)
    assert store == {("team", "a"): moved}
    clusterdns.apply_event(store, "BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert store == {("team", "a"): moved}
    clusterdns.apply_event(store, "DELETED", moved)
    assert store == {}


def test_a_gangs_names_follow_its_life(tmp_path: Path) -> None:
    """Simulated: the Service, then rank 0 with an address, then rank 1, then the end."""
    written: list[str] = []
    feeder = Feeder(api=None, hosts_dir=tmp_path, domain=DOMAIN, out=written.append)
    svc = service("job-gang", publish=True)

    def see(kind: str, event: str, obj: dict[str, Any]) -> str | None:
        clusterdns.apply_event(feeder.seen[kind], event, obj)
        feeder.listed.add(kind)
        if not feeder.write_if_changed():
            return None
        return (tmp_path / clusterdns.HOSTS_FILE).read_text()

    assert see("services", "ADDED", svc) is None  # Endpoints not listed yet: no file
    assert not (tmp_path / clusterdns.HOSTS_FILE).exists()
    first = see("endpoints", "ADDED", endpoints("job-gang", "team"))
    assert first is not None and first.splitlines()[1:] == []
    rank0 = {"notReadyAddresses": [address("10.244.0.5", "job-1-0")]}
    assert see("endpoints", "MODIFIED", endpoints("job-gang", "team", rank0)) == (
        f"{first}10.244.0.5 job-1-0.{GANG} {GANG}\n"
    )
    both = {"addresses": [address("10.244.0.5", "job-1-0"), address("10.244.0.6", "job-1-1")]}
    text = see("endpoints", "MODIFIED", endpoints("job-gang", "team", both))
    assert text is not None and f"10.244.0.6 job-1-1.{GANG} {GANG}" in text
    # The same names again (a resync): nothing is rewritten.
    assert see("endpoints", "MODIFIED", endpoints("job-gang", "team", both)) is None
    gone = see("services", "DELETED", svc)
    assert gone is not None and gone.splitlines()[1:] == []
    assert len(written) == 4 and all("names" in line for line in written)
    # dnsmasq skips dot-files: the temporary one is never left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == [clusterdns.HOSTS_FILE]
    assert (tmp_path / clusterdns.HOSTS_FILE).stat().st_mode & 0o777 == 0o644


def test_dnsmasq_answers_on_the_node_alone_and_keeps_the_domain_local(tmp_path: Path) -> None:
    cfg = LocalConfig(state_dir=tmp_path / "state")
    argv = clusterdns.dnsmasq_argv(
        "/usr/sbin/dnsmasq",
        listen=cfg.node_ip,
        port=clusterdns.DNS_PORT,
        hosts_dir=cfg.dns_dir,
        domain=cfg.cluster_domain,
    )
    assert argv[0] == "/usr/sbin/dnsmasq" and "--keep-in-foreground" in argv
    assert "--listen-address=10.244.0.1" in argv and "--bind-interfaces" in argv
    assert "--port=53" in argv
    assert "--local=/cluster.local/" in argv  # unknown cluster names: NXDOMAIN, not upstream
    assert "--no-hosts" in argv and "--conf-file=/dev/null" in argv  # nothing of the machine's
    assert f"--hostsdir={cfg.dns_dir}" in argv and str(cfg.dns_dir).startswith(str(cfg.run_root))
    assert "--resolv-file=/etc/resolv.conf" in argv  # every other name: this machine's resolvers
    assert "--domain-needed" in argv and "--bogus-priv" in argv
    feeder = clusterdns.feeder_argv(cfg)
    assert feeder[1:3] == ["-m", "kinetic_dev.clusterdns"]
    # kube-proxy's identity: it may list and watch Services and Endpoints, nothing more.
    assert str(cfg.component_kubeconfig("kube-proxy")) in feeder


def test_other_names_go_to_this_machines_resolvers() -> None:
    conf = "search corp.example\nnameserver 10.255.255.53\n# nameserver 1.1.1.1\nnameserver ::1\n"
    assert clusterdns.upstreams(conf) == ["10.255.255.53", "::1"]


def test_the_cluster_runs_its_dns_server_and_feeder_and_gangs_meet_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kinetic_dev import operator
    from kinetic_dev.cluster import Cluster

    cluster = Cluster(LocalConfig(state_dir=tmp_path / "state"))
    comps = {c.name: c for c in cluster.components_for_status()}
    dnsmasq, feeder = comps["dnsmasq"], comps["dns-feeder"]
    # Port 53 is checked where dnsmasq binds it: the node's address, not loopback.
    assert (dnsmasq.port, dnsmasq.host) == (clusterdns.DNS_PORT, cluster.cfg.node_ip)
    assert feeder.port is None
    # The feeder stops before the API server it watches; dnsmasq with it.
    order = Cluster.STOP_ORDER
    assert order.index("dns-feeder") < order.index("dnsmasq") < order.index("kube-apiserver")
    # With names to meet by, the chart's default rendezvous is the local cluster's too.
    monkeypatch.setattr(operator.pipconfig, "package_index", lambda: {})
    assert operator.chart_values(cluster.cfg)["gangs"] == {"rendezvous": "dns"}
