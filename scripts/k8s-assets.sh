#!/usr/bin/env bash
# k8s-assets.sh: the Kubernetes runtime's test control plane, run by envtest,
# once, into a cache outside the clone keyed by their versions: kube-apiserver
# built from the Go module proxy (Debian packages no API server), and etcd
# taken from Debian's etcd-server package (unpacked, never installed: no
# daemon starts), or built from source where apt cannot fetch it. Prints the
# directory.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/k8s-assets"
export GOTOOLCHAIN=local

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0 # the source build's, when Debian's package cannot be had
CACHE=${AFFIDO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/affido}
DIR=$CACHE/k8s/kube-apiserver-$KUBE_VERSION

usage() {
  cat <<USAGE
Usage: scripts/k8s-assets.sh [dir|build]

  dir     print the cache directory (built or not)
  build   build what is missing there (default), then print the directory
USAGE
}

cmd_dir() { echo "$DIR"; }

build_one() { # build_one NAME GOMOD PACKAGE
  local name=$1 gomod=$2 pkg=$3 work
  [[ -x "$DIR/$name" ]] && return 0
  work=$(mktemp -d)
  cp "$gomod" "$work/go.mod"
  echo "k8s-assets: building $name ($pkg); the first build takes many minutes" >&2
  local t0=$SECONDS rc=0
  # Static, and compiled without optimisation or inlining (-N -l): these are
  # test fixtures, and on a fresh 2-core machine their build is the longest
  # thing verify does; unoptimised it costs less CPU beside the tests.
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -gcflags='all=-N -l' -ldflags='-s -w' -o "$work/$name" "$pkg") >&2 || rc=$?
  if [[ $rc -eq 0 ]]; then
    mkdir -p "$DIR"
    mv "$work/$name" "$DIR/$name.tmp" && mv "$DIR/$name.tmp" "$DIR/$name"
  fi
  rm -rf "$work"
  [[ $rc -eq 0 ]] || { echo "k8s-assets: building $name failed" >&2; return "$rc"; }
  echo "k8s-assets: $name built in $((SECONDS - t0)) s" >&2
}

# debian_etcd unpacks etcd from Debian's etcd-server package (3.4 on
# bookworm; kube-apiserver detects it and serves consistent lists from etcd
# rather than its watch cache). Building etcd from source took 13 to 43 min
# of a fresh machine's verify; this takes seconds.
debian_etcd() {
  [[ -x "$DIR/etcd" ]] && return 0
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || return 1
  local work rc=0
  work=$(mktemp -d)
  chmod 755 "$work" # apt's _apt user writes the download here
  (cd "$work" && apt-get download etcd-server >/dev/null 2>&1 && dpkg-deb -x etcd-server_*.deb x) || rc=$?
  if [[ $rc -eq 0 && -x "$work/x/usr/bin/etcd" ]]; then
    mkdir -p "$DIR"
    mv "$work/x/usr/bin/etcd" "$DIR/etcd.tmp" && mv "$DIR/etcd.tmp" "$DIR/etcd"
    echo "k8s-assets: etcd from Debian's package ($("$DIR/etcd" --version | head -n 1))" >&2
  else
    rc=1
  fi
  rm -rf "$work"
  return "$rc"
}

cmd_build() {
  debian_etcd || build_one etcd etcd.go.mod go.etcd.io/etcd/server/v3
  build_one kube-apiserver kube-apiserver.go.mod k8s.io/kubernetes/cmd/kube-apiserver
  echo "$DIR"
}

case ${1:-build} in
  dir) cmd_dir ;;
  build) cmd_build ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
