#!/usr/bin/env bash
# test/oned/frontend.sh: a real OpenNebula front-end for the test suite.
#
#   test/oned/frontend.sh up FE          install OpenNebula (from the build
#                                        cache) as FE, its namespace made;
#                                        its daemons are not started
#   test/oned/frontend.sh stop FE        stop FE's daemons (the tree stays)
#   test/oned/frontend.sh start FE       start FE's oned (with monitord, the
#                                        scheduler, the drivers) and hem
#   test/oned/frontend.sh down           stop every front-end
#   test/oned/frontend.sh exec FE CMD... run CMD on FE as root (oned's user)
#   test/oned/frontend.sh oneadmin FE CMD...  ... as the uid oneadmin (9869)
#   test/oned/frontend.sh sshmux FE on|off  the packages' ssh multiplexing
#                                        for oned's drivers, from FE's next
#                                        start (off: plain ssh, the default)
#   test/oned/frontend.sh env FE         print FE's export lines
#
# FE is one of (ports: test ports, see README):
#   fe74    OpenNebula 7.4.0   oned 127.0.0.1:16780, monitord 10.78.0.1:16781,
#                              hook manager 127.0.0.1:16782 (events) and :16783
#   fe74b   OpenNebula 7.4.0   a second installation on the same Ceph
#                              cluster: 16785, 16786, 16787, 16788
#   fe610   OpenNebula 6.10.5  16794, 16795, 16796, 16797
#
# Each front-end is a mount + UTS namespace (lib.sh; the machine's network)
# in which OpenNebula's tree, installed with ONE_LOCATION=$ONED_DIR/FE/one
# (test/oned/build.sh), also appears where an operator's front-end has it:
# /etc/one is its etc/, /var/lib/one its var/ (so remotes/ is
# /var/lib/one/remotes, where `install.sh frontend` puts rbdfence's drivers).
# /root (oneadmin's home: oned runs as root here, installed with -u root
# -g root; ~/.one/one_auth, the ssh key and config), /run, /tmp (lib.sh
# private_tmp), /var/tmp (oned's
# HostSyncManager runs its `mkdir -p /var/tmp/one` on the front-end),
# /var/log, /var/lib/rbdfence, /etc/systemd (rbdfence-events units) and
# /etc/ceph (the front-end's Ceph access for `rbdfence fence-host`) are
# private too; /etc/hosts names the suite's hosts.
#
# The deviations from OpenNebula's shipped configuration, all in FE/one/etc:
#   oned.conf      PORT, LISTEN_ADDRESS 127.0.0.1; HM_MAD's ports; the `one`
#                  and `linuxcontainers` market drivers dropped (their default
#                  marketplaces would reach the internet,
#                  src/market/MarketPlacePool.cc:38-49 in 7.4.0);
#                  MONITORING_INTERVAL_DATASTORE 60 s (a new datastore has no
#                  capacity until monitored; on a loaded 2-core machine a
#                  Ceph monitor run takes minutes, and at 20 s they piled up
#                  ahead of the images' mkfs); DATASTORE_LOCATION
#                  /var/lib/one/datastores (as without ONE_LOCATION: each
#                  host's own directory)
#   monitord.conf  NETWORK ADDRESS 10.78.0.1 and PORT; probe periods lowered
#                  (SYNC_STATE_VM 180 s -> 30 s, MONITOR_HOST 120 s -> 60 s,
#                  BEACON_HOST 30 s -> 5 s) and STATE_VM raised 5 s -> 30 s:
#                  every probe run is a few Ruby processes on each of six
#                  hosts, and at 2 s they alone kept a 2-core machine busy;
#                  the tests wait on the drivers' answers, not on probes; a host
#                  without beacons is probed again after 10 s, not 180 s
#                  (MONITORING_INTERVAL_HOST, MANAGER_TIMER 2)
#                  HOSTNAME rbdo-FE (the front-end's sshd: SSHD_PORT)
#   onehem-server.conf  the hook manager's ports
#   remotes/etc/vmm/kvm/kvmrc  SHUTDOWN_TIMEOUT 180 s -> 6 s (a guest
#                  without an OS ignores ACPI: onevm poweroff ends with a
#                  destroy after it)
#   vmm_exec/vmm_exec_kvm.conf  EMULATOR /usr/bin/qemu-system-x86_64 (the
#                  packages' /usr/bin/qemu-kvm-one link is not installed,
#                  src/vmm/LibVirtDriverKVM.cc:1151-1154)
# and outside it: oned's ssh is plain. The packages multiplex it (oned's
# PATH starts with the ssh wrapper's directory, opennebula.service; the
# shipped ~oneadmin/.ssh/config has ControlPersist 70s and a ControlPath);
# `sshmux FE on` does both here, for the benchmark's second half.
set -euo pipefail

