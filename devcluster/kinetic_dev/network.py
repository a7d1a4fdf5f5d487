"""The node's pod network: a bridge, its CNI configuration and the firewall rules around it.

Every pod gets an address on the bridge (``KINETIC_POD_CIDR``) from CNI's
``bridge`` and ``host-local`` plugins (Debian's containernetworking-plugins);
the bridge's own address is the node's. kube-proxy turns ClusterIPs into pod
or node addresses with iptables.

Two rules are ours, installed before the first pod starts and removed by
`kinetic local down`:

- **the guard**: a packet still addressed to the service range after NAT was
  not translated by kube-proxy (no such Service, no endpoints yet). It is
  rejected here, never routed out of the machine: the service range is a
  private range that may exist on the real network too.
- **masquerading** of pod traffic that leaves the pod range, so a pod reaches
  the package index the way this machine does.

The bridge has an address of its own (`bridge_mac`). Left to itself, a Linux
bridge takes the lowest address among its ports, so it changed each time a pod
came or went; every running pod then held a stale neighbour entry for the
gateway, and its connections to the node (storage, DNS) stalled for seconds
until it asked again (a unit's payload download took 13.5 s).

The rule sets are pure data (tested as tables); `apply` and `remove` run them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kinetic_dev.config import LocalConfig
from kinetic_dev.procs import ClusterError

NETWORK_NAME = "kinetic"
SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    # Pod-to-Service-to-pod on one bridge: replies must pass iptables to be un-NATed.
    "net/bridge/bridge-nf-call-iptables": "1",
}


@dataclass(frozen=True)
class Rule:
    """One iptables rule: the table, the chain it sits in, its match and target."""

    table: str
    chain: str
    spec: tuple[str, ...]

    def argv(self, action: str) -> list[str]:
        """``-C`` (check), ``-A`` (append), ``-I`` (insert first) or ``-D`` (delete)."""
        return ["iptables", "-w", "-t", self.table, action, self.chain, *self.spec]


def cni_config(cfg: LocalConfig) -> dict:
    """The conflist containerd's CRI hands to CNI for every pod sandbox."""
    net = ipaddress.ip_network(cfg.pod_cidr)
    return {
        "cniVersion": "0.4.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": cfg.bridge,
                "isGateway": True,
                # Masquerading is one rule of ours (masq_rules), not a chain per pod
                # that a killed runtime would leave behind.
                "ipMasq": False,
                # A pod may reach itself through a Service.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(net), "gateway": cfg.node_ip}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(cfg.cni_dir / "ipam"),
                },
            }
        ],
    }


def guard_chain(cfg: LocalConfig) -> str:
    return f"KINETIC-GUARD-{cfg.tag}"


def masq_chain(cfg: LocalConfig) -> str:
    return f"KINETIC-MASQ-{cfg.tag}"


def chains(cfg: LocalConfig) -> list[Rule]:
    """The jumps into our chains, each first in its built-in chain."""
    return [
        Rule("filter", "FORWARD", ("-j", guard_chain(cfg))),
        Rule("filter", "OUTPUT", ("-j", guard_chain(cfg))),
        Rule("nat", "POSTROUTING", ("-j", masq_chain(cfg))),
    ]


def guard_rules(cfg: LocalConfig) -> list[Rule]:
    """Reject what kube-proxy did not translate; let the bridge's traffic through.

    The ACCEPTs matter on machines whose FORWARD policy is DROP (a Docker
    Engine with its iptables rules does that): pods would reach nothing else.
    """
    comment = ("-m", "comment", "--comment", "kinetic: untranslated service address")
    chain = guard_chain(cfg)
    return [
        Rule(
            "filter",
            chain,
            (
                "-d",
                cfg.service_cidr,
                *comment,
                "-j",
                "REJECT",
                "--reject-with",
                "icmp-net-unreachable",
            ),
        ),
        Rule("filter", chain, ("-i", cfg.bridge, "-j", "ACCEPT")),
        Rule("filter", chain, ("-o", cfg.bridge, "-j", "ACCEPT")),
    ]


def masq_rules(cfg: LocalConfig) -> list[Rule]:
    return [
        Rule(
            "nat",
            masq_chain(cfg),
            ("-s", cfg.pod_cidr, "!", "-d", cfg.pod_cidr, "-j", "MASQUERADE"),
        )
    ]


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _ensure_chain(table: str, chain: str) -> None:
    if _run(["iptables", "-w", "-t", table, "-L", chain, "-n"], check=False).returncode != 0:
        _run(["iptables", "-w", "-t", table, "-N", chain])


def _ensure(rule: Rule, first: bool = False) -> None:
    if _run(rule.argv("-C"), check=False).returncode != 0:
        _run(rule.argv("-I") if first else rule.argv("-A"))


