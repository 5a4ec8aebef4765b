#!/usr/bin/env bash
# verify.sh: every test. go vet, the unit tests with -race, then the e2e
# suites and sandbox lifecycle checks against a real stack (Docker, Postgres,
# Caddy) that e2e-test/run.sh starts and removes. Ends with "N passed, N failed".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
export GOTOOLCHAIN=local

usage() {
  cat <<USAGE
Usage: ./verify.sh [--quick] [--stress]

  (no option)  go vet, go test -race ./..., then e2e-test/run.sh against real Docker
  --quick      go vet and the unit tests only
  --stress     the same, while one busy-looping process per core competes for
               the CPU the whole time (the suite must hold on a busy machine)
USAGE
}

quick=no
stress=no
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=yes ;;
    --stress) stress=yes ;;
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

step_vet() {
  echo "==> go vet"
  go vet ./... && go vet -tags e2e ./e2e-test/
}

step_unit() {
  echo "==> go test -race ./..."
  local rc=0
  # The crash suite alone takes over 10 min with --stress on a 2-core VM.
  go test -race -count=1 -timeout 30m -v ./... >"$LOG/unit.log" 2>&1 || rc=$?
  grep -E '^(ok|FAIL|---|panic)|^\s+--- FAIL' "$LOG/unit.log" | grep -vE '^\s*--- PASS' || true
  count_go "$LOG/unit.log"
  if [[ $rc -ne 0 ]]; then
    [[ $(grep -cE '^\s*--- FAIL' "$LOG/unit.log" || true) -gt 0 ]] || failed=$((failed + 1))
    echo "unit tests failed; full log: $LOG/unit.log" >&2
  fi
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

# start_stress keeps every core busy until verify.sh exits.
start_stress() {
  local n i
  n=$(nproc)
  for ((i = 0; i < n; i++)); do
    (exec yes >/dev/null) &
    STRESS_PIDS+=($!)
  done
  trap 'kill "${STRESS_PIDS[@]}" 2>/dev/null || true' EXIT
  echo "==> stress: $n busy processes (pids ${STRESS_PIDS[*]}) for the whole run"
}

STRESS_PIDS=()
[[ $stress == no ]] || start_stress
step_vet || { echo "go vet failed"; echo "0 passed, 1 failed"; exit 1; }
step_unit
if [[ $quick == no ]]; then
  step_e2e
fi
echo "verify: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