PROG=frontend.sh
SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/frontend.sh
# shellcheck source=lib.sh
source "$(dirname "$SCRIPT")/lib.sh"

BRIDGE_IP=10.78.0.1
ALL_FES=(fe74 fe74b fe610)
declare -A VERSION=([fe74]=7.4.0 [fe74b]=7.4.0 [fe610]=6.10.5)
declare -A PORT0=([fe74]=16780 [fe74b]=16785 [fe610]=16794)
# The front-end's own sshd (fe74 only: the one free test port): OpenNebula's
# TM copies a VM's directory from the host back to the front-end on undeploy
# and stop (tm/ceph/mv runs ssh to oned.conf's HOSTNAME, rbdo-FE; hosts.sh's
# ssh config names the port). Without it those actions fail.
declare -A SSHD_PORT=([fe74]=16799)
ONEADMIN_UID=9869

valid_fe() {
	local f
	for f in "${ALL_FES[@]}"; do [ "$f" = "$1" ] && return 0; done
	die "unknown front-end '$1' (one of ${ALL_FES[*]})"
}

# fe_env FE: the environment of FE's oneadmin (oned, drivers, CLI).
fe_env() {
	local fe=$1 L=$ONED_DIR/$1/one p=${PORT0[$1]} mux=
	# sshmux on: the packages' PATH (share/pkgs/services/systemd/
	# opennebula.service in 7.4.0), the ssh wrapper's directory first
	[ ! -e "$ONED_DIR/$fe/sshmux" ] || mux=$L/lib/sh/override:
	echo "ONE_LOCATION=$L"
	echo "ONE_AUTH=/root/.one/one_auth"
	echo "ONE_XMLRPC=http://127.0.0.1:$p/RPC2"
	echo "HOME=/root"
	echo "USER=root"
	echo "PATH=$mux$L/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	echo "LANG=C.UTF-8"
}

# edit FILE SED...: sed -i that must change FILE.
edit() {
	local f=$1 before
	shift
	before=$(sha256sum <"$f")
	sed -i "$@" "$f"
	[ "$(sha256sum <"$f")" != "$before" ] || die "no change made to $f by sed $*"
}

