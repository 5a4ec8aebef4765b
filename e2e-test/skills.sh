#!/usr/bin/env bash
# e2e-test/skills.sh: the skills suite alone, through Caddy against a
# throwaway stack (see run.sh): install, a marketplace file changed after its
# manifest, persistence across pause/stop/evict, reset, /skill hints, and an
# agent image without package or download tools.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" "$@" 'Skill|NoPowers'
