"""`kinetic local up|down|status`: orchestrate the local cluster.

Order matters only where one component needs another to answer: the pod
network (before any pod can start), then etcd, storage, the registry and the
runtimes, then the images, then the API server, then everything that talks to
it. Each process is identified by its pid file, so `up` can tell "already
running" from "half up" from "someone else's process on my port", and `down`
stops exactly what `up` started — and then the containers, mounts, cgroups and
iptables rules the node made.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetic_dev import binaries, clusterdns, engine, gcs, images, kubelet, network, runtime
from kinetic_dev import operator as kinetic_operator
from kinetic_dev.config import LocalConfig, _find_repo_root
from kinetic_dev.pki import PKI, kubeconfig_yaml
from kinetic_dev.procs import (
    ClusterError,
    port_in_use,
    port_owner,
    read_live_pid,
    spawn,
    stop_pid,
    wait_until,
)

KCM_CONTROLLERS = (
    "job,garbagecollector,namespace,serviceaccount,serviceaccount-token,ttl-after-finished,"
    "deployment,replicaset,podgc,cronjob,endpoint,endpointslice,resourcequota,disruption,"
    "statefulset,daemonset,csrapproving,csrsigning,root-ca-cert-publisher,nodelifecycle"
)
FEATURE_GATES = "TTLAfterFinished=true"
# What the API server audits: who created or deleted which Pod, and who wrote the
# operator's leader Lease, with the caller's address (`sourceIPs`: the operator
# replica's Pod IP). Fault tests read it to show that a replica that lost the Lease
# wrote nothing after; everything else goes unrecorded, to keep the log small.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [pods]}]
    verbs: [create, delete]
  - level: Metadata
    resources: [{group: coordination.k8s.io, resources: [leases]}]
    namespaces: [kinetic-system]
    verbs: [create, update, patch]
  - level: None
"""
API_QPS = ("--kube-api-qps=200", "--kube-api-burst=300")


@dataclass
class Component:
    """One background process: how to start it and how to tell it is ready."""

    name: str
    port: int | None  # the port it listens on, checked before start (None: a socket)
    argv: Callable[[], list[str]]
    ready: Callable[[], bool]
    timeout: float
    env_var: str  # the variable that overrides its port, for the "port in use" message
    env: Callable[[dict[str, str]], dict[str, str]] | None = None  # adjusts the shared env
    more_ports: tuple[tuple[int, str], ...] = ()  # other (port, overriding variable) it listens on
    host: str = "127.0.0.1"  # the address its ports are checked on
    # True when the running process was started with settings that have changed since:
    # `up` restarts it (the kubelet, when its configuration file would differ).
    stale: Callable[[], bool] | None = None


