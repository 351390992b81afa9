#!/usr/bin/env bash
# Checks the README's test line where nothing was prepared by hand: clones this repository's
# committed HEAD into a temp folder and runs `npm ci && npm test` there, printing the wall time.
# Uncommitted work is not in the clone, on purpose: CI sees only what is committed.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/agentd-fresh-XXXXXX)
trap 'rm -rf "$dir"' EXIT
git clone -q "$src" "$dir/agentd"
cd "$dir/agentd"
echo "fresh clone of $(git rev-parse --short HEAD) in $dir/agentd"
start=$(date +%s)
npm ci --no-audit --no-fund && npm test
status=$?
echo "fresh-clone-check: exit $status after $(( $(date +%s) - start )) s (npm ci && npm test)"
exit $status
