#!/usr/bin/env bash
# e2e-test/run.sh: start a throwaway Affido stack beside any dev stack (own
# compose project, port, subnets and short idle tiers), run every e2e suite
# against it through Caddy, remove it again (also on failure), and end with
# a line "N passed, N failed".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOTOOLCHAIN=local

# The stack's own settings: stack_env 1 (the main stack) or stack_env 2
# (a second one beside it, for the serial tests that run concurrently).
stack_env() {
  case $1 in
    1) export AFFIDO_STACK=${AFFIDO_E2E_STACK:-affidotest} AFFIDO_PORT=${AFFIDO_E2E_PORT:-18091} \
         AFFIDO_CONTROL_SUBNET=10.212.1.0/24 AFFIDO_CADDY_IP=10.212.1.10 AFFIDO_SANDBOX_POOL=10.214.0.0/16 \
         AFFIDO_E2E_SINK_IP=10.212.1.50 AFFIDO_COMPOSE_ENV=.build/e2e/compose.env ;;
    2) export AFFIDO_STACK=${AFFIDO_E2E_STACK:-affidotest}2 AFFIDO_PORT=$(( ${AFFIDO_E2E_PORT:-18091} + 1 )) \
         AFFIDO_CONTROL_SUBNET=10.212.2.0/24 AFFIDO_CADDY_IP=10.212.2.10 AFFIDO_SANDBOX_POOL=10.217.0.0/16 \
         AFFIDO_E2E_SINK_IP=10.212.2.50 AFFIDO_COMPOSE_ENV=.build/e2e/compose2.env ;;
    # The third keeps agents' storage on Postgres (its suites: STORAGE).
    3) export AFFIDO_STACK=${AFFIDO_E2E_STACK:-affidotest}3 AFFIDO_PORT=$(( ${AFFIDO_E2E_PORT:-18091} + 3 )) \
         AFFIDO_CONTROL_SUBNET=10.212.4.0/24 AFFIDO_CADDY_IP=10.212.4.10 AFFIDO_SANDBOX_POOL=10.218.0.0/16 \
         AFFIDO_E2E_SINK_IP=10.212.4.50 AFFIDO_COMPOSE_ENV=.build/e2e/compose3.env AFFIDO_AGENT_STORAGE=postgres ;;
  esac
  # The notification sink the reminder suites deliver to, at a fixed address
  # on the control network: the one address the outbound guard is told to allow.
  export AFFIDO_OUTBOUND_ALLOW=$AFFIDO_E2E_SINK_IP/32
  export AFFIDO_E2E_URL=http://127.0.0.1:$AFFIDO_PORT
}
stack_env 1
export AFFIDO_IDLE_PAUSE=3s AFFIDO_IDLE_STOP=8s AFFIDO_IDLE_REMOVE=13s AFFIDO_TICK=250ms
export AFFIDO_MAX_RUNNING=0
# No warm pool unless a test sizes one (admin pool): most tests name a
# user's objects after the user, as a sandbox made for its user is.
export AFFIDO_WARM_POOL=0
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

