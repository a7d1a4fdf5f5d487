"""Cluster DNS for the local cluster: Debian's dnsmasq, fed from the API server.

What a real cluster's DNS answers for Services and Pods (the Kubernetes DNS
specification, as CoreDNS serves it), for the names multi-host jobs need:

- ``<svc>.<ns>.svc.<domain>``: a Service's ClusterIP; for a headless Service
  (``clusterIP: None``), the addresses of its endpoints, the not-ready ones
  too where the Service publishes them (``publishNotReadyAddresses``);
- ``<hostname>.<svc>.<ns>.svc.<domain>``: the address of a Pod whose
  ``spec.hostname`` and ``spec.subdomain`` name it under a headless Service
  of its namespace that selects it (the endpoints controller then writes the
  hostname into the Service's Endpoints, which is where it is read from);
- every other name is forwarded to this machine's own resolvers
  (``/etc/resolv.conf``), so a Pod reaches the package index as this machine
  does; names under the domain that nothing defines are NXDOMAIN, answered
  here and never asked upstream.

dnsmasq listens on the node's bridge address, port 53 (what the kubelet puts
in every Pod's resolv.conf, ``clusterDNS``), and reads its names from a hosts
file in a folder of its own (``--hostsdir``), re-read whenever that file is
replaced. The feeder (`Feeder`, ``python -m kinetic_dev.clusterdns``) lists and
watches Services and Endpoints through the API server with kube-proxy's
identity (which may read exactly those) and rewrites the file when the names
change. Not served: SRV records, ExternalName Services (a CNAME) and the
deprecated ``<a-b-c-d>.<ns>.pod`` names; nothing here needs them.

Turning objects into hosts lines is pure (`records`, `hosts_text`) and
unit-tested as tables; the watch is the thin layer around it.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.exception
import dns.resolver

from kinetic_dev.config import LocalConfig

DNS_PORT = 53  # a Pod's resolv.conf names an address only: the port is always 53
HOSTS_FILE = "cluster.hosts"
RESOLV_CONF = "/etc/resolv.conf"
KINDS = ("services", "endpoints")
# A watch ends after this long and the feeder lists again: a missed or expired watch
# (410 Gone after a long pause) heals by itself, at the cost of one list per kind.
WATCH_SECONDS = 240
# Changes that arrive this close together are written as one file.
SETTLE_SECONDS = 0.05
RETRY_SECONDS = 2.0
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, order=True)
class Record:
    """One name and one address it resolves to."""

    name: str
    ip: str


# --------------------------------------------------------------------------- records (pure)


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def service_name(namespace: str, service: str, domain: str) -> str:
    return f"{service}.{namespace}.svc.{domain}"


def valid_name(name: str) -> bool:
    """A DNS name of lowercase labels: what the API server allows, and nothing that could
    break a hosts line (the objects come from anyone who may write Endpoints)."""
    labels = name.split(".")
    return len(name) <= 253 and all(_LABEL.match(label) for label in labels)


def valid_ip(ip: str) -> bool:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return False
    return True


def endpoint_addresses(
    endpoints: Mapping[str, Any] | None, publish_not_ready: bool
) -> Iterator[Mapping[str, Any]]:
    """The addresses of an Endpoints object: the ready ones, and the not-ready ones too
    when the Service publishes them (the endpoints controller already lists those as
    ready for such a Service; manual Endpoints may not)."""
    for subset in (endpoints or {}).get("subsets") or []:
        yield from subset.get("addresses") or []
        if publish_not_ready:
            yield from subset.get("notReadyAddresses") or []


def service_records(
    service: Mapping[str, Any], endpoints: Mapping[str, Any] | None, domain: str
) -> list[Record]:
    """The names one Service gives: its ClusterIP, or, headless, its endpoints' addresses
    and the hostnames of the Pods under it."""
    namespace, name = key_of(service)
    spec = service.get("spec") or {}
    fqdn = service_name(namespace, name, domain)
    if spec.get("type") == "ExternalName" or not valid_name(fqdn):
        return []
    cluster_ip = spec.get("clusterIP")
    if cluster_ip != "None":
        return [Record(fqdn, str(cluster_ip))] if valid_ip(str(cluster_ip)) else []
    found = []
    for address in endpoint_addresses(endpoints, bool(spec.get("publishNotReadyAddresses"))):
        ip = str(address.get("ip"))
        if not valid_ip(ip):
            continue
        found.append(Record(fqdn, ip))
        hostname = address.get("hostname")
        if isinstance(hostname, str) and _LABEL.match(hostname):
            if valid_name(pod := f"{hostname}.{fqdn}"):
                found.append(Record(pod, ip))
    return found


def records(
    services: Mapping[Key, Mapping[str, Any]],
    endpoints: Mapping[Key, Mapping[str, Any]],
    domain: str,
) -> list[Record]:
    """Every name the cluster's Services give, sorted, each pair once."""
    found: set[Record] = set()
    for key, service in services.items():
        found.update(service_records(service, endpoints.get(key), domain))
    return sorted(found)


