#!/bin/sh
# triage.sh FILE [TOP]: lines per level and the most frequent error messages.
set -eu
file=$1
top=${2:-5}
for level in ERROR WARN INFO DEBUG; do
  printf '%s: %s\n' "$level" "$(grep -c "$level" "$file" || true)"
done
echo "most frequent errors:"
grep 'ERROR' "$file" | sed -e 's/^[^A-Za-z]*//' -e 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -n "$top"
