#!/usr/bin/env bash
# Builds affido/debian:bookworm, a minimal Debian base image, with debootstrap
# and docker import, for machines where no image can be pulled.
set -euo pipefail

tag=${1:-affido/debian:bookworm}
mirror=${DEBIAN_MIRROR:-}
if [[ -z "$mirror" ]]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
  mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  echo "debootstrap failed; log: $root.log" >&2
  exit 1
}
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["bash"]' - "$tag" >/dev/null
echo "built $tag"
