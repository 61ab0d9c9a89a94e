#!/usr/bin/env bash
# Runs every Go fuzz target of the tree, one after the other.
#
#   test/fuzz.sh            gate (make test): each target runs a fixed number
#                           of executions (the table below), then stops
#   test/fuzz.sh 30s        exploration (make fuzz): each target runs for a
#                           duration; FUZZTIME in the Makefile
#   RBDFENCE_FUZZ_ONLY=RE   only the targets whose DIR:NAME matches RE
#
# Why counts in the gate: with a duration, Go 1.26's fuzz coordinator can
# report "context deadline exceeded" as a failure when its own -fuzztime
# deadline fires (go.dev/issue/75804, fixed in Go 1.27): a red gate that is not
# a finding. An execution count sets a limit instead of a deadline context, so
# that cannot happen; minimisation is bounded by a count for the same reason.
# Exploration keeps durations (a rare false red there is harmless: rerun).
#
# A hang is judged by the executions the machine gives the target, not by
# wall time (a busy machine, two CPU hogs beside the gate, slows a target
# tenfold and is no defect): a target whose execution count has not grown
# for STALL_SECONDS while it fuzzes, or that has not started fuzzing
# (its instrumented build) within BUILD_SECONDS, is stopped and reported
# as a hang. The counts below take a few seconds each here (2-core machine,
# idle); each target's line says the executions per second it got.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=count
dur=
if [ $# -gt 0 ]; then
	[[ $1 =~ ^[0-9]+(ms|s|m|h)$ ]] || { echo "fuzz.sh: usage: fuzz.sh [DURATION like 30s]" >&2; exit 2; }
	mode=duration dur=$1
fi
STALL_SECONDS=${RBDFENCE_FUZZ_STALL_SECONDS:-120}
BUILD_SECONDS=${RBDFENCE_FUZZ_BUILD_SECONDS:-900}

# PROGRESS: a progress line of a fuzz run, "fuzz: elapsed: 3s, execs: 12345
# (4115/sec), ...": its elapsed is a Go duration, "1m3s" after a minute
# (a pattern of "[0-9]+s" alone stopped there and took a busy run for a hang).
PROGRESS='^fuzz: elapsed: ([0-9]+h)?([0-9]+m)?[0-9]+s, execs: [0-9]+'

# progress LOG: the executions of the last progress line of a fuzz run,
# empty before the first one.
progress() { grep -oE "$PROGRESS" "$1" | tail -n 1 | awk '{print $NF}'; }

# seconds D: the seconds of a Go duration of whole seconds (1h2m3s: 3723).
seconds() { awk -v d="$1" 'BEGIN { s = 0; while (match(d, /^[0-9]+[hms]/)) { n = substr(d, 1, RLENGTH - 1); u = substr(d, RLENGTH, 1); s += n * (u == "h" ? 3600 : u == "m" ? 60 : 1); d = substr(d, RLENGTH + 1) } print s }'; }

# watch PID LOG: wait for the fuzz run PID; kill it when its executions
# stall (or its build does not end); return its exit status, 124 for a hang.
watch() {
	local pid=$1 log=$2 t=0 seen="" still=0 now
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		t=$((t + 1))
		now=$(progress "$log")
		if [ -z "$now" ]; then
			[ "$t" -lt "$BUILD_SECONDS" ] && continue
		elif [ "$now" != "$seen" ]; then
			seen=$now still=0
			continue
		else
			still=$((still + 1))
			[ "$still" -lt "$STALL_SECONDS" ] && continue
		fi
		pkill -KILL -P "$pid" 2>/dev/null || true
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		return 124
	done
	wait "$pid"
}

# Executions per target in the gate, sized from the rate each reaches here
# (executions per second measured on this 2-core machine, slowest of three
# runs, in the comment) for about 3 s of fuzzing each. A target not listed
# gets DEFAULT_COUNT.
DEFAULT_COUNT=30000
count_for() {
	case "$1" in
	internal/opennebula:FuzzParseVM) echo 30000 ;;      # ~12k/s: XML through encoding/xml
	internal/domxml:FuzzParse) echo 30000 ;;            # ~13k/s: libvirtxml
	internal/config:FuzzParse) echo 30000 ;;            # ~10k/s: yaml.v3
	internal/frontend:FuzzDecodeBase64) echo 100000 ;;  # ~25k/s
	internal/frontend:FuzzDriverArgs) echo 60000 ;;     # ~10k/s
	internal/hook:FuzzParseArgs) echo 60000 ;;          # ~13k/s
	internal/ceph:FuzzParseBlocklist) echo 100000 ;;    # ~24k/s
	internal/ceph:FuzzParseWatchers) echo 150000 ;;     # ~50k/s
	internal/ceph:FuzzDecodeID) echo 100000 ;;          # ~32k/s
	internal/engine:FuzzParseAddr) echo 150000 ;;       # ~26k/s
	internal/hoststep:FuzzReadRequest) echo 100000 ;;   # ~30k/s
	internal/hoststep:FuzzReadResponse) echo 150000 ;;  # ~50k/s
	internal/hostspool:FuzzReadAck) echo 60000 ;;       # ~20k/s
	internal/hostspool:FuzzReadList) echo 45000 ;;      # ~15k/s: events validated
	*) echo "$DEFAULT_COUNT" ;;
	esac
}

log=$(mktemp /tmp/rbdfence-fuzz.XXXXXX)
trap 'rm -f "$log"' EXIT
n=0
while read -r f; do
	dir=$(dirname "$f")
	for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | awk '{print $2}'); do
		[[ "$dir:$fn" =~ ${RBDFENCE_FUZZ_ONLY:-.} ]] || continue
		if [ "$mode" = count ]; then
			c=$(count_for "$dir:$fn")
			budget=(-fuzztime "${c}x" -fuzzminimizetime 200x)
			what="${c} executions"
		else
			budget=(-fuzztime "$dur")
			what=$dur
		fi
		echo "fuzz ./$dir $fn ($what)"
		start=$(date +%s.%N)
		rc=0
		go test -tags pacific -run '^$' -fuzz "^${fn}\$" "${budget[@]}" "./$dir" >"$log" 2>&1 &
		watch $! "$log" || rc=$?
		secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
		if [ "$rc" -eq 124 ]; then
			cat "$log"
			echo "fuzz: ./$dir $fn made no progress for ${STALL_SECONDS}s (executions: $(progress "$log" || true); or its build took over ${BUILD_SECONDS}s): a hang (no input was blamed; see the output above)" >&2
			exit 1
		fi
		if [ "$rc" -ne 0 ]; then
			cat "$log"
			echo "fuzz: ./$dir $fn failed (exit $rc); a failing input is in ./$dir/testdata/fuzz/$fn if one was written" >&2
			exit 1
		fi
		last=$(grep -E "$PROGRESS" "$log" | tail -n 1 || true)
		execs=$(grep -oE 'execs: [0-9]+' <<<"$last" | awk '{print $2}')
		el=$(grep -oE 'elapsed: [0-9hms]+' <<<"$last" | awk '{print $2}')
		rate=$(awk -v x="${execs:-0}" -v e="$(seconds "${el:-0s}")" 'BEGIN{ if (e > 0) printf "%d", x / e; else print "?" }')
		echo "  ok: ${execs:-?} executions in ${el:-?} of fuzzing (${rate} execs/s), no failure (${secs}s with the build)"
		n=$((n + 1))
	done
done < <(git grep -l -E '^func Fuzz' -- '*_test.go')
[ "$n" -gt 0 ] || { echo "fuzz: no fuzz target found" >&2; exit 1; }
echo "fuzz: $n targets, no failure"
