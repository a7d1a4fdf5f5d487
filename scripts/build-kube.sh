#!/usr/bin/env bash
# Build the control plane (kube-apiserver, kube-controller-manager, kube-scheduler),
# the node (kubelet, kube-proxy) and the pod sandbox's `pause` program from Debian's
# `kubernetes` source package, once, into a cache keyed by version.
#
# Why from source: no Docker engine and no network beyond the package
# registries, so neither kind nor the upstream release tarballs are reachable.
# Prints the directory holding the binaries on its last line.
set -euo pipefail

cache_root="${KINETIC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kinetic}"
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "build-kube: installing Debian packages needs root; run: sudo $0" >&2
    exit 1
  fi
}

ensure_deb_src() {
  # deb-src entries are not configured on a fresh machine; derive them from the
  # existing deb822 source file instead of naming a mirror ourselves.
  if apt-cache showsrc kubernetes >/dev/null 2>&1 && [ -n "$(apt-cache showsrc kubernetes 2>/dev/null)" ]; then
    return
  fi
  need_root
  local src=/etc/apt/sources.list.d/debian.sources
  if [ ! -f "$src" ]; then
    echo "build-kube: $src not found; add a deb-src line for Debian's main archive, then rerun" >&2
    exit 1
  fi
  sed 's/^Types: deb$/Types: deb-src/' "$src" > /etc/apt/sources.list.d/kinetic-deb-src.sources
  apt-get update -qq
}

all_built() {
  local c
  for c in "${components[@]}" pause; do [ -x "$out/$c" ] || return 1; done
}

ensure_deb_src
version=$(apt-cache showsrc kubernetes | awk '/^Version:/ {print $2; exit}')
out="$cache_root/kube/$version/bin"
if all_built; then
  echo "$out"
  exit 0
fi

need_root
apt-get install -y -qq golang-go golang-github-modern-go-reflect2-dev rsync jq dpkg-dev gcc libc6-dev >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/kinetic-kube-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source -qq --download-only kubernetes >/dev/null 2>&1 || apt-get source --download-only kubernetes
dpkg-source -x --no-check ./kubernetes_*.dsc src >/dev/null
cd src

# The vendored reflect2 1.0.1 crashes at start-up under Go >= 1.18
# (unsafe map iteration); Debian ships 1.0.2, which is API compatible.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2

# Debian's rules build inside a GOPATH that points at the tree.
mkdir -p _gopath/src/k8s.io
ln -s "$PWD" _gopath/src/k8s.io/kubernetes
export GOPATH="$PWD/_gopath" GO111MODULE=off GOFLAGS=-mod=vendor GOCACHE="$work/gocache"
cd _gopath/src/k8s.io/kubernetes
targets=""
for c in "${components[@]}"; do targets="$targets cmd/$c"; done
make WHAT="${targets# }" KUBE_BUILD_PLATFORMS=linux/amd64 >&2

mkdir -p "$out.tmp"
for c in "${components[@]}"; do
  cp "_output/local/bin/linux/amd64/$c" "$out.tmp/" 2>/dev/null || cp "_output/bin/$c" "$out.tmp/"
done
# The sandbox every pod's containers share: a static C program that holds the
# namespaces, reaps orphans and exits on SIGINT/SIGTERM.
pause_tag=$(awk -F' = ' '/^TAG = / {print $2; exit}' build/pause/Makefile)
gcc -Os -Wall -static "-DVERSION=v${pause_tag}-kinetic" -o "$out.tmp/pause" build/pause/linux/pause.c
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