def hosts_text(found: Iterable[Record]) -> str:
    """The hosts file dnsmasq reads: one line per address, its names after it.

    The most specific name comes first on its line, since dnsmasq answers a
    reverse lookup with the first: a gang member's address maps back to its
    own name, not to its Service's.
    """
    by_ip: dict[str, set[str]] = {}
    for record in found:
        by_ip.setdefault(record.ip, set()).add(record.name)
    lines = ["# Written by the local cluster's DNS feeder from the API server; do not edit."]
    for ip in sorted(by_ip, key=_ip_order):
        names = sorted(by_ip[ip], key=lambda n: (-n.count("."), n))
        lines.append(f"{ip} {' '.join(names)}")
    return "\n".join(lines) + "\n"


def _ip_order(ip: str) -> tuple[int, int]:
    address = ipaddress.ip_address(ip)
    return (address.version, int(address))


def apply_event(store: dict[Key, dict[str, Any]], kind: str, obj: dict[str, Any]) -> None:
    """One watch event (ADDED, MODIFIED, DELETED) applied to the objects seen so far."""
    if kind == "DELETED":
        store.pop(key_of(obj), None)
    elif kind in ("ADDED", "MODIFIED"):
        store[key_of(obj)] = obj


# --------------------------------------------------------------------------- dnsmasq


def dnsmasq_argv(
    binary: str,
    *,
    listen: str,
    port: int,
    hosts_dir: Path,
    domain: str,
    resolv_conf: str = RESOLV_CONF,
) -> list[str]:
    """dnsmasq as the cluster's DNS server, and nothing else (no DHCP, no /etc/hosts).

    It binds ``listen`` alone (``--bind-interfaces``), so it never takes port 53
    of another address from the machine's own resolver. ``--local`` keeps every
    name under the domain here; ``--domain-needed`` and ``--bogus-priv`` keep
    single labels and reverse lookups of private ranges from going upstream.
    It runs as ``nobody`` once bound.
    """
    return [
        binary,
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-hosts",
        f"--hostsdir={hosts_dir}",
        f"--listen-address={listen}",
        "--bind-interfaces",
        f"--port={port}",
        f"--local=/{domain}/",
        "--domain-needed",
        "--bogus-priv",
        f"--resolv-file={resolv_conf}",
        "--cache-size=1000",
        "--user=nobody",
        "--group=nogroup",
        "--pid-file=",
        "--log-facility=-",
    ]


def prepare_hosts_dir(hosts_dir: Path) -> None:
    """The folder dnsmasq reads, readable by ``nobody`` (dnsmasq drops root once bound)."""
    hosts_dir.mkdir(parents=True, exist_ok=True)
    hosts_dir.chmod(0o755)
    parent = hosts_dir.parent
    parent.chmod(parent.stat().st_mode | 0o011)  # traversable: the sockets keep their modes


def write_hosts(hosts_dir: Path, text: str) -> None:
    """Replace the hosts file in one step; dnsmasq skips the dot-file written first."""
    tmp = hosts_dir / f".{HOSTS_FILE}.tmp"
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, hosts_dir / HOSTS_FILE)


def upstreams(resolv_conf: str) -> list[str]:
    """The nameservers of a resolv.conf: where dnsmasq forwards every other name."""
    found = []
    for line in resolv_conf.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            found.append(parts[1])
    return found


