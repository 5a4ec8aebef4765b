#!/usr/bin/env bash
# scripts/prereqs.sh: what building and testing Affido needs on a Debian
# machine, checked in one place. dev.sh and .ci/run both call it.
#
#   scripts/prereqs.sh check     list what is missing; exit 1 if anything is
#   scripts/prereqs.sh install   as root: install what is missing (Debian
#                                packages, a deb-src apt source) and start
#                                dockerd if it is installed but not running
set -euo pipefail

usage() {
  cat <<USAGE
Usage: scripts/prereqs.sh check|install

  check    print what is missing (one line each) and exit 1 if anything is
  install  as root: apt-get install what is missing, add a deb-src source,
           start dockerd when it is not running
USAGE
}

# Debian package for each command the build and the tests run.
PKG_FOR=(
  docker:docker.io
  make:make
  gcc:gcc
  bzip2:bzip2
  debootstrap:debootstrap
  curl:curl
  dpkg-source:dpkg-dev
  chromium:chromium # the web client's browser tests (chromedp)
)

has_deb_src() {
  grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ || grep -qs '^deb-src' /etc/apt/sources.list
}

has_compose() {
  docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1
}

# missing prints one word per missing thing: a Debian package name, or
# "deb-src" for the apt source the agent's busybox build needs.
missing() {
  local entry
  for entry in "${PKG_FOR[@]}"; do
    command -v "${entry%%:*}" >/dev/null 2>&1 || echo "${entry#*:}"
  done
  [[ -e /usr/include/stdio.h ]] || echo libc6-dev
  has_compose || echo docker-compose
  has_deb_src || echo deb-src
}

# add_deb_src adds a deb-src entry for the machine's own mirror and release.
add_deb_src() {
  local mirror suite
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [[ -n "$mirror" ]] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "${mirror:-http://deb.debian.org/debian}" "${suite:-bookworm}" > /etc/apt/sources.list.d/affido-src.sources
}

start_dockerd() {
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null 2>&1 || { echo "prereqs: dockerd is not installed" >&2; return 1; }
  echo "prereqs: starting dockerd (log: /tmp/dockerd.log)" >&2
  (setsid nohup dockerd >/tmp/dockerd.log 2>&1 &)
  local i
  for i in $(seq 1 120); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  tail -20 /tmp/dockerd.log >&2
  echo "prereqs: dockerd did not start within 60 s" >&2
  return 1
}

cmd_check() {
  local m
  m=$(missing | sort -u | tr '\n' ' ')
  command -v go >/dev/null 2>&1 || { echo "prereqs: Go 1.26 is not installed or not on PATH" >&2; return 1; }
  if [[ -n "${m// /}" ]]; then
    echo "prereqs: missing: $m" >&2
    return 1
  fi
  if ! docker info >/dev/null 2>&1; then
    echo "prereqs: the Docker engine is not running or not reachable (check DOCKER_HOST and /var/run/docker.sock)" >&2
    return 1
  fi
}

cmd_install() {
  [[ $(id -u) -eq 0 ]] || { echo "prereqs: install needs root: sudo $0 install" >&2; return 1; }
  local want=() pkgs=() p
  mapfile -t want < <(missing | sort -u)
  if [[ ${#want[@]} -gt 0 ]]; then
    echo "prereqs: installing ${want[*]}" >&2
    for p in "${want[@]}"; do
      if [[ $p == deb-src ]]; then add_deb_src; else pkgs+=("$p"); fi
    done
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if [[ ${#pkgs[@]} -gt 0 ]]; then
      apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
    fi
  fi
  start_dockerd
  cmd_check
}

case ${1:-} in
  check) cmd_check ;;
  install) cmd_install ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
