#!/usr/bin/env bash
# test/run.sh: the whole test run behind `make test`.
#
# 1. snapshot the machine (test/machine.sh), 2. every Go test (real Ceph,
# libvirtd, QEMU, sshd: the tests start them under RBDFENCE_TEST_ROOT) and,
# beside them, 3. every fuzz target for a fixed number of executions
# (test/fuzz.sh), then,
# whatever happened: 4. stop and delete everything the run started or created
# and 5. check that the machine is as it was (a leftover fails the run).
#
# RBDFENCE_TEST_KEEP=1 skips 4 and 5: the clusters, hosts and daemons stay up
# and the next run reuses them (faster when iterating on one package); end
# with `make test-clean`.
set -euo pipefail
cd "$(dirname "$0")/.."
export RBDFENCE_TEST_ROOT=${RBDFENCE_TEST_ROOT:-/tmp/rbdfence-test}
GO=${GO:-go}
# What no test can do without, said at once rather than minutes in: the
# OpenNebula sources test/oned builds (or finds in its cache).
for v in 7.4.0 6.10.5; do
	bash test/oned/build.sh --check "$v"
done
snap=$(mktemp /tmp/rbdfence-machine.XXXXXX)

fuzzpid= fuzzlog= gotestlog=
finish() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$fuzzpid" ] && kill -0 "$fuzzpid" 2>/dev/null; then
		# interrupted: the fuzzing beside the tests stops too
		pkill -TERM -P "$fuzzpid" 2>/dev/null || true
		kill "$fuzzpid" 2>/dev/null || true
		wait "$fuzzpid" 2>/dev/null || true
	fi
	[ -z "$fuzzlog" ] || rm -f "$fuzzlog"
	[ -z "$gotestlog" ] || rm -f "$gotestlog"
	if [ "${RBDFENCE_TEST_KEEP:-0}" = 1 ]; then
		echo "run.sh: RBDFENCE_TEST_KEEP=1: test daemons left running under $RBDFENCE_TEST_ROOT (make test-clean stops them)"
		rm -f "$snap" "$snap.strays"
		exit "$rc"
	fi
	bash test/machine.sh teardown "$snap" || rc=1
	if ! bash test/machine.sh check "$snap"; then
		[ "$rc" -ne 0 ] || rc=1
	fi
	rm -f "$snap" "$snap.strays"
	exit "$rc"
}

if [ "${RBDFENCE_TEST_KEEP:-0}" != 1 ] && { [ -e "$RBDFENCE_TEST_ROOT" ] || [ -e /run/rbdfence-test ]; }; then
	# A kept run (or a killed one) left daemons or test state: stop and
	# delete them first, so that this run starts from a clean machine and
	# can leave it clean.
	echo "run.sh: stopping what an earlier run left in $RBDFENCE_TEST_ROOT and /run/rbdfence-test"
	bash test/machine.sh snapshot "$snap"
	bash test/machine.sh teardown "$snap"
fi
bash test/machine.sh snapshot "$snap"
trap finish EXIT
trap 'exit 130' INT TERM

# The fuzz targets (fixed execution counts, test/fuzz.sh) run beside the Go
# tests, niced: most of the tests' time is spent waiting on daemons (oned,
# libvirtd, Ceph), and the fuzzing takes the idle CPU. Its output comes after
# the tests'.
fuzzlog=$(mktemp /tmp/rbdfence-fuzzlog.XXXXXX)
nice -n 10 bash test/fuzz.sh >"$fuzzlog" 2>&1 &
fuzzpid=$!
# go test runs the packages in the order given, two at a time here: the
# longest ones first (test/oned 9-13 minutes, test/frontend 3-6,
# test/packaging 2-3, test/hook about 2: Dec 3), so that the short ones fill
# the other slot instead of the long ones running last, alone.
rc=0
t0=$SECONDS
gotestlog=$(mktemp /tmp/rbdfence-gotest.XXXXXX)
$GO test -tags pacific -count=1 -timeout 40m ./test/oned ./test/packaging ./test/frontend ./test/hook ./... 2>&1 | tee "$gotestlog" || rc=$?
t1=$SECONDS
fuzzrc=0
wait "$fuzzpid" || fuzzrc=$?
fuzzpid=
cat "$fuzzlog"
echo "run.sh: go test $((t1 - t0)) s, then $((SECONDS - t1)) s more for the fuzz targets"
# Where the time went: the packages that took longest (two run at a time).
echo "run.sh: longest packages: $(awk '($1 == "ok" || $1 == "FAIL") && $3 ~ /^[0-9.]+s$/ { sub(/^github.com\/rbdfence\/rbdfence\//, "", $2); print $3 + 0, $2 }' "$gotestlog" |
	sort -rn | head -6 | awk '{ printf "%s%s %d s", (NR > 1 ? ", " : ""), $2, $1 }')"
rm -f "$gotestlog"
[ "$rc" -ne 0 ] || rc=$fuzzrc
exit "$rc"