def bridge_mac(bridge: str) -> str:
    """The bridge's own hardware address: fixed, so pods coming and going never change it.

    Derived from the bridge's name (one machine's clusters under other bridge names get
    others), unicast and locally administered (first byte ``x2``), as an address no
    vendor assigns."""
    digest = hashlib.sha256(f"kinetic-bridge:{bridge}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def _ensure_bridge(cfg: LocalConfig) -> None:
    prefix = ipaddress.ip_network(cfg.pod_cidr).prefixlen
    if _run(["ip", "link", "show", cfg.bridge], check=False).returncode != 0:
        _run(["ip", "link", "add", "name", cfg.bridge, "type", "bridge"])
    # Set, the address stays: the bridge no longer follows its ports' lowest one.
    _run(["ip", "link", "set", "dev", cfg.bridge, "address", bridge_mac(cfg.bridge)])
    addrs = _run(["ip", "-o", "-4", "addr", "show", "dev", cfg.bridge]).stdout
    if f" {cfg.node_ip}/" not in addrs:
        _run(["ip", "addr", "add", f"{cfg.node_ip}/{prefix}", "dev", cfg.bridge])
    _run(["ip", "link", "set", cfg.bridge, "up"])


def _set_sysctls() -> None:
    for key, value in SYSCTLS.items():
        path = Path("/proc/sys") / key
        if not path.exists() and key.startswith("net/bridge"):
            _run(["modprobe", "br_netfilter"], check=False)
        try:
            path.write_text(value)
        except OSError as e:
            raise ClusterError(f"cannot set {key.replace('/', '.')}={value}: {e}") from e


def apply(cfg: LocalConfig) -> None:
    """Bridge, sysctls, CNI configuration and our rules; idempotent. Needs root."""
    _ensure_bridge(cfg)
    _set_sysctls()
    conf_dir = cfg.cni_dir / "net.d"
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "10-kinetic.conflist").write_text(json.dumps(cni_config(cfg), indent=2) + "\n")
    for table, chain in (("filter", guard_chain(cfg)), ("nat", masq_chain(cfg))):
        _ensure_chain(table, chain)
    for rule in guard_rules(cfg) + masq_rules(cfg):
        _ensure(rule)
    for rule in chains(cfg):
        _ensure(rule, first=True)


KUBE_TABLES = ("filter", "nat", "mangle")


def kube_chain_cleanup(saved: str) -> list[list[str]]:
    """The iptables commands that remove what a kubelet and kube-proxy left in a ruleset
    (``iptables-save`` output): every rule of a built-in chain that jumps to a ``KUBE-*``
    chain, then every ``KUBE-*`` chain (flushed first, since they refer to each other)."""
    commands: list[list[str]] = []
    chains: list[tuple[str, str]] = []
    table = ""
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif table in KUBE_TABLES and line.startswith(":KUBE-"):
            chains.append((table, line[1:].split()[0]))
        elif table in KUBE_TABLES and line.startswith("-A "):
            parts = shlex.split(line)  # comments are quoted
            chain, target = parts[1], parts[parts.index("-j") + 1] if "-j" in parts else ""
            if not chain.startswith("KUBE-") and target.startswith("KUBE-"):
                commands.append(["iptables", "-w", "-t", table, "-D", *parts[1:]])
    commands += [["iptables", "-w", "-t", t, "-F", c] for t, c in chains]
    commands += [["iptables", "-w", "-t", t, "-X", c] for t, c in chains]
    return commands


def remove_kube_chains() -> int:
    """Remove the kubelet's and kube-proxy's iptables chains (after both have stopped)."""
    saved = _run(["iptables-save"], check=False).stdout
    done = 0
    for argv in kube_chain_cleanup(saved):
        if _run(argv, check=False).returncode == 0 and "-X" in argv:
            done += 1
    return done


def remove(cfg: LocalConfig) -> list[str]:
    """Undo `apply`: our jumps, chains and the bridge. Returns what it removed."""
    removed = []
    for rule in chains(cfg):
        while _run(rule.argv("-D"), check=False).returncode == 0:
            removed.append(f"iptables {rule.table}/{rule.chain} -j {rule.spec[-1]}")
    for table, chain in (("filter", guard_chain(cfg)), ("nat", masq_chain(cfg))):
        if _run(["iptables", "-w", "-t", table, "-F", chain], check=False).returncode == 0:
            _run(["iptables", "-w", "-t", table, "-X", chain], check=False)
            removed.append(f"iptables chain {table}/{chain}")
    if _run(["ip", "link", "del", cfg.bridge], check=False).returncode == 0:
        removed.append(f"bridge {cfg.bridge}")
    return removed
