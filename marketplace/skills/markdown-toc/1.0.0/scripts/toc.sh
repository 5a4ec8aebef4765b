#!/bin/sh
# toc.sh FILE: a Markdown table of contents from the file's headings.
set -eu
awk '
/^```/ { fence = !fence; next }
fence { next }
/^#{1,4} / {
  level = index($0, " ") - 1
  title = substr($0, level + 2)
  anchor = tolower(title)
  gsub(/[^a-z0-9 -]/, "", anchor)
  gsub(/ /, "-", anchor)
  indent = ""
  for (i = 1; i < level; i++) indent = indent "  "
  printf "%s- [%s](#%s)\n", indent, title, anchor
}' "$1"
