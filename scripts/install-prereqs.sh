#!/usr/bin/env bash
# Install what a fresh Debian machine lacks to run the local cluster and the tests:
# etcd (etcd-server), kubectl (kubernetes-client as a fallback), make, procps, lua5.1,
# the Python venv module; the node's runtime (containerd and runc, Docker Engine to
# build images, Debian's registry, mmdebstrap for base images, CNI plugins, iptables,
# conntrack, dnsmasq-base for cluster DNS, busybox-static for the busybox image); and the
# Kubernetes binaries (control plane, kubelet, kube-proxy, pause: built once from Debian's
# source package by build-kube.sh, cached under ~/.cache/kinetic).
# Idempotent: a fast no-op when everything is present.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive

have() { command -v "$1" >/dev/null 2>&1; }

need=()
have etcd || [ -x /usr/bin/etcd ] || need+=(etcd-server)
have kubectl || need+=(kubernetes-client)
have make || need+=(make)
have pgrep || need+=(procps)
have ss || need+=(iproute2)
have curl || need+=(curl)
have git || need+=(git)
# The node: a real kubelet on containerd's CRI, pods on a CNI bridge, kube-proxy.
[ -x /usr/bin/containerd ] || need+=(containerd)
[ -x /usr/sbin/runc ] || have runc || need+=(runc)
[ -x /usr/sbin/dockerd ] || [ -x /usr/bin/dockerd ] || need+=(docker.io)
have docker-registry || need+=(docker-registry)
have mmdebstrap || need+=(mmdebstrap)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
have iptables || [ -x /usr/sbin/iptables ] || need+=(iptables)
have conntrack || [ -x /usr/sbin/conntrack ] || need+=(conntrack)
# The cluster's DNS server: dnsmasq-base is the program alone. Not Debian's `dnsmasq`
# package, whose system service would take port 53 on every address.
[ -x /usr/sbin/dnsmasq ] || have dnsmasq || need+=(dnsmasq-base)
# The busybox stand-in image is the static busybox alone (a scratch image has no libc).
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' ||
  need+=(busybox-static)
# The pause program is compiled statically.
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
have gcc || need+=(gcc)
# The Argo CD health check is tested with the Lua dialect Argo CD embeds.
have lua5.1 || need+=(lua5.1)
# The Makefile prefers pyenv's 3.12; the system python3 needs the venv module otherwise.
if ! ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 >/dev/null 2>&1 && ! have python3.12; then
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv python3-pip)
fi

if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-prereqs: missing ${need[*]}; run as root: sudo $0" >&2
    exit 1
  fi
  echo "install-prereqs: apt-get install ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Debian's etcd-server package may start a system etcd on 2379; ours uses 12379, so
# it does not clash, but do not leave an unused daemon behind on CI machines.
if [ "${CI:-}" = "true" ] && have systemctl && systemctl is-active --quiet etcd 2>/dev/null; then
  systemctl disable --now etcd >/dev/null 2>&1 || true
fi

kube_ok=false
if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ]; then
  kube_ok=true
elif have kube-apiserver && have kube-controller-manager && have kube-scheduler \
  && have kubelet && have kube-proxy && have pause; then
  kube_ok=true
fi
if ! $kube_ok; then
  start=$(date +%s)
  bin_dir=$(bash "$here/build-kube.sh" | tail -n 1)
  echo "install-prereqs: Kubernetes binaries in $bin_dir ($(( $(date +%s) - start ))s)"
fi
echo "install-prereqs: ok (etcd $(command -v etcd || echo /usr/bin/etcd), kubectl $(command -v kubectl))"
