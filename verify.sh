#!/usr/bin/env bash
# verify.sh: every test. go vet, the unit tests with -race, then the e2e
# suites and sandbox lifecycle checks against a real stack (Docker, Postgres,
# Caddy) that e2e-test/run.sh starts and removes, then the Kubernetes runtime's
# tests against a real kube-apiserver and etcd (kube-apiserver built once by
# scripts/k8s-assets.sh, etcd unpacked from Debian's package, in the
# background while the other steps run).
# --soak runs the chaos soak instead, and nothing else. Ends with "N passed,
# N failed".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
export GOTOOLCHAIN=local

usage() {
  cat <<USAGE
Usage: ./verify.sh [--quick] [--stress]
       ./verify.sh --soak [MINUTES]

  (no option)  go vet, go test -race ./..., e2e-test/run.sh against real Docker,
               the engine contract suite on Docker, then the Kubernetes tests
               (manager/kube, the same suite among them) against a real API server
  --quick      go vet, the unit tests and the Kubernetes tests (no Docker)
  --stress     the same, while one busy-looping process per core competes for
               the CPU the whole time (the suite must hold on a busy machine)
  --soak [MINUTES]
               only the chaos soak (e2e-test/soak_test.go, not part of the other
               runs): a mixed load for 4 users through Caddy for MINUTES (default
               10) while faults are injected at random moments, then every
               invariant checked from the stores; then its mutation check, a
               2-minute soak that drops one pending reminder from an agent's
               store and must report exactly that one lost. Prints the faults
               injected and each invariant's counts. AFFIDO_SOAK_SEED replays a
               run's choices, AFFIDO_SOAK_USERS sets the users.
USAGE
}

