#!/usr/bin/env bash
# Builds a static busybox with only the applets in images/agent/applets,
# from Debian's busybox source package. Debian's busybox-static cannot be
# used as it is: its shell runs every built-in applet (wget, nc, ...) by
# name even when no link exists, so leaving links out removes nothing.
# Usage: images/agent/busybox.sh OUT_BINARY
set -euo pipefail

out=$(realpath -m "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  echo "busybox.sh: no deb-src entry in the apt sources; add one (see .ci/run) to fetch Debian's busybox source" >&2
  exit 1
fi
cd "$work"
apt-get source --download-only busybox >/dev/null 2>&1 || { echo "busybox.sh: apt-get source busybox failed" >&2; exit 1; }
tar xjf busybox_*.orig.tar.bz2
cd busybox-*/

make allnoconfig >/dev/null
set_opt() { sed -i -e "s/^# CONFIG_$1 is not set$/CONFIG_$1=y/" -e "s/^CONFIG_$1=.*/CONFIG_$1=y/" .config; }
for opt in STATIC ASH SH_IS_ASH ASH_BASH_COMPAT ASH_JOB_CONTROL ASH_ALIAS ASH_ECHO ASH_PRINTF ASH_TEST \
  ASH_GETOPTS ASH_CMDCMD FEATURE_EDITING LONG_OPTS FEATURE_FANCY_HEAD FEATURE_LS_RECURSIVE FEATURE_LS_SORTFILES \
  FEATURE_LS_TIMESTAMPS FEATURE_LS_USERNAME FEATURE_LS_FILETYPES FEATURE_LS_FOLLOWLINKS FEATURE_HUMAN_READABLE \
  FEATURE_FIND_PRINT0 FEATURE_FIND_MTIME FEATURE_FIND_PERM FEATURE_FIND_TYPE FEATURE_FIND_MAXDEPTH FEATURE_FIND_NEWER \
  FEATURE_FIND_NOT FEATURE_FIND_PAREN FEATURE_FIND_SIZE FEATURE_FIND_NAME FEATURE_FIND_PATH FEATURE_FIND_REGEX \
  FEATURE_FIND_EXEC FEATURE_FIND_DELETE FEATURE_GREP_CONTEXT EXTRA_COMPAT FEATURE_SORT_BIG FEATURE_TAR_CREATE \
  FEATURE_SEAMLESS_GZ FEATURE_TAR_LONG_OPTIONS FEATURE_TAR_GNU_EXTENSIONS FEATURE_TAR_FROM FEATURE_XARGS_SUPPORT_CONFIRMATION \
  FEATURE_XARGS_SUPPORT_QUOTES FEATURE_XARGS_SUPPORT_TERMOPT FEATURE_XARGS_SUPPORT_ZERO_TERM FEATURE_PS_WIDE \
  FEATURE_DIFF_LONG_OPTIONS FEATURE_TIMEOUT_LONG_OPTIONS DESKTOP; do
  set_opt "$opt"
done
while read -r applet; do
  [[ -z "$applet" || "$applet" == \#* ]] && continue
  case $applet in
    "[") set_opt TEST1 ;;
    "[[") set_opt TEST2 ;;
    sh|ash) ;;
    *) set_opt "$(echo "$applet" | tr 'a-z-' 'A-Z_')" ;;
  esac
done < "$here/applets"
# Never: running applets that have no link, or any network or package tool.
for opt in FEATURE_SH_STANDALONE FEATURE_PREFER_APPLETS FEATURE_SH_NOFORK; do
  sed -i "s/^CONFIG_$opt=y/# CONFIG_$opt is not set/" .config
done
{ yes "" || true; } | make oldconfig >/dev/null 2>&1
for opt in WGET NC FTPGET FTPPUT TFTP TELNET HTTPD SSL_CLIENT NSLOOKUP PING IP DPKG DPKG_DEB RPM RPM2CPIO FEATURE_SH_STANDALONE FEATURE_PREFER_APPLETS; do
  if grep -q "^CONFIG_$opt=y" .config; then
    echo "busybox.sh: CONFIG_$opt is still enabled" >&2
    exit 1
  fi
done
make -j"$(nproc)" busybox >build.log 2>&1 || { tail -30 build.log >&2; exit 1; }
cp busybox "$out"
