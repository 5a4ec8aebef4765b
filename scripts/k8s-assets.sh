#!/usr/bin/env bash
# k8s-assets.sh: build kube-apiserver and etcd (the Kubernetes runtime's test
# control plane, run by envtest) from the Go module proxy, once, into a cache
# outside the clone keyed by their versions. Prints the directory.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/k8s-assets"
export GOTOOLCHAIN=local

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
CACHE=${AFFIDO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/affido}
DIR=$CACHE/k8s/kube-apiserver-$KUBE_VERSION-etcd-$ETCD_VERSION

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

cmd_build() {
  build_one etcd etcd.go.mod go.etcd.io/etcd/server/v3
  build_one kube-apiserver kube-apiserver.go.mod k8s.io/kubernetes/cmd/kube-apiserver
  echo "$DIR"
}

case ${1:-build} in
  dir) cmd_dir ;;
  build) cmd_build ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
