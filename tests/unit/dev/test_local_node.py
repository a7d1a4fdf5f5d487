"""The local node's configuration, as data: runtime, kubelet, kube-proxy, network rules, images."""

from __future__ import annotations

import io
import tarfile
import tomllib
from pathlib import Path

import pytest
from kinetic_dev import images, kubelet, network, pipconfig, runtime
from kinetic_dev.config import LocalConfig
from kinetic_dev.pki import PKI


@pytest.fixture
def cfg(tmp_path: Path) -> LocalConfig:
    return LocalConfig(state_dir=tmp_path / "state")


def test_the_node_lives_on_its_bridge_and_names_what_it_owns_by_state_dir(tmp_path: Path) -> None:
    one = LocalConfig(state_dir=tmp_path / "one", pod_cidr="10.244.0.0/24")
    two = LocalConfig(state_dir=tmp_path / "two", pod_cidr="10.244.0.0/24")
    assert one.node_ip == "10.244.0.1" and one.service_ip == "10.0.0.1"
    assert one.apiserver_url == "https://10.244.0.1:6443"
    assert one.storage_emulator_host == "http://10.244.0.1:4443"
    # Two clusters on one machine never share sockets, cgroups or iptables chains.
    assert one.tag != two.tag
    assert one.run_root != two.run_root and one.cgroup_root != two.cgroup_root
    assert network.guard_chain(one) != network.guard_chain(two)
    assert len(str(one.containerd_socket)) < 100  # unix socket paths are short
    assert len(network.guard_chain(one)) <= 28  # iptables' limit for a chain name


def test_containerd_clamps_oom_adjustments_and_keeps_everything_in_our_folders(
    cfg: LocalConfig,
) -> None:
    conf = tomllib.loads(runtime.config_toml(cfg, "/usr/lib/cni", "/usr/sbin/runc"))
    cri = conf["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # this VM refuses a negative oom_score_adj
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == runtime.PAUSE_IMAGE
    assert cri["cni"]["conf_dir"] == str(cfg.cni_dir / "net.d")
    assert cri["registry"]["config_path"] == str(runtime.registry_hosts_dir(cfg))
    assert conf["grpc"]["address"] == str(cfg.containerd_socket)
    assert conf["root"].startswith(str(cfg.state_dir)) and conf["state"].startswith(
        str(cfg.run_root)
    )
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False}


def test_docker_hub_names_resolve_at_the_local_registry_only(cfg: LocalConfig) -> None:
    hosts = tomllib.loads(runtime.docker_io_hosts(cfg))
    local = f"http://127.0.0.1:{cfg.ports.registry}"
    assert hosts["server"] == local  # no fallback to registry-1.docker.io
    assert hosts["host"][local]["capabilities"] == ["pull", "resolve"]


def test_the_kubelet_is_secured_fast_and_gives_pods_the_clusters_dns(cfg: LocalConfig) -> None:
    conf = kubelet.kubelet_config(cfg, PKI(cfg.pki_dir))
    assert conf["authentication"]["anonymous"]["enabled"] is False
    assert conf["authorization"]["mode"] == "Webhook" and conf["readOnlyPort"] == 0
    assert conf["address"] == cfg.node_ip and conf["healthzBindAddress"] == "127.0.0.1"
    # Pods ask the node's dnsmasq (clusterdns), which answers on the bridge's address.
    assert conf["clusterDNS"] == [cfg.node_ip] and conf["clusterDomain"] == "cluster.local"
    other = LocalConfig(state_dir=cfg.state_dir, cluster_domain="corp.internal")
    assert kubelet.kubelet_config(other, PKI(cfg.pki_dir))["clusterDomain"] == "corp.internal"


def test_a_kubelet_started_with_other_settings_is_seen_as_stale(cfg: LocalConfig) -> None:
    path = cfg.state_dir / "kubelet.yaml"
    conf = kubelet.kubelet_config(cfg, PKI(cfg.pki_dir))
    assert kubelet.changed(path, conf)  # never written: nothing runs with it
    kubelet.write(path, conf)
    assert not kubelet.changed(path, conf)
    # A kubelet from before cluster DNS: the machine's resolver in its Pods.
    kubelet.write(path, {**conf, "clusterDNS": ["10.255.255.53"]})
    assert kubelet.changed(path, conf)
    assert conf["kubeAPIQPS"] >= 50  # the default 5 would throttle Pod status writes
    assert conf["cgroupRoot"] == f"/{cfg.cgroup_root}"
    argv = kubelet.kubelet_argv("kubelet", cfg, Path("/x.yaml"))
    assert f"--container-runtime-endpoint=unix://{cfg.containerd_socket}" in argv
    assert f"--node-ip={cfg.node_ip}" in argv


