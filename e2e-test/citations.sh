#!/usr/bin/env bash
# e2e-test/citations.sh: the citations suite alone, through Caddy against a
# throwaway stack (see run.sh): a cited answer verified with its document,
# version, line and quote, re-verified after a restart, broken by altering
# the stored bytes; every bad reply kind rejected with nothing written.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" "$@" 'Citation|CitedRepl'
