#!/usr/bin/env bash
# Runs every Go fuzz target for a bounded time each (default 10s).
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
git grep -l -E '^func Fuzz' -- '*_test.go' | while read -r f; do
	pkg=./$(dirname "$f")
	for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | awk '{print $2}'); do
		echo "fuzz $pkg $fn ($t)"
		go test -tags pacific -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$pkg" >/tmp/rbdfence-fuzz.log 2>&1 || { cat /tmp/rbdfence-fuzz.log; exit 1; }
		execs=$(grep -oE 'execs: [0-9]+' /tmp/rbdfence-fuzz.log | tail -n 1 | awk '{print $2}')
		echo "  ok: ${execs:-?} executions in $t, no failure"
	done
done
