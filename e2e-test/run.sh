#!/usr/bin/env bash
# e2e-test/run.sh: start a throwaway Affido stack beside any dev stack (own
# compose project, port, subnets and short idle tiers), run every e2e suite
# against it through Caddy, remove it again (also on failure), and end with
# a line "N passed, N failed".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOTOOLCHAIN=local

export AFFIDO_STACK=${AFFIDO_E2E_STACK:-affidotest}
export AFFIDO_PORT=${AFFIDO_E2E_PORT:-18091}
export AFFIDO_CONTROL_SUBNET=10.212.1.0/24
export AFFIDO_CADDY_IP=10.212.1.10
export AFFIDO_SANDBOX_POOL=10.214.0.0/16
export AFFIDO_IDLE_PAUSE=3s AFFIDO_IDLE_STOP=8s AFFIDO_IDLE_REMOVE=13s AFFIDO_TICK=250ms
export AFFIDO_MAX_RUNNING=0
# No warm pool unless a test sizes one (admin pool): most tests name a
# user's objects after the user, as a sandbox made for its user is.
export AFFIDO_WARM_POOL=0
# The notification sink the reminder suites deliver to, at a fixed address on
# the control network: the one address the outbound guard is told to allow.
export AFFIDO_E2E_SINK_IP=10.212.1.50
export AFFIDO_OUTBOUND_ALLOW=$AFFIDO_E2E_SINK_IP/32
# Limits small enough for the attack suite to reach quickly. The sink also
# serves the test MCP server (:9998), so connectors reach it under the same
# allow-list entry, and a hanging one is cut off after 5 s.
export AFFIDO_NOTIFY_QUEUE_MAX=3 AFFIDO_BODY_TIMEOUT=3s AFFIDO_CONNECTOR_TIMEOUT=5s
# Approvals expire after 2 minutes: long enough for every suite that decides
# one (the slowest, through a manager kill and the sandbox's removal, takes
# about 20 s), short enough for the expiry suite to wait for it.
export AFFIDO_APPROVAL_TTL=2m
# A model without a price, which the gateway must refuse.
export AFFIDO_FAKE_MODELS=fake/echo,fake/alt,fake/unpriced
export AFFIDO_E2E_URL=http://127.0.0.1:$AFFIDO_PORT
# What compose alone needs for this stack (./dev.sh writes it), kept apart
# from the developer's .env.
export AFFIDO_COMPOSE_ENV=.build/e2e/compose.env

LOG=.build/e2e
usage() {
  cat <<USAGE
Usage: e2e-test/run.sh [--keep] [GO_TEST_RUN_REGEXP]

Starts the $AFFIDO_STACK stack on port $AFFIDO_PORT, runs the e2e suites, and
removes the stack (containers, networks, volumes; images are kept).
  --keep   leave the stack running afterwards, for debugging
AFFIDO_E2E_TIMEOUT (45m) bounds the go test run; the soak (./verify.sh --soak)
sets it from its length.
USAGE
}

keep=no
run_filter=
while [[ $# -gt 0 ]]; do
  case $1 in
    --keep) keep=yes ;;
    -h|--help) usage; exit 0 ;;
    *) run_filter=$1 ;;
  esac
  shift
done

cleanup() {
  if [[ $keep == yes ]]; then
    echo "e2e: stack $AFFIDO_STACK left running (./dev.sh reset -y --keep-images with AFFIDO_STACK=$AFFIDO_STACK to remove)" >&2
    return
  fi
  docker logs "$AFFIDO_STACK-manager" >"$LOG/manager.log" 2>&1 || true
  ./dev.sh reset -y --keep-images >/dev/null 2>&1 || echo "e2e: cleanup of $AFFIDO_STACK failed" >&2
}

build_probe() {
  mkdir -p .build/probe
  CGO_ENABLED=0 go build -trimpath -o .build/probe/probe ./e2e-test/probe
  printf 'FROM scratch\nCOPY probe /probe\nENTRYPOINT ["/probe"]\n' > .build/probe/Dockerfile
  docker build -q -t affido/probe:test .build/probe >/dev/null 2>&1
}

main() {
  mkdir -p "$LOG"
  # A previous run that was killed may have left its stack behind.
  ./dev.sh reset -y --keep-images >/dev/null 2>&1 || true
  trap cleanup EXIT
  ./dev.sh up >"$LOG/up.log" 2>&1 || { cat "$LOG/up.log" >&2; echo "0 passed, 1 failed"; exit 1; }
  build_probe

  local rc=0
  CGO_ENABLED=0 go test -trimpath -tags e2e -count=1 -v -parallel "${AFFIDO_E2E_PARALLEL:-4}" -timeout "${AFFIDO_E2E_TIMEOUT:-45m}" ${run_filter:+-run "$run_filter"} ./e2e-test/ 2>&1 | tee "$LOG/go-test.log" || rc=$?
  # The compose path on a fresh clone rebuilds the affido/*:dev images, so
  # it runs alone, after the others (its own stack beside this one).
  if [[ -z $run_filter || TestComposeUpOnAFreshClone =~ $run_filter ]]; then
    AFFIDO_E2E_COMPOSE=1 CGO_ENABLED=0 go test -trimpath -tags e2e -count=1 -v -timeout 15m -run '^TestComposeUpOnAFreshClone$' ./e2e-test/ 2>&1 \
      | tee -a "$LOG/go-test.log" || rc=$?
  fi
  local passed failed
  passed=$(grep -cE '^\s*--- PASS' "$LOG/go-test.log" || true)
  failed=$(grep -cE '^\s*--- FAIL' "$LOG/go-test.log" || true)
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    failed=1 # the test binary itself failed (build error, panic, timeout)
  fi
  echo "e2e: $passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

main