def test_kube_proxy_opens_node_ports_only_on_the_bridge(cfg: LocalConfig) -> None:
    conf = kubelet.proxy_config(cfg)
    assert conf["mode"] == "iptables" and conf["clusterCIDR"] == cfg.pod_cidr
    assert conf["nodePortAddresses"] == [f"{cfg.node_ip}/32"]
    assert conf["healthzBindAddress"].startswith("127.0.0.1:")
    assert conf["conntrack"]["maxPerCore"] == 0  # leaves the machine's table alone


def test_cni_gives_each_pod_an_address_on_the_bridge(cfg: LocalConfig) -> None:
    (bridge,) = network.cni_config(cfg)["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == cfg.bridge
    assert bridge["isGateway"] is True and bridge["ipMasq"] is False  # one rule of ours
    assert bridge["ipam"]["ranges"] == [[{"subnet": cfg.pod_cidr, "gateway": cfg.node_ip}]]
    assert bridge["ipam"]["dataDir"].startswith(str(cfg.state_dir))


def test_the_bridge_has_a_fixed_unicast_local_address_of_its_own() -> None:
    mac = network.bridge_mac("kinetic0")
    first = int(mac.split(":")[0], 16)
    assert len(mac.split(":")) == 6 and all(len(part) == 2 for part in mac.split(":"))
    assert first & 0b01 == 0, "a multicast address cannot be a bridge's"
    assert first & 0b10, "locally administered: no vendor's address"
    assert network.bridge_mac("kinetic0") == mac  # the same every start
    assert network.bridge_mac("kinetic-test") != mac  # another cluster's bridge, another


def test_the_guard_rejects_the_service_range_before_anything_is_accepted(
    cfg: LocalConfig,
) -> None:
    rules = network.guard_rules(cfg)
    first = rules[0]
    assert first.chain == network.guard_chain(cfg)
    assert first.spec[:2] == ("-d", cfg.service_cidr) and "REJECT" in first.spec
    assert [r.spec[-1] for r in rules[1:]] == ["ACCEPT", "ACCEPT"]
    jumps = {(r.table, r.chain) for r in network.chains(cfg)}
    assert jumps == {("filter", "FORWARD"), ("filter", "OUTPUT"), ("nat", "POSTROUTING")}
    (masq,) = network.masq_rules(cfg)
    assert masq.spec == ("-s", cfg.pod_cidr, "!", "-d", cfg.pod_cidr, "-j", "MASQUERADE")
    assert first.argv("-C")[:5] == ["iptables", "-w", "-t", "filter", "-C"]


PEM_A = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"
PEM_B = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----"


def test_pip_settings_keep_what_a_pod_can_use() -> None:
    listed = "\n".join(
        [
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            "global.extra-index-url='file:///opt/pypi/simple https://mirror.example/simple'",
            "global.index-url='https://files.example/simple'",
            ":env:.index-url='https://env.example/simple'",
            ":env:.proxy='http://proxy.example:3128'",
            "global.trusted-host='mirror.example'",
        ]
    )
    conf = pipconfig.parse_config_list(listed)
    assert conf["index-url"] == "https://env.example/simple"  # the environment wins
    values = pipconfig.package_index(listed)
    assert values["indexUrl"] == "https://env.example/simple"
    assert values["extraIndexUrls"] == ["https://mirror.example/simple"]  # no host paths
    assert values["proxy"] == "http://proxy.example:3128"
    assert values["trustedHosts"] == ["mirror.example"]


def test_only_the_certificates_debian_does_not_ship_go_to_pods() -> None:
    bundle = f"{PEM_A}\n  {PEM_B}\n"
    assert pipconfig.certificates(bundle) == [PEM_A, PEM_B]
    assert pipconfig.extra_certificates(bundle, {PEM_A}) == [PEM_B]


def test_the_busybox_stand_in_is_busybox_and_its_applets(tmp_path: Path) -> None:
    binary = tmp_path / "busybox"
    binary.write_bytes(b"\x7fELF-not-really")
    tar = tarfile.open(fileobj=io.BytesIO(images.busybox_tar(binary, ["busybox", "sh", "wget"])))
    members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert "bin/wget" in members and "bin/busybox" in members
    assert members["tmp"].mode == 0o1777
    passwd = tar.extractfile("etc/passwd").read().decode()  # type: ignore[union-attr]
    assert passwd.startswith("root:x:0:0:")


def test_an_image_is_rebuilt_only_when_what_it_is_made_of_changes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    (src / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"cache")
    files = images.package_files(src)
    assert [f.name for f in files] == ["a.py"]  # caches do not count
    key = images.digest_files(files, src, "wheels-1")
    assert images.digest_files(files, src, "wheels-1") == key
    assert images.digest_files(files, src, "wheels-2") != key
    (src / "pkg" / "a.py").write_text("x = 2\n")
    assert images.digest_files(files, src, "wheels-1") != key


def test_the_python_stand_in_copies_an_interpreter_without_its_tests(tmp_path: Path) -> None:
    prefix = tmp_path / "py"
    lib = prefix / "lib" / "python3.12"
    for d in ("test", "json", "site-packages/pip", "site-packages/requests"):
        (lib / d).mkdir(parents=True)
    (lib / "json" / "__init__.py").write_text("")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "pip3").write_text(
        "#!/root/.pyenv/versions/3.12.1/bin/python3.12\nimport pip\n"
    )
    images.copy_python(prefix, tmp_path / "out", "3.12")
    out = tmp_path / "out" / "lib" / "python3.12"
    assert (out / "json" / "__init__.py").exists() and not (out / "test").exists()
    assert (out / "site-packages" / "pip").exists()
    assert not (out / "site-packages" / "requests").exists()  # the host's packages stay here
    assert (tmp_path / "out" / "bin" / "pip3").read_text().splitlines()[0] == (
        "#!/usr/local/bin/python3.12"
    )


