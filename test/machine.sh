#!/usr/bin/env bash
# test/machine.sh: leave the machine as the test run found it.
#
#   test/machine.sh snapshot FILE   record what runs and what exists before a run
#   test/machine.sh teardown FILE   stop every daemon the run started (Ceph
#                                   clusters, the netns hosts and their sshds,
#                                   libvirtd, virtlogd and their QEMU domains)
#                                   and delete what it created in the watched
#                                   paths (new entries only: nothing that was
#                                   there before is touched)
#   test/machine.sh check FILE      fail, listing each leftover, unless the
#                                   machine matches the snapshot again and
#                                   teardown removed no stray (STRAYS below)
#
# The test run keeps its state under RBDFENCE_TEST_ROOT (default
# /tmp/rbdfence-test): every test cluster (test/ceph/cluster.sh), the netns
# hosts (test/netns/hosts.sh) and scratch files. Test TCP ports are 16780-16799
# (see README, "Test ports"), away from Ceph's own 6789 and 3300.
#
# What is compared: processes of the kinds a run starts (ceph-mon, ceph-mgr,
# ceph-osd, libvirtd, virtlogd, sshd, qemu-system-*, the zombie test client,
# OpenNebula's oned, onemonitord, scheduler and Ruby drivers, the anchors of
# test/oned's namespaces),
# listening TCP sockets, network namespaces and links, and the entries (with
# their content hash) of the WATCHED paths below. Packages and system users
# that test/deps.sh and test/libvirt/env.sh install (libvirt-qemu, as
# libvirt-daemon-system would) are set-up, like the packages, and stay.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${RBDFENCE_TEST_ROOT:-/tmp/rbdfence-test}
RUNSTATE=/run/rbdfence-test
WATCHED=(
	/etc/libvirt /var/lib/libvirt/qemu /var/log/libvirt /run/libvirt
	/etc/one /var/lib/one /var/tmp/one /var/log/one /var/lib/rbdfence
	/run/rbdfence-test /run/one /usr/local/libexec/rbdfence
	/var/lib/node_exporter
	# what rbdfence's packages and install.sh put in place, were a test to
	# leave it on the machine itself
	/usr/lib/rbdfence /usr/bin/rbdfence /usr/sbin/rbdfence-onedconf
	/etc/logrotate.d/rbdfence /usr/share/doc/rbdfence
	/lib/systemd/system/rbdfence-events.service /lib/systemd/system/rbdfence-events.timer
)
# Of the watched paths, those no test may create on the machine at all:
# OpenNebula's and rbdfence's own places on a production machine. A test
# that needs them makes them below its root (a --prefix, a namespace's
# private mount) or, as test/packaging's TestMachineApt, removes what it
# made itself before it ends. teardown removes such a stray as any new
# entry, but records it, and check fails naming it: a stray writer is a
# test bug (a binary run with the default config, a missing --prefix), not
# something teardown should quietly make good.
# /var/lib/rbdfence is not one yet: in a full run something writes it
# (each test package run alone does not; the suspect is test/packaging's
# TestMachineApt, whose installed hook runs for the other packages' domains
# on the machine's libvirtd meanwhile); teardown removes it.
STRAYS=(
	/etc/one /var/lib/one /var/tmp/one /var/log/one
	/run/one /usr/local/libexec/rbdfence
	/usr/lib/rbdfence /usr/bin/rbdfence /usr/sbin/rbdfence-onedconf
	/etc/logrotate.d/rbdfence /usr/share/doc/rbdfence
	/lib/systemd/system/rbdfence-events.service /lib/systemd/system/rbdfence-events.timer
)
PROCS='^(ceph-mon|ceph-mgr|ceph-osd|libvirtd|virtlogd|sshd|qemu-system-.*|zombie|rbdfence.*|oned|onemonitord|one_sched|ruby.*|onehem-server.*)$'

die() { echo "machine.sh: $*" >&2; exit 2; }