fe_files() {
	local fe=$1 d=$ONED_DIR/$1 L=$ONED_DIR/$1/one fs=$ONED_DIR/$1/fs v=${VERSION[$1]} p=${PORT0[$1]} tree
	tree=$(bash "$(dirname "$SCRIPT")/build.sh" "$v")
	rm -rf "$L"
	mkdir -p "$d" "$fs"/{root,run,var-tmp,var-log,var-lib-rbdfence,etc-systemd,etc-ceph}
	chmod 1777 "$fs/var-tmp"
	cp -a "$tree" "$L"
	echo "rbdo-$fe" >"$d/hostname"
	[ -z "${SSHD_PORT[$fe]:-}" ] || sshd_files "$fe" "$BRIDGE_IP:${SSHD_PORT[$fe]}"
	# oneadmin's home: the suite's ssh key, and the password oned gives
	# oneadmin at its first start (ONE_AUTH).
	mkdir -p "$fs/root/.ssh" "$fs/root/.one"
	chmod 700 "$fs/root" "$fs/root/.ssh" "$fs/root/.one"
	install -m 0600 "$ONED_DIR/ssh/id_ed25519" "$fs/root/.ssh/id_ed25519"
	install -m 0644 "$ONED_DIR/ssh/id_ed25519.pub" "$fs/root/.ssh/id_ed25519.pub"
	cp "$ONED_DIR/ssh/config" "$fs/root/.ssh/config" 2>/dev/null ||
		die "the hosts' ssh set-up is missing: run hosts.sh up first"
	printf 'oneadmin:%s\n' "$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$fs/root/.one/one_auth"
	chmod 600 "$fs/root/.one/one_auth"

	# OpenNebula's CLI refuses `onehost sync` as root
	# (src/cli/one_helper/onehost_helper.rb:210-213 in 7.4.0): the
	# front-end's own passwd and group have a oneadmin (uid 9869, home
	# /var/lib/one as in the packages) for that command, with the suite's
	# key and oneadmin's credentials.
	cp /etc/passwd "$d/passwd"
	cp /etc/group "$d/group"
	getent passwd oneadmin >/dev/null || echo "oneadmin:x:$ONEADMIN_UID:$ONEADMIN_UID:OpenNebula:/var/lib/one:/bin/bash" >>"$d/passwd"
	getent group oneadmin >/dev/null || echo "oneadmin:x:$ONEADMIN_UID:" >>"$d/group"
	mkdir -p "$L/var/.ssh" "$L/var/.one"
	cp "$fs/root/.ssh/id_ed25519" "$fs/root/.ssh/config" "$L/var/.ssh/"
	cp "$fs/root/.one/one_auth" "$L/var/.one/"
	: >"$L/var/remotes/.update"
	chown -R "$ONEADMIN_UID:$ONEADMIN_UID" "$L/var/.ssh" "$L/var/.one" "$L/var/remotes/.update"
	chmod 700 "$L/var/.ssh" "$L/var/.one"

	local c=$L/etc/oned.conf
	edit "$c" -e "s/^PORT = 2633\$/PORT = $p/" -e 's/^LISTEN_ADDRESS = "0.0.0.0"$/LISTEN_ADDRESS = "127.0.0.1"/'
	edit "$c" -e 's/^\(    ARGUMENTS  = "-t 15 -m http,s3\),one,linuxcontainers"$/\1"/'
	edit "$c" -e "s/-p 2101 -l 2102 -b 127.0.0.1/-p $((p + 2)) -l $((p + 3)) -b 127.0.0.1/"
	edit "$c" -e 's/^MONITORING_INTERVAL_DATASTORE = 300$/MONITORING_INTERVAL_DATASTORE = 60/'
	edit "$c" -e 's|^#DATASTORE_LOCATION  = /var/lib/one/datastores$|DATASTORE_LOCATION  = /var/lib/one/datastores|'
	# oned's own name, as the TM's copies back to the front-end use it
	# (src/nebula/Nebula.cc:254-282 in 7.4.0: else the canonical name of
	# gethostname(), rbdo-fe for every front-end here).
	printf '\n# rbdfence test front-end: its name on the hosts\x27 bridge\nHOSTNAME = "rbdo-%s"\n' "$fe" >>"$c"
	local m=$L/etc/monitord.conf
	edit "$m" -e "s/^    ADDRESS         = \"[0-9.:]*\",/    ADDRESS         = \"$BRIDGE_IP\",/" -e "s/^    PORT    = 4124,/    PORT    = $((p + 1)),/"
	edit "$m" -e 's/^    BEACON_HOST    = 30,/    BEACON_HOST    = 5,/' -e 's/^    MONITOR_HOST   = 120,/    MONITOR_HOST   = 60,/' \
		-e 's/^    SYNC_STATE_VM  = 180$/    SYNC_STATE_VM  = 30/' -e 's/^    STATE_VM       = 5,/    STATE_VM       = 30,/'
	edit "$m" -e 's/^#MANAGER_TIMER = 15$/MANAGER_TIMER = 2/' -e 's/^#MONITORING_INTERVAL_HOST = 180$/MONITORING_INTERVAL_HOST = 10/'
	# oned.conf's MONITORING_INTERVAL_HOST stays unset: host_error.rb then
	# waits -p times 60 s before it fences (share/hooks/ft/host_error.rb:
	# 160-188 in 7.4.0), as on an operator's front-end; rbdfence fence-host
	# refuses a host oned heard from less than 2 minutes ago, and
	# host_error.rb does not run a refused fence again.
	# A soft poweroff (onevm poweroff) of a guest without an OS, which
	# ignores ACPI, ends with virsh destroy after SHUTDOWN_TIMEOUT (180 s in
	# kvmrc; src/vmm_mad/remotes/kvm/shutdown:52-83): 6 s here.
	edit "$L/var/remotes/etc/vmm/kvm/kvmrc" -e 's/^export SHUTDOWN_TIMEOUT=180$/export SHUTDOWN_TIMEOUT=6/'
	edit "$L/etc/onehem-server.conf" -e "s|tcp://localhost:2101|tcp://localhost:$((p + 2))|" -e "s|tcp://localhost:2102|tcp://localhost:$((p + 3))|"
	printf '\n# rbdfence test front-end (test/oned/frontend.sh)\nEMULATOR = "/usr/bin/qemu-system-x86_64"\n' >>"$L/etc/vmm_exec/vmm_exec_kvm.conf"
	# 6.x: the scheduler is its own daemon (mm_sched), an XML-RPC client of
	# oned polling every SCHED_INTERVAL (15 s); 7.x runs it as oned's
	# SCHED_MAD.
	if [ -f "$L/etc/sched.conf" ]; then
		edit "$L/etc/sched.conf" -e "s|^ONE_XMLRPC = \"http://localhost:2633/RPC2\"|ONE_XMLRPC = \"http://127.0.0.1:$p/RPC2\"|" \
			-e 's/^SCHED_INTERVAL = 15$/SCHED_INTERVAL = 2/'
	fi
}

