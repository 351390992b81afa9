#!/bin/sh
# Runs one bench on this tree and on an older commit, alternately, so a regression shows side by side
# in one run (same machine, same load). The older tree gets this tree's copy of the bench file, which
# imports its newer modules optionally.
#
#   sh bench/against.sh REV [bench file, default sandbox.ts] [rounds, default 2]
#   e.g. BENCH_SANDBOX_DRIVERS=bwrap sh bench/against.sh 4b42557
# BENCH_KEEP_OLD=1 runs the older tree's own copy instead, for a bench whose imports moved since.
set -eu
rev=$1
file=${2:-sandbox.ts}
rounds=${3:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
bun="$here/node_modules/.bin/bun"
old=$(mktemp -d /tmp/agentd-against-XXXXXX)
trap 'rm -rf "$old"' EXIT INT TERM
git -C "$here" archive "$rev" | tar -x -C "$old"
ln -s "$here/node_modules" "$old/node_modules"
[ "${BENCH_KEEP_OLD:-0}" = 1 ] || cp "$here/bench/$file" "$old/bench/$file"
short=$(git -C "$here" rev-parse --short "$rev")
i=1
while [ "$i" -le "$rounds" ]; do
  echo "=== round $i: $short ==="
  (cd "$old" && "$bun" "bench/$file")
  echo "=== round $i: this tree ($(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet HEAD || echo ', with changes')) ==="
  (cd "$here" && "$bun" "bench/$file")
  i=$((i + 1))
done
