#!/usr/bin/env bash
# e2e-test/reminders.sh: the reminder suite alone, through Caddy against a
# throwaway stack (see run.sh): reminders fire on time while the sandbox is
# paused, stopped or removed, and across a manager restart.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" "$@" 'Reminder|PauseIfIdle|RetryBackoff'
