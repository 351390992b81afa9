#!/usr/bin/env bash
# The README's test line runs this: the whole suite, then the 10 slowest tests and one summary line.
# Test files run in AGENTD_TEST_WORKERS processes at once (default 3 on this 2-core machine): most of
# a test's time is spent waiting on sandboxes, CLIs and the spec's own timeouts, so a third file
# fills the waits (about 210 s against 245 s with two). Four were tried at stop 30: 224-255 s, and a
# restart test's 15 s wait for a checkpoint ran out under the added load.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
workers=${AGENTD_TEST_WORKERS:-3}
start=$(date +%s)
if [ "$workers" -gt 1 ]; then
  bun test --timeout 60000 --parallel="$workers" "$@" 2>&1 | tee "$log"
else
  bun test --timeout 60000 "$@" 2>&1 | tee "$log"
fi
status=${PIPESTATUS[0]}
echo
echo "slowest tests:"
grep -E '^\((pass|fail)\) .*\[[0-9.]+ms\]$' "$log" | sed -E 's/^(.*) \[([0-9.]+)ms\]$/\2\t\1/' | sort -rn | head -10 \
  | awk -F '\t' '{ printf "  %8.1f s  %s\n", $1 / 1000, $2 }'
# What each failed test printed just before its (fail) line (its error and stack), at the end where
# a log cut to its tail still shows it.
if grep -q '^(fail) ' "$log"; then
  echo
  echo "why they failed:"
  # Up to bun's own list of failures at the end, which names them without their errors.
  awk '/^[0-9]+ tests? failed:$/ { exit } { print }' "$log" | grep -v '^(pass) ' | grep -B 25 '^(fail) ' | grep -v '^--$' | tail -n 120
fi
# bun's own totals: they count errors outside tests (a file that fails to load) as failures too.
summary=$(grep -E '^ [0-9]+ (pass|fail|skip|error)' "$log" | tr -s ' \n' ' ')
echo "npm test:${summary:- no totals}, $(( $(date +%s) - start )) s of bun test ($workers workers), exit $status"
exit "$status"
