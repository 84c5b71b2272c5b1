#!/usr/bin/env bash
# The duplicate-code scan of issue 31: the six source packages (tracked files and untracked
# ones git does not ignore), read together by the `duplicates` tool (pairs of places sharing
# six or more lines, the same or the same shape). Usage: scripts/dupscan.sh [MOST_ROWS]
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git ls-files -co --exclude-standard -- service shunter worker trainer_core storage launcher |
  while read -r f; do
    [ -f "$f" ] && mkdir -p "$tree/$(dirname "$f")" && cp "$f" "$tree/$f"
  done
duplicates --repo "$tree" --most "${1:-200}" --seconds 300