class Cluster:
    def __init__(self, cfg: LocalConfig | None = None):
        self.cfg = cfg or LocalConfig()
        self.pki = PKI(self.cfg.pki_dir)
        self.repo_root = _find_repo_root(self.cfg.state_dir.parent) or _find_repo_root(
            Path(__file__).resolve()
        )
        self._bins: dict[str, str] = {}

    # ---- helpers ---------------------------------------------------------------------------
    def pid_file(self, name: str) -> Path:
        return self.cfg.run_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.cfg.logs_dir / f"{name}.log"

    def _admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.pki.crt("admin")), str(self.pki.key("admin")))
        return ctx

    def api_get(self, path: str, timeout: float = 3) -> dict:
        req = urllib.request.Request(self.cfg.apiserver_url + path)
        with urllib.request.urlopen(req, context=self._admin_ssl(), timeout=timeout) as r:
            body = r.read()
        try:
            return json.loads(body)
        except ValueError:
            return {"raw": body.decode(errors="replace")}

    def _https_ok(self, port: int, path: str, host: str | None = None) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        url = f"https://{host or self.cfg.node_ip}:{port}{path}"
        with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
            return r.status == 200

    def _http_ok(self, url: str) -> bool:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200

    def component_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.cfg.env())
        return env

    # ---- component definitions ---------------------------------------------------------------
    def components(self) -> list[Component]:
        c, p, pki = self.cfg, self.cfg.ports, self.pki
        b = self._bins

        def etcd() -> list[str]:
            return [
                b["etcd"],
                "--name",
                "kinetic",
                "--data-dir",
                str(c.etcd_dir),
                "--listen-client-urls",
                f"http://127.0.0.1:{p.etcd_client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{p.etcd_client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{p.etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{p.etcd_peer}",
                "--initial-cluster",
                f"kinetic=http://127.0.0.1:{p.etcd_peer}",
                "--listen-metrics-urls",
                "",
                "--log-level",
                "warn",
                "--logger",
                "zap",
                "--quota-backend-bytes",
                str(4 * 1024**3),
            ]

        def apiserver() -> list[str]:
            return [
                b["kube-apiserver"],
                f"--etcd-servers=http://127.0.0.1:{p.etcd_client}",
                # The node's address: pods reach it there (the `kubernetes` Service
                # points at it), and nothing listens on the machine's real interfaces.
                f"--bind-address={c.node_ip}",
                f"--advertise-address={c.node_ip}",
                f"--secure-port={p.apiserver}",
                "--insecure-port=0",
                f"--tls-cert-file={pki.crt('apiserver')}",
                f"--tls-private-key-file={pki.key('apiserver')}",
                f"--client-ca-file={pki.ca_crt}",
                f"--service-cluster-ip-range={c.service_cidr}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--kubelet-client-certificate={pki.crt('apiserver-kubelet-client')}",
                f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
                f"--kubelet-certificate-authority={pki.ca_crt}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--feature-gates={FEATURE_GATES}",
                "--allow-privileged=true",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
                "--profiling=false",
                f"--audit-policy-file={c.run_dir / 'audit-policy.yaml'}",
                f"--audit-log-path={c.audit_log}",
                "--audit-log-maxsize=200",
                "--audit-log-maxbackup=1",
                "--v=1",
            ]

        def kcm() -> list[str]:
            kc = c.component_kubeconfig("controller-manager")
            return [
                b["kube-controller-manager"],
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                "--port=0",
                f"--secure-port={p.controller_manager}",
                f"--tls-cert-file={pki.crt('controller-manager-serving')}",
                f"--tls-private-key-file={pki.key('controller-manager-serving')}",
                "--leader-elect=false",
                f"--controllers={KCM_CONTROLLERS}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_crt}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={pki.ca_crt}",
                f"--cluster-signing-key-file={pki.key('ca')}",
                f"--feature-gates={FEATURE_GATES}",
                *API_QPS,
                "--concurrent-gc-syncs=20",
                "--profiling=false",
                "--v=1",
            ]

        def scheduler() -> list[str]:
            kc = c.component_kubeconfig("scheduler")
            return [
                b["kube-scheduler"],
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                "--port=0",
                f"--secure-port={p.scheduler}",
                f"--tls-cert-file={pki.crt('scheduler-serving')}",
                f"--tls-private-key-file={pki.key('scheduler-serving')}",
                "--leader-elect=false",
                *API_QPS,
                "--profiling=false",
                "--v=1",
            ]

        def containerd() -> list[str]:
            config = runtime.write_config(c, str(binaries.CNI_DIR), b["runc"])
            return runtime.argv(b["containerd"], config)

        def kubelet_argv() -> list[str]:
            runtime.ensure_cgroup_root(c)
            config = kubelet.write(kubelet_file, kubelet.kubelet_config(c, pki))
            return kubelet.kubelet_argv(b["kubelet"], c, config)

        kubelet_file = c.state_dir / "kubelet.yaml"

        def proxy_argv() -> list[str]:
            config = kubelet.write(c.state_dir / "kube-proxy.yaml", kubelet.proxy_config(c))
            return kubelet.proxy_argv(b["kube-proxy"], config)

        def gcs_argv() -> list[str]:
            return gcs.argv(b["fake-gcs-server"], c)

        def dnsmasq_argv() -> list[str]:
            clusterdns.prepare_hosts_dir(c.dns_dir)
            return clusterdns.dnsmasq_argv(
                b["dnsmasq"],
                listen=c.node_ip,
                port=clusterdns.DNS_PORT,
                hosts_dir=c.dns_dir,
                domain=c.cluster_domain,
            )

        return [
            Component(
                "etcd",
                p.etcd_client,
                etcd,
                lambda: self._http_ok(f"http://127.0.0.1:{p.etcd_client}/health"),
                30,
                "KINETIC_ETCD_PORT",
            ),
            Component(
                "fake-gcs-server", p.gcs, gcs_argv, lambda: gcs.healthy(c), 30, "KINETIC_GCS_PORT"
            ),
            Component(
                "registry",
                p.registry,
                lambda: engine.registry_argv(b["docker-registry"], c),
                lambda: engine.registry_ready(c),
                30,
                "KINETIC_REGISTRY_PORT",
            ),
            Component(
                "dockerd",
                None,
                lambda: engine.dockerd_argv(b["dockerd"], c),
                lambda: engine.dockerd_ready(c),
                60,
                "",
            ),
            Component(
                "containerd",
                None,
                containerd,
                lambda: runtime.ready(c, b["ctr"]),
                60,
                "",
            ),
            Component(
                "dnsmasq",
                clusterdns.DNS_PORT,
                dnsmasq_argv,
                lambda: clusterdns.answers(c.node_ip, c.cluster_domain),
                30,
                "",
                host=c.node_ip,
            ),
            Component(
                "kube-apiserver",
                p.apiserver,
                apiserver,
                lambda: self._https_ok(p.apiserver, "/readyz"),
                90,
                "KINETIC_APISERVER_PORT",
            ),
            Component(
                "kube-controller-manager",
                p.controller_manager,
                kcm,
                lambda: self._https_ok(p.controller_manager, "/healthz", "127.0.0.1"),
                60,
                "KINETIC_KCM_PORT",
            ),
            Component(
                "kube-scheduler",
                p.scheduler,
                scheduler,
                lambda: self._https_ok(p.scheduler, "/healthz", "127.0.0.1"),
                60,
                "KINETIC_SCHEDULER_PORT",
            ),
            Component(
                "kube-proxy",
                p.proxy_healthz,
                proxy_argv,
                lambda: self._http_ok(f"http://127.0.0.1:{p.proxy_healthz}/healthz"),
                60,
                "KINETIC_PROXY_HEALTHZ_PORT",
            ),
            Component(
                "kubelet",
                p.node,
                kubelet_argv,
                self.node_ready,
                120,
                "KINETIC_NODE_PORT",
                stale=lambda: kubelet.changed(kubelet_file, kubelet.kubelet_config(c, pki)),
            ),
            Component(
                "dns-feeder",
                None,
                lambda: clusterdns.feeder_argv(c),
                lambda: clusterdns.serves_cluster(c),
                60,
                "",
            ),
        ]

    def operator_status(self) -> dict:
        """The operator's row in `status`: its Deployment's Pod, read from the API."""
        row: dict[str, Any] = {
            "component": "operator",
            "state": "unknown",
            "pid": None,
            "port": None,
            "log": f"kubectl -n {kinetic_operator.NAMESPACE} logs "
            f"deploy/{kinetic_operator.DEPLOYMENT}",
        }
        try:
            pod = kinetic_operator.operator_pod(self.cfg)
        except Exception:  # noqa: BLE001 - the API server is down: say so, do not fail
            return row
        if pod is None:
            row["state"] = "stopped"
        else:
            row["state"] = "running" if kinetic_operator.pod_ready(pod) else "starting"
            row["pid"] = kinetic_operator.container_pid(self.cfg, pod)
        return row

    def ensure_operator(self, started: list[str], out: Callable[[str], None]) -> None:
        """Wait for the chart's operator Pod to be Ready.

        A Pod whose container is crash-looping is replaced at once instead of
        waiting out the kubelet's back-off.
        """
        c = self.cfg
        what = (
            f"the operator's Pod to be Ready (kubectl -n {kinetic_operator.NAMESPACE} "
            f"describe pods; logs deploy/{kinetic_operator.DEPLOYMENT}"
        )
        try:
            wait_until(lambda: kinetic_operator.ready(c), 5, what + ")")
        except ClusterError:
            if kinetic_operator.stuck(c):
                out("the operator's container is not running; replacing its Pod")
                kinetic_operator.restart(c)
            started.append("operator")
            wait_until(
                lambda: kinetic_operator.ready(c), 240, what, self.log_file("kubelet"), interval=0.5
            )

    # ---- readiness beyond "the process answers" -----------------------------------------------
    def node_ready(self) -> bool:
        """The kubelet answers /healthz and its Node is Ready with no not-ready taint."""
        self._http_ok(f"http://127.0.0.1:{self.cfg.ports.kubelet_healthz}/healthz")
        node = self.api_get(f"/api/v1/nodes/{self.cfg.node_name}")
        return node_is_ready(node)

    def default_sa_ready(self) -> bool:
        sa = self.api_get("/api/v1/namespaces/default/serviceaccounts/default")
        # 1.20 admission refuses pods until the SA's token secret exists.
        return bool(sa.get("secrets"))

    # ---- files ---------------------------------------------------------------------------------
    def write_kubeconfigs(self) -> None:
        c, pki = self.cfg, self.pki
        c.kubeconfig.write_text(
            kubeconfig_yaml(
                c.apiserver_url, pki.ca_crt, pki.crt("admin"), pki.key("admin"), "admin"
            )
        )
        os.chmod(c.kubeconfig, 0o600)
        for comp, cert in (
            ("controller-manager", "controller-manager"),
            ("scheduler", "scheduler"),
            ("node", "node"),
            ("kube-proxy", "kube-proxy"),
        ):
            path = c.component_kubeconfig(comp)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                kubeconfig_yaml(c.apiserver_url, pki.ca_crt, pki.crt(cert), pki.key(cert), comp)
            )

    def write_env(self) -> None:
        lines = ["# Written by `kinetic local up`; source it: . .local/env"]
        lines += [f"export {k}={v}" for k, v in self.cfg.env().items()]
        self.cfg.env_file.write_text("\n".join(lines) + "\n")

    # ---- commands --------------------------------------------------------------------------------
    def _resolve_binaries(self) -> None:
        self._bins["etcd"] = binaries.find_etcd()
        binaries.find_kubectl()
        self._bins["fake-gcs-server"] = binaries.find_fake_gcs_server()
        self._bins.update(binaries.find_kube_binaries(self.repo_root))
        self._bins.update(binaries.find_runtime())

    def _check_port(self, comp: Component) -> None:
        ports = [(comp.port, comp.env_var)] if comp.port else []
        for port, env_var in (*ports, *comp.more_ports):
            if port_in_use(port, comp.host):
                owner = port_owner(port)
                choose = f", or choose another port with {env_var}=<port>" if env_var else ""
                raise ClusterError(
                    f"port {port} needed by {comp.name} is already in use by another process "
                    f"on {comp.host}{': ' + owner if owner else ''}; stop it{choose}"
                )

    def up(self, out: Callable[[str], None] = print) -> float:
        """Start whatever is not running; return the seconds it took."""
        t0 = time.monotonic()
        c = self.cfg
        if os.geteuid() != 0:
            raise ClusterError(
                "the local node runs containers (containerd, a kubelet, iptables rules): "
                "run `kinetic local up` as root, e.g. sudo -E .venv/bin/kinetic local up"
            )
        for d in (c.state_dir, c.logs_dir, c.run_dir, c.gcs_dir, c.run_root):
            d.mkdir(parents=True, exist_ok=True)
        self._resolve_binaries()
        comps = {comp.name: comp for comp in self.components()}
        if self.pki.ensure(c.node_name, c.node_ip, c.service_ip):
            # A new CA means every running component holds stale certs.
            for comp in reversed(comps.values()):
                pid = read_live_pid(self.pid_file(comp.name))
                if pid:
                    stop_pid(pid)
        self.write_kubeconfigs()
        self.write_env()
        (c.run_dir / "audit-policy.yaml").write_text(AUDIT_POLICY)

        started: list[str] = []
        # The pod network and its guard exist before any pod can start.
        network.apply(c)
        self._start_wave(
            [
                comps[n]
                for n in ("etcd", "fake-gcs-server", "registry", "dockerd", "containerd", "dnsmasq")
            ],
            started,
            out,
        )
        built = None
        if self.repo_root is not None:
            built = images.Images(c, self.repo_root, self._bins, out).ensure_all()
        self._start_wave([comps["kube-apiserver"]], started, out)
        self._start_wave(
            [
                comps[n]
                for n in (
                    "kube-controller-manager",
                    "kube-scheduler",
                    "kube-proxy",
                    "kubelet",
                    "dns-feeder",
                )
            ],
            started,
            out,
        )
        gcs.ensure_bucket(c)
        wait_until(
            self.default_sa_ready,
            60,
            "the default ServiceAccount and its token (kube-controller-manager)",
            self.log_file("kube-controller-manager"),
        )
        if built is not None and kinetic_operator.chart_dir(self.repo_root).exists():  # type: ignore[arg-type]
            images.prepull(c, self._bins["ctr"], built, out)
            if kinetic_operator.install_chart(c, self.repo_root, built):  # type: ignore[arg-type]
                started.append("helm chart")
            self.ensure_operator(started, out)
        else:
            out("no Helm chart next to this install: the operator was not started")
        elapsed = time.monotonic() - t0
        if started:
            out(f"kinetic local cluster up in {elapsed:.1f}s (started: {', '.join(started)})")
        else:
            out(f"kinetic local cluster already up ({elapsed:.1f}s check)")
        out(f"  API server   {c.apiserver_url}   node {c.node_name} Ready ({c.node_ip})")
        out(f"  gs:// root   {c.storage_root} at {c.storage_emulator_host}")
        out(f"  cluster DNS  {c.cluster_domain} at {c.node_ip}:{clusterdns.DNS_PORT} (dnsmasq)")
        if built is not None:
            out(f"  images       {built.operator_image}, {built.runner_image}")
        out(f"  logs         {c.logs_dir}/")
        out(f"  environment  . {c.env_file}   (KUBECONFIG={c.kubeconfig})")
        return elapsed

    def build_images(self, out: Callable[[str], None] = print) -> images.Built:
        """`make images`: the registry and the build engine, then every image (only what
        changed is rebuilt); nothing of the cluster itself is started."""
        if os.geteuid() != 0:
            raise ClusterError("building the images starts a Docker Engine: run as root")
        if self.repo_root is None:
            raise ClusterError("the images are built from a checkout of the repository")
        c = self.cfg
        for d in (c.state_dir, c.logs_dir, c.run_dir, c.run_root):
            d.mkdir(parents=True, exist_ok=True)
        self._resolve_binaries()
        comps = {comp.name: comp for comp in self.components()}
        self._start_wave([comps["registry"], comps["dockerd"]], [], out)
        return images.Images(c, self.repo_root, self._bins, out).ensure_all()

    def start_component(self, name: str, out: Callable[[str], None] = print) -> bool:
        """Start one component (e.g. ``kube-apiserver``) if it is not running; wait until ready.

        The smallest restart there is: nothing else is checked or touched, so a
        fault test can bring back exactly what it killed and then watch the rest
        (node, operator, controllers) recover on their own. Returns whether it
        had to start the process.
        """
        self._resolve_binaries()
        comps = {comp.name: comp for comp in self.components()}
        if name not in comps:
            raise ClusterError(
                f"no local cluster component named {name!r}; one of: {', '.join(comps)}"
            )
        started: list[str] = []
        self._start_wave([comps[name]], started, out)
        return bool(started)

    def _start_wave(
        self, wave: list[Component], started: list[str], out: Callable[[str], None]
    ) -> None:
        """Start every component of the wave that is not running and ready, then wait for all."""
        pending: list[tuple[Component, int | None]] = []
        for comp in wave:
            pid = read_live_pid(self.pid_file(comp.name))
            if pid is not None and comp.stale is not None and comp.stale():
                # Pods keep running (containerd holds them); new ones get the new settings.
                out(f"{comp.name} (pid {pid}) runs with old settings; restarting it")
                stop_pid(pid, grace=20)
                pid = None
            if pid is not None:
                try:
                    wait_until(comp.ready, 5, comp.name, self.log_file(comp.name), pid)
                    continue
                except ClusterError:
                    out(f"{comp.name} (pid {pid}) is running but not ready; restarting it")
                    stop_pid(pid)
            self._check_port(comp)
            env = self.component_env()
            pid = spawn(
                comp.argv(),
                self.log_file(comp.name),
                self.pid_file(comp.name),
                comp.env(env) if comp.env else env,
            )
            started.append(comp.name)
            pending.append((comp, pid))
        for comp, pid in pending:
            wait_until(comp.ready, comp.timeout, comp.name, self.log_file(comp.name), pid)

    STOP_ORDER = (
        "dns-feeder",
        "dnsmasq",
        "kube-proxy",
        "kubelet",
        "containerd",
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "dockerd",
        "registry",
        "fake-gcs-server",
        "etcd",
    )

    def down(self, out: Callable[[str], None] = print, purge: bool = False) -> None:
        """Stop, in reverse order, every process whose pid file still names it; then
        remove what the node left: pod processes, mounts, cgroups and network rules."""
        c = self.cfg
        names = list(self.STOP_ORDER)
        extra = (
            sorted(
                p.stem
                for p in c.run_dir.glob("*.pid")
                if p.stem not in names and p.stem != "operator"
            )
            if c.run_dir.exists()
            else []
        )
        stopped = []
        for name in extra + names:
            pf = self.pid_file(name)
            pid = read_live_pid(pf)
            if pid is not None:
                stop_pid(pid, grace=20 if name in ("kubelet", "dockerd") else 10)
                stopped.append(f"{name} ({pid})")
            pf.unlink(missing_ok=True)
            if name == "dns-feeder":
                # Names of this run are not served by the next one's dnsmasq.
                (c.dns_dir / clusterdns.HOSTS_FILE).unlink(missing_ok=True)
            if name == "kubelet":
                killed = runtime.kill_pods(c)
                if killed:
                    stopped.append(f"{killed} pod processes")
            if name == "containerd":
                stopped += self._clean_node()
        out("stopped: " + ", ".join(stopped) if stopped else "nothing was running")
        if purge and c.state_dir.exists():
            runtime.unmount_all(c.state_dir)
            shutil.rmtree(c.state_dir)
            out(f"removed {c.state_dir}")

    def _clean_node(self) -> list[str]:
        """What the node leaves behind when its processes are gone."""
        c = self.cfg
        cleaned = []
        runtime.kill_pods(c)
        unmounted = runtime.unmount_all(c.kubelet_dir, c.containerd_dir, c.run_root)
        if unmounted:
            cleaned.append(f"{unmounted} mounts")
        runtime.remove_cgroups(c)
        chains = network.remove_kube_chains()
        if chains:
            cleaned.append(f"{chains} kubelet and kube-proxy iptables chains")
        cleaned += network.remove(c)
        shutil.rmtree(c.cni_dir / "ipam", ignore_errors=True)
        return cleaned

    def status(self) -> list[dict]:
        rows = []
        for comp in self.components_for_status():
            pid = read_live_pid(self.pid_file(comp.name))
            rows.append(
                {
                    "component": comp.name,
                    "state": "running" if pid else "stopped",
                    "pid": pid,
                    "port": comp.port,
                    "log": str(self.log_file(comp.name)),
                }
            )
        node = "unknown (API server not reachable)"
        try:
            n = self.api_get(f"/api/v1/nodes/{self.cfg.node_name}")
            node = "Ready" if node_is_ready(n) else "NotReady"
        except Exception:  # noqa: BLE001
            pass
        rows.append(self.operator_status())
        rows.append(clusterdns.status_row(self.cfg))
        rows.append(
            {
                "component": f"node/{self.cfg.node_name}",
                "state": node,
                "pid": None,
                "port": None,
                "log": "",
            }
        )
        return rows

    def components_for_status(self) -> list[Component]:
        # Binaries are not needed to report status; use placeholders.
        self._bins = dict.fromkeys(
            [
                "etcd",
                "fake-gcs-server",
                *binaries.KUBE_COMPONENTS,
                *binaries.RUNTIME_PROGRAMS,
            ],
            "",
        )
        return self.components()


def node_is_ready(node: dict) -> bool:
    """Ready=True and no not-ready taint left (the scheduler honours the taint)."""
    conds = node.get("status", {}).get("conditions") or []
    ready = any(cd.get("type") == "Ready" and cd.get("status") == "True" for cd in conds)
    taints = node.get("spec", {}).get("taints") or []
    return ready and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)
