#!/bin/sh
# summarize.sh FILE [SEP]: rows, columns, and min/max/mean of numeric columns.
set -eu
file=$1
sep=${2:-,}
awk -F"$sep" '
NR == 1 { n = NF; for (i = 1; i <= NF; i++) name[i] = $i; next }
{
  rows++
  for (i = 1; i <= n; i++) {
    v = $i
    if (v ~ /^-?[0-9]+(\.[0-9]+)?$/) {
      num[i]++; sum[i] += v
      if (!(i in min) || v + 0 < min[i]) min[i] = v + 0
      if (!(i in max) || v + 0 > max[i]) max[i] = v + 0
    }
  }
}
END {
  printf "rows: %d\ncolumns: %d\n", rows, n
  for (i = 1; i <= n; i++) {
    if (num[i] == rows && rows > 0) printf "%s: min %g, max %g, mean %g\n", name[i], min[i], max[i], sum[i] / rows
    else printf "%s: text\n", name[i]
  }
}' "$file"