# procs: one line per matching process: comm and command line (pids differ
# between runs, so they are left out; a daemon that was there before and
# still is matches by its command line).
procs() {
	local p comm
	for p in /proc/[0-9]*; do
		comm=$(cat "$p/comm" 2>/dev/null) || continue
		[[ $comm =~ $PROCS ]] || continue
		# A zombie (state Z: it exited and its parent has not reaped it;
		# a stopped Ceph daemon can stay one for a while, its cmdline empty)
		# runs nothing and holds nothing: when it is reaped it goes, and
		# counting it failed runs with "< proc ceph-osd" (stops 33, 36).
		[[ $(awk '/^State:/ {print $2; exit}' "$p/status" 2>/dev/null) == Z ]] && continue
		# sshd's own per-connection children come and go: only listeners count.
		if [[ $comm == sshd ]] && ! tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qE '\[listener\]|-D|-f '; then
			continue
		fi
		printf 'proc %s %s\n' "$comm" "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | sed 's/ *$//')"
	done | sort
}

state() {
	procs
	ss -Hltn 2>/dev/null | awk '{print "listen " $4}' | sort -u
	ip netns list 2>/dev/null | awk '{print "netns " $1}' | sort
	ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}' | sort
	# nftables tables (the NAT of hosts.sh nat toward Ceph)
	if command -v nft >/dev/null; then nft list tables 2>/dev/null | sed 's/^table /nft /' | sort; fi
	local d
	for d in "${WATCHED[@]}"; do
		[ -e "$d" ] || continue
		find "$d" -xdev \( -type f -o -type l -o -type d -o -type s -o -type p \) -printf '%y %p\n' 2>/dev/null |
			while read -r type path; do
				# Logs are compared by name only: a daemon of the machine's
				# own may append to a log that existed before.
				if [ "$type" = f ] && [[ $path != /var/log/* ]]; then
					printf 'file %s %s\n' "$path" "$(sha256sum <"$path" 2>/dev/null | cut -c1-16)"
				else
					printf 'file %s %s\n' "$path" "$type"
				fi
			done
	done | sort
	# New top-level entries of /tmp that the run makes (it runs as root):
	# its test root, Go's t.TempDir and os.MkdirTemp directories of its
	# tests, Ceph's and OpenNebula's files. What other processes put there
	# meanwhile (a compiler's cc*.s, another user's build directory) is
	# not the run's and is not compared; go's own build dirs come and go.
	find /tmp -mindepth 1 -maxdepth 1 -uid 0 \( -name 'rbdfence*' -o -name 'Test*' -o -name 'Fuzz*' -o -name 'Benchmark*' \
		-o -name 'ceph*' -o -name 'one-*' -o -name 'one_*' -o -name 'zombie*' \) ! -name 'rbdfence-machine.*' -printf 'tmp %f\n' 2>/dev/null | sort
}

# libvirt_domain_logs_are_test_output: QEMU's per-domain logs of test
# domains are made by libvirtd for the run; they are new files under
# /var/log/libvirt and are removed with the rest of the new entries.

cmd_snapshot() {
	local f=$1
	rm -f "$f.strays"
	state >"$f.tmp"
	mv -f "$f.tmp" "$f"
}

cmd_teardown() {
	local f=$1 d
	[ -r "$f" ] || die "no snapshot $f"
	# Daemons first, through the scripts that started them (each stops only
	# what it started, and waits for it).
	bash test/libvirt/env.sh stop || echo "machine.sh: test/libvirt/env.sh stop failed" >&2
	RBDFENCE_NETNS_DIR=$ROOT/netns bash test/netns/hosts.sh down >/dev/null ||
		echo "machine.sh: test/netns/hosts.sh down failed" >&2
	# The real-OpenNebula suite (test/oned): the front-ends (oned, monitord,
	# the scheduler, the drivers, onehem-server, their ssh sessions), then
	# the KVM hosts (sshd, virtlogd, libvirtd, QEMU), their namespaces, veths
	# and bridge rbdo0. Its build cache (/var/cache/rbdfence-test) is set-up
	# and stays.
	RBDFENCE_ONED_DIR=$ROOT/oned bash test/oned/frontend.sh down >/dev/null ||
		echo "machine.sh: test/oned/frontend.sh down failed" >&2
	RBDFENCE_ONED_DIR=$ROOT/oned bash test/oned/hosts.sh down >/dev/null ||
		echo "machine.sh: test/oned/hosts.sh down failed" >&2
	if [ -d "$ROOT" ]; then
		for d in "$ROOT"/ceph*; do
			[ -d "$d" ] || continue
			bash test/ceph/cluster.sh stop --dir "$d" >/dev/null || echo "machine.sh: cluster.sh stop --dir $d failed" >&2
		done
		# A test cluster's daemon that its pid file no longer names (seen
		# once at the start of a gate, after a run killed mid-way): by its
		# command line, "ceph-osd -c ROOT/<cluster>/ceph.conf ...".
		local p pids i
		pids=$(pgrep -f -- "^ceph-(mon|mgr|osd) -c $ROOT/" || true)
		if [ -n "$pids" ]; then
			echo "machine.sh: stopping Ceph daemons of $ROOT no pid file names: $(echo $pids)" >&2
			for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
			for i in $(seq 1 50); do
				pgrep -f -- "^ceph-(mon|mgr|osd) -c $ROOT/" >/dev/null || break
				sleep 0.1
			done
			pkill -KILL -f -- "^ceph-(mon|mgr|osd) -c $ROOT/" 2>/dev/null || true
		fi
	fi
	# Then every entry that is new since the snapshot, deepest first. Entries
	# that existed before are never removed, even if their content changed:
	# check reports those.
	local before now
	before=$(grep '^file ' "$f" | awk '{print $2}' | sort -u)
	now=$(state | grep '^file ' | awk '{print $2}' | sort -u)
	local new
	new=$(comm -13 <(echo "$before") <(echo "$now"))
	# The strays (STRAYS), for check: the shallowest new entry of each.
	local s
	for s in "${STRAYS[@]}"; do
		echo "$new" | awk -v s="$s" '$0 == s || index($0, s "/") == 1 { print; exit }'
	done >"$f.strays"
	if [ -n "$new" ]; then
		# Say what the run created outside its root (the shallowest entries).
		echo "machine.sh: removing what the run created: $(echo "$new" | awk '
			{ for (i = 1; i <= n; i++) if (index($0, seen[i] "/") == 1) next; seen[++n] = $0 }
			END { for (i = 1; i <= n && i <= 12; i++) printf "%s%s", (i > 1 ? " " : ""), seen[i]; if (n > 12) printf " (+%d more)", n - 12 }')" >&2
	fi
	echo "$new" | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
		while read -r p; do
			[ -n "$p" ] || continue
			case "$p" in
			/ | /etc | /var | /run | /tmp | /usr | /usr/local) continue ;;
			esac
			if [ -d "$p" ] && [ ! -L "$p" ]; then rm -rf -- "$p"; else rm -f -- "$p"; fi
		done
	# The test state: ROOT, and libvirt's test state dir (test/libvirt/env.sh
	# keeps it after stopping libvirtd, for its log), both the tests' own.
	rm -rf -- "$ROOT" "$RUNSTATE"
}

cmd_check() {
	local f=$1 diff
	[ -r "$f" ] || die "no snapshot $f"
	# Daemons stop asynchronously after SIGTERM in a few cases (sshd
	# children, OSD shutdown): give them a bounded moment to go.
	local i
	for i in $(seq 1 20); do
		diff=$(diff <(sort "$f") <(state | sort) || true)
		[ -z "$diff" ] && break
		sleep 0.5
	done
	local strays=""
	[ ! -s "$f.strays" ] || strays=$(cat "$f.strays")
	rm -f "$f.strays"
	if [ -n "$diff" ]; then
		echo "machine.sh: the test run left the machine changed (< before, > after):" >&2
		echo "$diff" | grep -E '^[<>]' | head -50 >&2
	fi
	if [ -n "$strays" ]; then
		echo "machine.sh: the test run created, outside its root, what only a production install may (teardown removed it; find the test that wrote it):" >&2
		echo "$strays" | sed 's/^/  /' >&2
	fi
	[ -z "$diff" ] && [ -z "$strays" ] || return 1
	echo "machine.sh: the machine is as the test run found it ($(wc -l <"$f") entries compared)"
}

[ $# -eq 2 ] || die "usage: machine.sh snapshot|teardown|check FILE"
case "$1" in
snapshot) cmd_snapshot "$2" ;;
teardown) cmd_teardown "$2" ;;
check) cmd_check "$2" ;;
*) die "usage: machine.sh snapshot|teardown|check FILE" ;;
esac