quick=no
stress=no
soak=
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=yes ;;
    --stress) stress=yes ;;
    --soak)
      soak=10
      if [[ $# -gt 1 && $2 =~ ^[0-9]+([.][0-9]+)?$ ]]; then
        soak=$2
        shift
      fi
      ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done

LOG=.build/verify
mkdir -p "$LOG"
passed=0
failed=0

count_go() { # count_go LOGFILE: add go test's PASS/FAIL lines to the totals
  local p f
  p=$(grep -cE '^\s*--- PASS' "$1" || true)
  f=$(grep -cE '^\s*--- FAIL' "$1" || true)
  passed=$((passed + p))
  failed=$((failed + f))
}

report_go() { # report_go LOGFILE RC WHAT: show a go test run's outcome, count it
  local log=$1 rc=$2 what=$3
  grep -E '^(ok|FAIL|---|panic)|^\s+--- FAIL' "$log" | grep -vE '^\s*--- PASS' || true
  count_go "$log"
  if [[ $rc -ne 0 ]]; then
    # a failure with no failing test (a build error, a panic) still counts
    [[ $(grep -cE '^\s*--- FAIL' "$log" || true) -gt 0 ]] || failed=$((failed + 1))
    echo "$what failed; full log: $log" >&2
  fi
}

# go vet and the e2e test binary build with the images' flags (static,
# -trimpath), so a fresh machine compiles every dependency twice (this and
# -race), not three times. It runs in the background, niced, from the
# start: on 2 cores the unit tests keep the CPU busy and the e2e suites
# mostly wait, so vet takes the time they leave (on a fresh machine it
# compiles every dependency: 10 min in front of everything else before).
start_vet() {
  echo "==> go vet (in the background, niced; log $LOG/vet.log)"
  (
    start=$SECONDS
    rc=0
    nice -n 19 env CGO_ENABLED=0 go vet -trimpath ./... >"$LOG/vet.log" 2>&1 &&
      nice -n 19 env CGO_ENABLED=0 go vet -trimpath -tags e2e ./e2e-test/ >>"$LOG/vet.log" 2>&1 || rc=$?
    echo "vet: rc=$rc in $((SECONDS - start)) s" >>"$LOG/vet.log"
    exit "$rc"
  ) &
  VET_PID=$!
}

# step_vet waits for go vet and counts it: one failure if it found anything.
step_vet() {
  local rc=0
  wait "$VET_PID" || rc=$?
  VET_PID=
  echo "==> go vet: $(tail -n 1 "$LOG/vet.log")"
  if [[ $rc -ne 0 ]]; then
    grep -v '^vet: rc=' "$LOG/vet.log" | grep -v '^go: downloading' | head -n 40 >&2 || true
    echo "go vet failed; full log: $LOG/vet.log" >&2
    failed=$((failed + 1))
  fi
}

# The agent storage's crash suite: its child processes, SIGKILLed at every
# commit, are where it spends its time, and under -race they ran 3.6 times
# slower (211 s against 58 s for the SQLite half on a fresh 2-core machine)
# for nothing the race detector could find there: the same code runs under
# -race in the conformance suite and the harness tests. So it runs without
# -race, in the configuration go vet and the images build (static,
# -trimpath: nothing more to compile), beside the race run.
CRASH_SUITE='^TestCrash(Child|AtChosenPoints|AtRandomPoints|ApprovalExpiresOnce)$'

step_unit() {
  echo "==> go test -race ./... (the crash suite without -race, beside it)"
  local rc=0 crc=0
  CGO_ENABLED=0 go test -trimpath -count=1 -timeout 30m -v -run "$CRASH_SUITE" ./agent/durable/ >"$LOG/crash.log" 2>&1 &
  CRASH_PID=$!
  # The tests that need the API server run in step_k8s, once it is built.
  # -p 4: go test's default (one per core) counts a running test binary as
  # one of its two; while one package's tests ran for minutes, a fresh
  # machine compiled every other package one at a time.
  AFFIDO_SKIP_K8S=1 go test -race -p 4 -count=1 -timeout 30m -v -skip "$CRASH_SUITE" ./... >"$LOG/unit.log" 2>&1 || rc=$?
  wait "$CRASH_PID" || crc=$?
  CRASH_PID=
  report_go "$LOG/unit.log" "$rc" "unit tests"
  report_go "$LOG/crash.log" "$crc" "crash suite"
}

step_e2e() {
  echo "==> e2e-test/run.sh"
  local rc=0
  e2e-test/run.sh >"$LOG/e2e.log" 2>&1 || rc=$?
  grep -E '^(--- FAIL|\s+--- FAIL|\s+\S+_test.go:[0-9]+:|ok|FAIL|e2e:)' "$LOG/e2e.log" || true
  local line
  line=$(grep -E '^e2e: [0-9]+ passed, [0-9]+ failed' "$LOG/e2e.log" | tail -n 1 || true)
  if [[ -n "$line" ]]; then
    passed=$((passed + $(awk '{print $2}' <<<"$line")))
    failed=$((failed + $(awk '{print $4}' <<<"$line")))
  fi
  if [[ $rc -ne 0 && -z "$line" ]]; then
    failed=$((failed + 1))
  fi
  [[ $rc -eq 0 ]] || echo "e2e failed; full log: $LOG/e2e.log" >&2
}

# soak_run MINUTES LOG [ENV...]: the soak alone against a throwaway stack,
# with a workspace quota small enough for its disk-fill fault to reach.
soak_run() {
  local minutes=$1 log=$2 rc=0
  shift 2
  env AFFIDO_SOAK_MINUTES="$minutes" AFFIDO_WORKSPACE_QUOTA_MB=64 \
    AFFIDO_E2E_TIMEOUT="$(awk -v m="$minutes" 'BEGIN { printf "%dm", m + 30 }')" "$@" \
    e2e-test/run.sh '^TestSoak$' >"$log" 2>&1 || rc=$?
  grep -E '^soak:' "$log" || true
  return "$rc"
}

# step_soak runs the chaos soak and counts its result like the e2e step.
step_soak() {
  echo "==> chaos soak: $soak minutes (e2e-test/soak_test.go; log $LOG/soak.log)"
  local rc=0 line
  soak_run "$soak" "$LOG/soak.log" || rc=$?
  line=$(grep -E '^e2e: [0-9]+ passed, [0-9]+ failed' "$LOG/soak.log" | tail -n 1 || true)
  if [[ -n "$line" ]]; then
    passed=$((passed + $(awk '{print $2}' <<<"$line")))
    failed=$((failed + $(awk '{print $4}' <<<"$line")))
  fi
  if [[ $rc -ne 0 && -z "$line" ]]; then
    failed=$((failed + 1))
  fi
  if ! grep -q '^--- PASS: TestSoak ' "$LOG/soak.log" && ! grep -q '^--- FAIL: TestSoak ' "$LOG/soak.log"; then
    echo "the soak did not run; log: $LOG/soak.log" >&2
    failed=$((failed + 1))
  fi
  [[ $rc -eq 0 ]] || echo "the soak failed; full log: $LOG/soak.log" >&2
}

# step_soak_mutation runs a 2-minute soak that deletes one pending reminder
# from an agent's store behind its back. The soak must fail on it: this
# check passes when the reminders invariant reported exactly that reminder
# lost ("soak: mutation drop-reminder: … caught").
step_soak_mutation() {
  echo "==> mutation check: a 2-minute soak that drops one reminder (log $LOG/soak-mutation.log)"
  soak_run 2 "$LOG/soak-mutation.log" AFFIDO_SOAK_MUTATE=drop-reminder || true
  if grep -qE '^soak: mutation drop-reminder: .*: caught$' "$LOG/soak-mutation.log"; then
    echo "mutation check: the soak caught the dropped reminder"
    passed=$((passed + 1))
  else
    echo "mutation check: the soak did NOT catch the dropped reminder; log: $LOG/soak-mutation.log" >&2
    failed=$((failed + 1))
  fi
}

# step_docker_contract runs the engine contract suite (the one the
# Kubernetes step runs against the API server) against the real Docker
# engine, with the agent image the e2e step built, and the browser sandbox
# (Chromium behind the guarded proxy) with its image.
step_docker_contract() {
  echo "==> engine contract suite and the browser sandbox on Docker (manager/provision)"
  local rc=0
  AFFIDO_TEST_DOCKER=1 go test -race -count=1 -timeout 15m -v -run '^(TestContractDocker|TestBrowserSandboxOnDocker)$' ./manager/provision/ >"$LOG/contract-docker.log" 2>&1 || rc=$?
  report_go "$LOG/contract-docker.log" "$rc" "the Docker contract suite"
}

# start_images builds the binaries and the stack's images in the
# background (./dev.sh build: on a fresh machine mostly apt and debootstrap,
# waiting on disk and network), so they overlap the unit tests; e2e's
# ./dev.sh up then finds them built. A failure here is only logged: up
# builds again and reports it.
start_images() {
  echo "==> ./dev.sh build (in the background; log $LOG/images.log)"
  ./dev.sh build >"$LOG/images.log" 2>&1 &
  IMAGES_PID=$!
}

wait_images() {
  [[ -n ${IMAGES_PID:-} ]] || return 0
  wait "$IMAGES_PID" || echo "==> the background image build failed (log $LOG/images.log); ./dev.sh up builds again"
  IMAGES_PID=
}

# start_k8s_assets readies kube-apiserver and etcd in the background (once:
# a no-op when the cache has them), so the first build overlaps the other
# steps.
start_k8s_assets() {
  echo "==> scripts/k8s-assets.sh build (in the background; log $LOG/k8s-assets.log)"
  # niced: it is needed only by the last step, and on 2 cores it would
  # otherwise take half the CPU from the steps on the critical path.
  nice -n 19 scripts/k8s-assets.sh build >"$LOG/k8s-assets.log" 2>&1 &
  K8S_PID=$!
}

# step_k8s waits for the binaries (saying how long a build took, if one
# ran; nothing when they were cached), then runs the Kubernetes tests against
# them; a missing binary is a failure here, not a skip.
step_k8s() {
  local rc=0 dir built
  if ! wait "$K8S_PID"; then
    echo "building the Kubernetes test binaries failed; log: $LOG/k8s-assets.log" >&2
    failed=$((failed + 1))
    return
  fi
  K8S_PID=
  dir=$(tail -n 1 "$LOG/k8s-assets.log")
  built=$(grep -h 'built in' "$LOG/k8s-assets.log" | paste -sd ';' || true)
  echo "==> Kubernetes tests (binaries in $dir: ${built:-cached})"
  AFFIDO_REQUIRE_K8S=1 KUBEBUILDER_ASSETS=$dir go test -race -count=1 -timeout 10m -v ./manager/kube/ >"$LOG/k8s.log" 2>&1 || rc=$?
  report_go "$LOG/k8s.log" "$rc" "Kubernetes tests"
}

# start_test_postgres runs a throwaway Postgres for the unit tests that need
# one (AFFIDO_TEST_POSTGRES_DSN: the registry's, and the agent storage's
# conformance and crash suites): Debian's binaries, on a unix socket in a
# directory of its own, no TCP, as nobody when run as root (Postgres
# refuses root). Without the binaries those tests skip, and say so.
start_test_postgres() {
  local bin as=()
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [[ -z $bin || ! -x $bin/initdb ]]; then
    echo "==> no Postgres binaries (Debian's postgresql): the Postgres unit tests (registry, agent storage) skip"
    return 0
  fi
  PG_DIR=$(mktemp -d /tmp/affido-verify-pg.XXXXXX)
  chmod 755 "$PG_DIR"
  if [[ $(id -u) -eq 0 ]]; then
    chown nobody "$PG_DIR"
    as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  fi
  if "${as[@]}" "$bin/initdb" -D "$PG_DIR/data" -U affido --auth=trust >"$LOG/postgres.log" 2>&1 &&
    "${as[@]}" "$bin/pg_ctl" -D "$PG_DIR/data" -o "-k $PG_DIR -c listen_addresses=''" -l "$PG_DIR/server.log" -w start >>"$LOG/postgres.log" 2>&1 &&
    "${as[@]}" "$bin/createdb" -h "$PG_DIR" -U affido affido >>"$LOG/postgres.log" 2>&1; then
    export AFFIDO_TEST_POSTGRES_DSN="host=$PG_DIR user=affido dbname=affido sslmode=disable"
    PG_STOP=("${as[@]}" "$bin/pg_ctl" -D "$PG_DIR/data" -m immediate stop)
    echo "==> a throwaway Postgres for the unit tests ($bin, socket in $PG_DIR)"
  else
    echo "==> the throwaway Postgres did not start (see $LOG/postgres.log): the Postgres unit tests (registry, agent storage) skip"
  fi
}

cleanup() {
  [[ ${#PG_STOP[@]} -eq 0 ]] || "${PG_STOP[@]}" >/dev/null 2>&1 || true
  [[ -z ${PG_DIR:-} ]] || rm -rf "$PG_DIR"
  [[ -z ${K8S_PID:-} ]] || kill "$K8S_PID" 2>/dev/null || true
  [[ -z ${CRASH_PID:-} ]] || kill "$CRASH_PID" 2>/dev/null || true
  [[ -z ${VET_PID:-} ]] || kill "$VET_PID" 2>/dev/null || true
  [[ -z ${IMAGES_PID:-} ]] || kill "$IMAGES_PID" 2>/dev/null || true
  [[ ${#STRESS_PIDS[@]} -eq 0 ]] || kill "${STRESS_PIDS[@]}" 2>/dev/null || true
}

# start_stress keeps every core busy until verify.sh exits.
start_stress() {
  local n i
  n=$(nproc)
  for ((i = 0; i < n; i++)); do
    (exec yes >/dev/null) &
    STRESS_PIDS+=($!)
  done
  echo "==> stress: $n busy processes (pids ${STRESS_PIDS[*]}) for the whole run"
}

# timed NAME CMD...: runs a step, noting how long it took for the summary
# at the end (where a fresh machine's time goes).
TIMES=()
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  TIMES+=("$(printf '%-28s %4d s' "$name" $((SECONDS - start)))")
  return $rc
}

STRESS_PIDS=()
K8S_PID=
CRASH_PID=
VET_PID=
IMAGES_PID=
PG_DIR=
PG_STOP=()
trap cleanup EXIT
if [[ -n $soak ]]; then
  step_soak
  step_soak_mutation
  echo "verify: $passed passed, $failed failed"
  [[ $failed -eq 0 ]]
  exit
fi
[[ $stress == no ]] || start_stress
start_k8s_assets
start_vet
start_test_postgres
[[ $quick == yes ]] || start_images
timed "unit tests (-race)" step_unit
if [[ $quick == no ]]; then
  timed "images (rest of the build)" wait_images
  timed "e2e (stack up, suites)" step_e2e
  timed "Docker contract suite" step_docker_contract
fi
timed "go vet (rest of it)" step_vet
timed "Kubernetes (rest of build, tests)" step_k8s
echo "==> where the time went ($SECONDS s in all; go vet and the image and Kubernetes builds ran in the background from the start):"
printf '    %s\n' "${TIMES[@]}"
echo "verify: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