SAVED = """# Generated by iptables-save
*filter
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
:SOMEONE-ELSE - [0:0]
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j SOMEONE-ELSE
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
COMMIT
"""


def test_stopping_the_node_removes_the_kubelets_and_kube_proxys_chains_only() -> None:
    commands = network.kube_chain_cleanup(SAVED)
    deletes = [c for c in commands if "-D" in c]
    assert ["iptables", "-w", "-t", "filter", "-D", "INPUT", "-j", "KUBE-FIREWALL"] in deletes
    portals = next(c for c in deletes if "KUBE-SERVICES" in c)
    assert "kubernetes service portals" in portals  # the comment, one argument, unquoted
    assert ["iptables", "-w", "-t", "nat", "-X", "KUBE-POSTROUTING"] in commands
    assert not any("SOMEONE-ELSE" in " ".join(c) for c in commands)
    # Rules go before the chains they jump to; chains are flushed before they are deleted.
    first_flush = next(i for i, c in enumerate(commands) if "-F" in c)
    assert all("-D" in c for c in commands[:first_flush])
    assert commands.index(
        ["iptables", "-w", "-t", "filter", "-F", "KUBE-FIREWALL"]
    ) < commands.index(["iptables", "-w", "-t", "filter", "-X", "KUBE-FIREWALL"])


def test_the_mounts_to_undo_include_the_kubelets_own_folder(tmp_path: Path) -> None:
    """The kubelet bind-mounts its root onto itself; cluster-down must undo that too."""
    state = tmp_path / "state"
    table = tmp_path / "mounts"
    table.write_text(
        f"/dev/vda {state}/kubelet ext4 rw 0 0\n"
        f"tmpfs {state}/kubelet/pods/x/volumes/token tmpfs rw 0 0\n"
        f"/dev/vda {state}/kubelet-other ext4 rw 0 0\n"
        "proc /proc proc rw 0 0\n"
    )
    points = runtime.mounts_under(state / "kubelet", table=str(table))
    assert points == [f"{state}/kubelet/pods/x/volumes/token", f"{state}/kubelet"]