LOG=.build/e2e
usage() {
  cat <<USAGE
Usage: e2e-test/run.sh [--keep] [GO_TEST_RUN_REGEXP | storage]

Starts the $AFFIDO_STACK stack on port $AFFIDO_PORT, runs the e2e suites, and
removes the stack (containers, networks, volumes; images are kept).
  --keep   leave the stack running afterwards, for debugging
AFFIDO_E2E_TIMEOUT (45m) bounds the go test run; the soak (./verify.sh --soak)
sets it from its length. Without a regexp the suite runs on two stacks, the
second beside the first ($AFFIDO_STACK and ${AFFIDO_STACK}2);
AFFIDO_E2E_STACKS=1 runs it all on one (slower, lighter on the machine).
Then the agent-storage suites run on a third stack keeping agents' storage
on Postgres (${AFFIDO_STACK}3); "storage" as the argument runs only those.
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

# The tests that run alone on the main stack, after the others: the browser
# tests (Chromium aborts a page's requests with ERR_NETWORK_CHANGED when a
# sandbox network appears on the host, which the other stack's tests do all
# the time; they are all named TestWeb…), one that untags the shared agent
# image, and the burst of 20 new users (beside another stack's tests, its
# bring-ups ran past the provision timeout). Each of them refuses to start
# while the other stack runs (mustRunAlone).
ALONE='^(TestWeb.*|TestDockerErrorIs503|TestBurstOfNewUsers)$'
# The long serial tests that run on the main stack while every other test
# runs on the second one (its serial tests, then its parallel ones): about
# half of the suite's time each way. Tests not named here go to the second
# stack by themselves.
# The tests that run again on a stack keeping agents' storage on Postgres
# (stack 3), after the others: its own suites and the kill tests.
STORAGE='^(TestAgentStorageOnPostgres|TestStorageGatewayWantsTheSandboxToken|TestTwoAgentProcessesOneLease|TestMigrateStorageBothWays|TestAgentKilledDuring.*)$'
MAIN='^(TestRemindersAndJobsSurviveEvictAndReload|TestApprovalExpiresAcrossManagerRestart|TestBackupRemoveRestore|TestDevShLifecycleKeepsData|TestMissedJobRunsOnce|TestCapacityFullIs429)$'

SECOND_PID=
cleanup() {
  # The second stack's suite, if this run is cut short while it runs (a
  # background job ignores SIGINT, and so would the suite).
  [[ -z $SECOND_PID ]] || kill "$SECOND_PID" 2>/dev/null || true
  if [[ $keep == yes ]]; then
    echo "e2e: stacks left running (./dev.sh reset -y --keep-images with AFFIDO_STACK=$AFFIDO_STACK, ${AFFIDO_STACK}2 and ${AFFIDO_STACK}3, to remove)" >&2
    return
  fi
  docker logs "$AFFIDO_STACK-manager" >"$LOG/manager.log" 2>&1 || true
  ./dev.sh reset -y --keep-images >/dev/null 2>&1 || echo "e2e: cleanup of $AFFIDO_STACK failed" >&2
  (stack_env 2; reset_second)
  (stack_env 3; reset_third)
}

# reset_second removes the second stack (run under stack_env 2), keeping its
# manager's log.
reset_second() {
  docker logs "$AFFIDO_STACK-manager" >"$LOG/manager2.log" 2>&1 || true
  ./dev.sh reset -y --keep-images >/dev/null 2>&1 || echo "e2e: cleanup of $AFFIDO_STACK failed" >&2
}

# reset_third removes the Postgres-storage stack (run under stack_env 3).
reset_third() {
  docker logs "$AFFIDO_STACK-manager" >"$LOG/manager3.log" 2>&1 || true
  ./dev.sh reset -y --keep-images >/dev/null 2>&1 || echo "e2e: cleanup of $AFFIDO_STACK failed" >&2
}

# storage_suites runs STORAGE on stack 3, once the others are done.
storage_suites() {
  local rc=0
  echo "e2e: $(date +%T) agent storage on Postgres: $STORAGE on ${AFFIDO_STACK}3"
  if ! (stack_env 3; ./dev.sh up >"$LOG/up3.log" 2>&1); then
    cat "$LOG/up3.log" >&2
    return 1
  fi
  (stack_env 3; e2e -test.run "$STORAGE") 2>&1 | tee -a "$LOG/go-test.log" || rc=$?
  [[ $keep == yes ]] || (stack_env 3; reset_third)
  return $rc
}

build_probe() {
  mkdir -p .build/probe
  CGO_ENABLED=0 go build -trimpath -o .build/probe/probe ./e2e-test/probe
  printf 'FROM scratch\nCOPY probe /probe\nENTRYPOINT ["/probe"]\n' > .build/probe/Dockerfile
  docker build -q -t affido/probe:test .build/probe >/dev/null 2>&1
}

# E2E_FLAGS are go test's flags for every run of the compiled suite.
E2E_FLAGS=(-test.v -test.count=1 -test.parallel "${AFFIDO_E2E_PARALLEL:-4}" -test.timeout "${AFFIDO_E2E_TIMEOUT:-45m}")

# e2e ARGS... runs the compiled suite from its package directory (the tests
# find ./dev.sh at ..) with E2E_FLAGS and ARGS.
e2e() {
  (cd e2e-test && ../"$LOG/e2e.test" "${E2E_FLAGS[@]}" "$@")
}

# all_suites runs the whole suite on two stacks: the long serial tests (MAIN)
# on the main stack while the rest run on the second, then the ALONE tests
# on the main stack once the second is gone.
all_suites() {
  local rc=0 rc2=0
  if ! (stack_env 2; ./dev.sh up >"$LOG/up2.log" 2>&1); then
    cat "$LOG/up2.log" >&2
    return 1
  fi
  echo "e2e: $(date +%T) two stacks: $MAIN on $AFFIDO_STACK; the others but $ALONE on ${AFFIDO_STACK}2"
  # exec: the job's pid is the suite's own, for cleanup to stop.
  (stack_env 2; cd e2e-test && AFFIDO_E2E_SHARED=1 exec ../"$LOG/e2e.test" "${E2E_FLAGS[@]}" -test.skip "$MAIN|$ALONE") \
    >"$LOG/go-test2.log" 2>&1 &
  SECOND_PID=$!
  AFFIDO_E2E_SHARED=1 e2e -test.run "$MAIN" 2>&1 | tee -a "$LOG/go-test.log" || rc=$?
  wait "$SECOND_PID" || rc2=$?
  SECOND_PID=
  echo "e2e: $(date +%T) both done; on ${AFFIDO_STACK}2:"
  cat "$LOG/go-test2.log"
  cat "$LOG/go-test2.log" >>"$LOG/go-test.log"
  (stack_env 2; reset_second)
  echo "e2e: $(date +%T) alone on $AFFIDO_STACK: $ALONE"
  e2e -test.run "$ALONE" 2>&1 | tee -a "$LOG/go-test.log" || rc=$?
  [[ $rc -eq 0 && $rc2 -eq 0 ]]
}

main() {
  mkdir -p "$LOG"
  # A previous run that was killed may have left its stacks behind.
  ./dev.sh reset -y --keep-images >/dev/null 2>&1 || true
  (stack_env 2; ./dev.sh reset -y --keep-images >/dev/null 2>&1) || true
  (stack_env 3; ./dev.sh reset -y --keep-images >/dev/null 2>&1) || true
  trap cleanup EXIT
  ./dev.sh up >"$LOG/up.log" 2>&1 || { cat "$LOG/up.log" >&2; echo "0 passed, 1 failed"; exit 1; }
  build_probe
  : >"$LOG/go-test.log"
  if ! CGO_ENABLED=0 go test -c -trimpath -tags e2e -o "$LOG/e2e.test" ./e2e-test/; then
    echo "e2e: 0 passed, 1 failed"
    exit 1
  fi

  local rc=0
  if [[ $run_filter == storage ]]; then
    storage_suites || rc=$?
  elif [[ -n $run_filter || ${AFFIDO_E2E_STACKS:-2} == 1 ]]; then
    e2e ${run_filter:+-test.run "$run_filter"} 2>&1 | tee -a "$LOG/go-test.log" || rc=$?
  else
    all_suites || rc=$?
    storage_suites || rc=$?
  fi
  # The compose path on a fresh clone rebuilds the affido/*:dev images, so
  # it runs alone, after the others (its own stack beside this one).
  if [[ -z $run_filter || TestComposeUpOnAFreshClone =~ $run_filter ]]; then
    echo "e2e: $(date +%T) the compose path on a fresh clone"
    AFFIDO_E2E_COMPOSE=1 e2e -test.timeout 15m -test.run '^TestComposeUpOnAFreshClone$' 2>&1 \
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