def lookup(name: str, server: str, port: int = DNS_PORT, timeout: float = 2.0) -> list[str]:
    """The IPv4 addresses ``server`` gives for ``name`` (empty for NXDOMAIN or no data);
    raises `dns.exception.DNSException` when it does not answer."""
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = [server]
    resolver.port = port
    try:
        answer = resolver.resolve(name, "A", lifetime=timeout, search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    return sorted(str(rdata) for rdata in answer)


def answers(server: str, domain: str, port: int = DNS_PORT) -> bool:
    """``server`` answers for the cluster domain at all (NXDOMAIN is an answer)."""
    lookup(f"ready.{domain}", server, port, timeout=1.0)
    return True


def serves_cluster(cfg: LocalConfig) -> bool:
    """The whole chain works: the feeder wrote the `kubernetes` Service and dnsmasq
    answers with its ClusterIP."""
    name = service_name("default", "kubernetes", cfg.cluster_domain)
    return lookup(name, cfg.node_ip, timeout=1.0) == [cfg.service_ip]


def status_row(cfg: LocalConfig) -> dict[str, Any]:
    """`kinetic local status`'s row for the DNS server: what it answers right now."""
    name = service_name("default", "kubernetes", cfg.cluster_domain)
    try:
        got = lookup(name, cfg.node_ip, timeout=1.0)
        state = "serving" if got == [cfg.service_ip] else "stale"
        said = f"{name} -> {', '.join(got) or 'NXDOMAIN'}"
    except dns.exception.DNSException:
        state, said = "silent", f"no answer from {cfg.node_ip}:{DNS_PORT}"
    try:
        forward = ", ".join(upstreams(Path(RESOLV_CONF).read_text())) or "none"
    except OSError:
        forward = "none"
    return {
        "component": f"dns/{cfg.cluster_domain}",
        "state": state,
        "pid": None,
        "port": DNS_PORT,
        "log": f"{said}; other names -> {forward}",
    }


def feeder_argv(cfg: LocalConfig) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kinetic_dev.clusterdns",
        "--kubeconfig",
        str(cfg.component_kubeconfig("kube-proxy")),
        "--hosts-dir",
        str(cfg.dns_dir),
        "--domain",
        cfg.cluster_domain,
    ]


# --------------------------------------------------------------------------- the feeder


class Feeder:
    """Lists and watches Services and Endpoints; writes the hosts file when names change.

    One thread per kind keeps its objects (list, then watch until the watch
    ends, then list again); the main thread renders the file once both kinds
    have been listed, and again after every change that alters it.
    """

    def __init__(
        self,
        api: Any,
        hosts_dir: Path,
        domain: str,
        out: Callable[[str], None] = print,
    ) -> None:
        self.api = api
        self.hosts_dir = hosts_dir
        self.domain = domain
        self.out = out
        self.seen: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind in KINDS}
        self.listed: set[str] = set()
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.written: str | None = None

    def run(self) -> None:
        for kind in KINDS:
            threading.Thread(target=self.follow, args=(kind,), daemon=True, name=kind).start()
        while True:
            self.changed.wait()
            time.sleep(SETTLE_SECONDS)
            self.changed.clear()
            self.write_if_changed()

    def write_if_changed(self) -> bool:
        """Render the names seen so far; write them if they differ from the file's."""
        with self.lock:
            if len(self.listed) < len(KINDS):
                return False
            found = records(self.seen["services"], self.seen["endpoints"], self.domain)
            services = len(self.seen["services"])
        text = hosts_text(found)
        if text == self.written:
            return False
        write_hosts(self.hosts_dir, text)
        self.written = text
        self.out(f"{_now()} wrote {len(found)} names of {services} Services")
        return True

    def follow(self, kind: str) -> None:
        """List ``kind``, watch it until the watch ends, and again, for ever."""
        while True:
            try:
                self.list_and_watch(kind)
            except Exception as e:  # noqa: BLE001 - the API server away: try again shortly
                self.out(f"{_now()} {kind}: {type(e).__name__}: {e}; listing again")
                time.sleep(RETRY_SECONDS)

    def list_and_watch(self, kind: str) -> None:
        from kubernetes import watch

        lister = self._lister(kind)
        listed = json.loads(lister(_preload_content=False).data)
        with self.lock:
            self.seen[kind] = {key_of(o): o for o in listed.get("items") or []}
            self.listed.add(kind)
        self.changed.set()
        version = listed["metadata"]["resourceVersion"]
        # return_type "object": events stay JSON, as listed; no model is built per event.
        events = watch.Watch(return_type="object").stream(
            lister, resource_version=version, timeout_seconds=WATCH_SECONDS
        )
        for event in events:
            if event["type"] == "ERROR":
                return  # e.g. 410 Gone: list again
            with self.lock:
                apply_event(self.seen[kind], event["type"], event["raw_object"])
            self.changed.set()

    def _lister(self, kind: str) -> Callable[..., Any]:
        if kind == "services":
            return self.api.list_service_for_all_namespaces
        return self.api.list_endpoints_for_all_namespaces


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def main(argv: list[str] | None = None) -> None:
    """``python -m kinetic_dev.clusterdns``: the feeder, as `kinetic local up` starts it."""
    from kubernetes import client, config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--hosts-dir", required=True, type=Path)
    parser.add_argument("--domain", default="cluster.local")
    args = parser.parse_args(argv)
    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    api = client.CoreV1Api(client.ApiClient(configuration))
    args.hosts_dir.mkdir(parents=True, exist_ok=True)
    print(f"{_now()} feeding {args.hosts_dir} for {args.domain} from {configuration.host}")
    Feeder(api, args.hosts_dir, args.domain, out=lambda line: print(line, flush=True)).run()


if __name__ == "__main__":
    main()