# fe_ns FE: runs inside the front-end's new namespaces (ns_start).
fe_ns() {
	local fe=$1 d=$ONED_DIR/$1 L=$ONED_DIR/$1/one fs=$ONED_DIR/$1/fs
	shadow /etc one="$L/etc" hosts="$ONED_DIR/etc-hosts" hostname="$d/hostname" systemd="$fs/etc-systemd" ceph="$fs/etc-ceph" \
		passwd="$d/passwd" group="$d/group"
	shadow /var/lib one="$L/var" rbdfence="$fs/var-lib-rbdfence"
	keep_checkout
	private /run "$fs/run"
	private_tmp
	private /var/tmp "$fs/var-tmp"
	private /var/log "$fs/var-log"
	private /root "$fs/root"
	restore_checkout
	mkdir -p /run/lock
}

# fe_start FE: start oned (which starts monitord, the scheduler and the
# drivers) and onehem-server, inside FE; wait until oned answers.
fe_start() {
	local fe=$1 L=$ONED_DIR/$1/one i
	local -a env
	mapfile -t env < <(fe_env "$fe")
	if [ -n "${SSHD_PORT[$fe]:-}" ] && ! { [ -e /run/sshd.pid ] && [ "$(cat "/proc/$(cat /run/sshd.pid)/comm" 2>/dev/null)" = sshd ]; }; then
		mkdir -p /run/sshd
		chmod 755 /run/sshd
		/usr/sbin/sshd -t -f "$ONED_DIR/$fe/sshd_config"
		daemon /usr/sbin/sshd -f "$ONED_DIR/$fe/sshd_config" -E /var/log/sshd.log
	fi
	# ssh's master sockets when sshmux is on (ControlPath of the ssh config)
	mkdir -p /run/one/ssh-socks
	if ! pgrep -f "^$L/bin/oned" >/dev/null; then
		rm -f "$L/var/.lock"
		( cd "$L/var" && daemon_exec env -i "${env[@]}" setsid "$L/bin/oned" -f >>"$L/var/oned.stdout" 2>&1 </dev/null & )
	fi
	for i in $(seq 1 600); do
		if env -i "${env[@]}" timeout 10 "$L/bin/oneuser" show 0 >/dev/null 2>&1; then break; fi
		if ((i > 30)) && ! pgrep -f "^$L/bin/oned" >/dev/null; then
			tail -n 5 "$L/var/oned.stdout" "$L/var/oned.log" >&2 2>/dev/null || true
			die "oned of $fe exited (log: $L/var/oned.log)"
		fi
		if ((i == 600)); then
			tail -n 30 "$L/var/oned.log" >&2 || true
			die "oned of $fe does not answer after 60s (log: $L/var/oned.log)"
		fi
		sleep 0.1
	done
	if [ -x "$L/bin/mm_sched" ] && ! pgrep -f "^$L/bin/mm_sched" >/dev/null; then
		( cd "$L/var" && daemon_exec env -i "${env[@]}" setsid "$L/bin/mm_sched" >>"$L/var/sched.stdout" 2>&1 </dev/null & )
	fi
	if ! pgrep -f "$L/lib/onehem/onehem-server.rb" >/dev/null; then
		daemon env -i "${env[@]}" "$L/bin/onehem-server" start >>"$L/var/onehem.stdout" 2>&1 </dev/null ||
			die "onehem-server of $fe did not start (log: $L/var/onehem.log)"
	fi
}

