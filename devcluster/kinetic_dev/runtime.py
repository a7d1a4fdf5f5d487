"""The node's container runtime: a containerd of our own with its CRI plugin.

Our own instance (its socket, root and state under this cluster's folders), so
a Docker Engine or another containerd on the machine is neither used nor
disturbed, and `kinetic local down` can stop exactly the containers it ran.

Three settings are what this machine class needs:

- ``restrict_oom_score_adj``: the kubelet asks for a negative ``oom_score_adj``
  for pod sandboxes, which this VM refuses (runc then fails with "can't get
  final child's PID from pipe"); the CRI plugin clamps it instead.
- ``netns_mounts_under_state_dir``: pod network namespaces live in our state
  folder, so stopping the node can unmount them all.
- a registry host for ``docker.io`` (``certs.d/docker.io/hosts.toml``) that
  points at the local registry and nowhere else: images resolve offline, as
  they would from Docker Hub, and an image that exists nowhere fails to pull.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from kinetic_dev.config import LocalConfig

# The sandbox image: our pause program, served by the local registry.
PAUSE_IMAGE = "docker.io/library/kinetic-pause:3.4"


def config_toml(cfg: LocalConfig, cni_bin_dir: str, runc: str) -> str:
    """containerd's configuration (version 2) for the kubelet's CRI."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{cfg.containerd_dir / "root"}"
state = "{cfg.run_root / "containerd"}"
oom_score = 0

[grpc]
  address = "{cfg.containerd_socket}"

[debug]
  level = "warn"

[metrics]
  address = ""

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  max_container_log_line_size = 16384
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{cni_bin_dir}"
  conf_dir = "{cfg.cni_dir / "net.d"}"
  max_conf_num = 1

[{cri}.registry]
  config_path = "{registry_hosts_dir(cfg)}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{cfg.containerd_dir / "opt"}"
"""


def registry_hosts_dir(cfg: LocalConfig) -> Path:
    return cfg.containerd_dir / "certs.d"


def docker_io_hosts(cfg: LocalConfig) -> str:
    """Docker Hub's names resolve at the local registry only (no fallback upstream)."""
    local = f"http://127.0.0.1:{cfg.ports.registry}"
    return f"""server = "{local}"

[host."{local}"]
  capabilities = ["pull", "resolve"]
"""


def write_config(cfg: LocalConfig, cni_bin_dir: str, runc: str) -> Path:
    """Write config.toml and the registry host file; return the config's path."""
    cfg.containerd_dir.mkdir(parents=True, exist_ok=True)
    cfg.run_root.mkdir(parents=True, exist_ok=True)
    hosts = registry_hosts_dir(cfg) / "docker.io"
    hosts.mkdir(parents=True, exist_ok=True)
    (hosts / "hosts.toml").write_text(docker_io_hosts(cfg))
    path = cfg.containerd_dir / "config.toml"
    path.write_text(config_toml(cfg, cni_bin_dir, runc))
    return path


def ctr_command(
    cfg: LocalConfig, binary: str, *args: str, namespace: str | None = "k8s.io"
) -> list[str]:
    """A ``ctr`` command line for our containerd (the kubelet's images and containers
    live in its ``k8s.io`` namespace)."""
    ns = ["-n", namespace] if namespace else []
    return [binary, "--address", str(cfg.containerd_socket), *ns, *args]


def argv(containerd: str, config: Path) -> list[str]:
    return [containerd, "--config", str(config)]


def ready(cfg: LocalConfig, binary: str) -> bool:
    """The CRI plugin answers (``ctr plugins`` lists it as ok)."""
    proc = subprocess.run(
        ctr_command(cfg, binary, "plugins", "ls", namespace=None),
        capture_output=True,
        text=True,
        timeout=10,
    )
    return proc.returncode == 0 and any(
        "io.containerd.grpc.v1" in line and "cri" in line and line.rstrip().endswith("ok")
        for line in proc.stdout.splitlines()
    )


def ensure_cgroup_root(cfg: LocalConfig) -> None:
    """Make ``/<cfg.cgroup_root>`` in every cgroup hierarchy: the kubelet's ``cgroupRoot`` must
    exist before it starts. cgroup v1's cpuset needs its cpus and mems filled in before a
    process may join, so they are copied from the parent."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # unified (v2)
        (base / cfg.cgroup_root).mkdir(exist_ok=True)
        return
    for hierarchy in sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink()):
        d = hierarchy / cfg.cgroup_root
        try:
            d.mkdir(exist_ok=True)
        except OSError:
            continue  # a read-only or unusable hierarchy: the kubelet will say so
        for name in ("cpuset.cpus", "cpuset.mems"):
            mine, parents = d / name, hierarchy / name
            if parents.exists() and not mine.read_text().strip():
                mine.write_text(parents.read_text())


# ----------------------------------------------------------------------------- teardown


def cgroup_dirs(cfg: LocalConfig) -> list[Path]:
    """Our pods' cgroup folders, one per mounted hierarchy (v1) or the unified one."""
    base = Path("/sys/fs/cgroup")
    found = []
    for hierarchy in (
        [base, *sorted(p for p in base.iterdir() if p.is_dir())] if base.exists() else []
    ):
        d = hierarchy / cfg.cgroup_root
        if d.is_dir():
            found.append(d)
    return found


def pod_pids(cfg: LocalConfig) -> set[int]:
    """Every process in a pod's cgroup: the containers and their sandboxes."""
    pids: set[int] = set()
    for root in cgroup_dirs(cfg):
        for procs in root.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except (OSError, ValueError):
                continue
    return pids


def shim_pids(cfg: LocalConfig) -> set[int]:
    """containerd-shim processes serving our containerd (they outlive it)."""
    needle = str(cfg.containerd_socket).encode()
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and needle in cmdline:
            found.add(int(proc.name))
    return found


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def kill_pods(cfg: LocalConfig, timeout: float = 10.0) -> int:
    """SIGKILL every pod process, then the shims; wait until they are gone."""
    killed = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = pod_pids(cfg) | shim_pids(cfg)
        pids.discard(os.getpid())
        if not pids:
            break
        killed = max(killed, len(pids))
        kill_all(pids)
        time.sleep(0.2)
    return killed


def mounts_under(*roots: Path, table: str = "/proc/self/mounts") -> list[str]:
    """Mount points at or under any of ``roots``, deepest first (so unmounting works in
    order). The roots themselves count: the kubelet bind-mounts its root folder onto
    itself (to make it shared) where the folder's mount is not shared already."""
    bases = [str(r.resolve()) for r in roots]
    points = []
    with open(table) as f:
        for line in f:
            point = line.split()[1].encode().decode("unicode_escape")
            if any(point == b or point.startswith(b + "/") for b in bases):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(*roots: Path) -> int:
    """Lazy-unmount everything the runtime and the kubelet mounted under ``roots``."""
    count = 0
    for _ in range(5):  # a mount may hide another under the same point
        points = mounts_under(*roots)
        if not points:
            break
        for point in points:
            if subprocess.run(["umount", "-l", point], capture_output=True).returncode == 0:
                count += 1
    return count


def remove_cgroups(cfg: LocalConfig) -> None:
    """Remove our (now empty) cgroup folders, leaves first."""
    for root in cgroup_dirs(cfg):
        for d in sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            try:
                d.rmdir()
            except OSError:
                pass
        try:
            root.rmdir()
        except OSError:
            pass