# fe_stop FE: stop oned and the hook manager, inside FE (the anchor stays).
fe_stop() {
	local fe=$1 L=$ONED_DIR/$1/one pid i
	local -a env
	mapfile -t env < <(fe_env "$fe")
	env -i "${env[@]}" "$L/bin/onehem-server" stop >/dev/null 2>&1 || true
	pkill -TERM -f "^$L/bin/mm_sched" 2>/dev/null || true
	# oned -f writes no pid file: find it by its path (FE's own tree)
	pid=$(pgrep -f "^$L/bin/oned -f" | head -n 1 || true)
	if [[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = oned ]; then
		kill -TERM "$pid"
		for i in $(seq 1 300); do
			[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = oned ] || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
}

main() {
	local cmd=${1:-}
	[ $# -gt 0 ] && shift
	case "$cmd" in
	up)
		[ $# -eq 1 ] || die "usage: $PROG up FE"
		valid_fe "$1"
		if ! anchor_pid "$1" >/dev/null; then
			fe_files "$1"
			ns_start "$1" "" "rbdo-$1" fe_ns "$1"
		fi
		fe_env "$1" | sed 's/^/export /'
		;;
	start | stop)
		[ $# -eq 1 ] || die "usage: $PROG $cmd FE"
		valid_fe "$1"
		# The daemons started here must not hold the caller's stdout or
		# stderr open: everything goes to FE/start.log.
		if ! ns_exec "$1" bash -c "source '$SCRIPT'; fe_$cmd '$1'" </dev/null >>"$ONED_DIR/$1/start.log" 2>&1; then
			tail -n 20 "$ONED_DIR/$1/start.log" >&2
			die "$cmd of $1 failed (log: $ONED_DIR/$1/start.log)"
		fi
		;;
	down)
		local f
		for f in "${ALL_FES[@]}"; do ns_kill "$f"; done
		;;
	exec)
		[ $# -ge 2 ] || die "usage: $PROG exec FE CMD..."
		valid_fe "$1"
		local fe=$1
		shift
		local -a env
		mapfile -t env < <(fe_env "$fe")
		ns_exec "$fe" env -i "${env[@]}" "$@"
		;;
	oneadmin)
		# as the front-end's oneadmin (for the commands that refuse root)
		[ $# -ge 2 ] || die "usage: $PROG oneadmin FE CMD..."
		valid_fe "$1"
		local fe=$1
		shift
		local -a env
		mapfile -t env < <(fe_env "$fe" | sed -e 's|^ONE_AUTH=.*|ONE_AUTH=/var/lib/one/.one/one_auth|' -e 's|^HOME=.*|HOME=/var/lib/one|' -e 's|^USER=.*|USER=oneadmin|')
		ns_exec "$fe" setpriv --reuid "$ONEADMIN_UID" --regid "$ONEADMIN_UID" --clear-groups env -i "${env[@]}" "$@"
		;;
	sshmux)
		# on: oned and its drivers (rbdfence's actions among them) run with
		# the packages' PATH, where OpenNebula's ssh wrapper multiplexes
		# every ssh (ControlMaster auto), and the front-end's ssh config
		# has the packages' ControlPersist and ControlPath, as on an
		# installed front-end; off (the suite's default): no ControlPath,
		# so no ssh is multiplexed, not even rbdfence's (its
		# ControlMaster auto needs one). Takes effect at FE's next start.
		[ $# -eq 2 ] && [[ $2 == on || $2 == off ]] || die "usage: $PROG sshmux FE on|off"
		valid_fe "$1"
		[ -x "$ONED_DIR/$1/one/lib/sh/override/ssh" ] || die "$1 has no ssh wrapper at $ONED_DIR/$1/one/lib/sh/override/ssh"
		local c
		for c in "$ONED_DIR/$1/fs/root/.ssh/config" "$ONED_DIR/$1/one/var/.ssh/config"; do
			[ -f "$c" ] || die "$c is missing: run $PROG up $1 first"
			sed -i '/^# sshmux: begin$/,/^# sshmux: end$/d' "$c"
			# the packages' oneadmin config (share/ssh/etc/config in
			# 7.4.0): ControlMaster no there, the wrapper asks for auto
			[ "$2" = off ] || printf '%s\n' '# sshmux: begin' 'Host *' '	ControlMaster no' '	ControlPersist 70s' \
				'	ControlPath /run/one/ssh-socks/ctl-M-%C.sock' '# sshmux: end' >>"$c"
		done
		if [ "$2" = on ]; then : >"$ONED_DIR/$1/sshmux"; else rm -f "$ONED_DIR/$1/sshmux"; fi
		;;
	env)
		[ $# -eq 1 ] || die "usage: $PROG env FE"
		valid_fe "$1"
		fe_env "$1" | sed 's/^/export /'
		;;
	*) die "usage: $PROG up FE|start FE|stop FE|down|exec FE CMD...|oneadmin FE CMD...|sshmux FE on|off|env FE" ;;
	esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
