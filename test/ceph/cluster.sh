#!/usr/bin/env bash
# One-node Ceph test cluster for rbdfence tests (Ceph 16 / Pacific).
#
#   test/ceph/cluster.sh start|stop|status|env [--dir DIR] [--addr IP] [--port PORT]
#   test/ceph/cluster.sh pause|resume mon|mgr|osd [--dir DIR ...]   (fault tests)
#
# One mon, one mgr, one memstore OSD, cephx on, everything running as the
# calling user (root) with data, pid files, sockets and logs under DIR only:
# nothing is read from or written to /etc/ceph or /var/lib/ceph.
#
#   start   boot the cluster (or find it already up) and print the env
#   stop    kill the processes this script started in DIR, remove DIR
#   status  exit 0 if the cluster in DIR is up, 1 if not
#   env     print the env (without checking that the cluster is up)
#
# start and env print only `export NAME=VALUE` lines on stdout (use
# `eval "$(test/ceph/cluster.sh start)"`); progress and errors go to stderr.
#
# Pool `one` (rbd initialised) and these users are created:
#   client.admin           everything; keyring DIR/ceph.client.admin.keyring,
#                          for setup only
#   client.libvirt         mon 'profile rbd' osd 'profile rbd pool=one'
#                          (exactly OpenNebula's documented caps)
#   client.rbdfence-admin  mon 'profile rbd, allow command "osd blocklist"
#                          with blocklistop=rm' osd 'profile rbd pool=one'
#                          (may also remove blocklist entries: unfence)
#
# Monitor addresses: on the default port 6789 the monitor listens on
# [v2:IP:3300,v1:IP:6789], like a production monitor. On any other port it
# listens only on v1:IP:PORT, given explicitly to monmaptool (--addv) and in
# `mon host`, as DESIGN.md asks. Clients may
# still use a bare IP:PORT (as QEMU does): Ceph reads a non-6789 port as
# msgr2, gets "peer is using msgr V1 protocol" (one stderr line) and falls
# back to v1. RBDFENCE_TEST_MON is IP:PORT; RBDFENCE_TEST_MON_HOST is the
# exact `mon host` value (single-quoted on the default port: brackets).
#
# The env lines (values are plain unless noted):
#   RBDFENCE_TEST_MON=IP:PORT            RBDFENCE_TEST_MON_HOST=<mon host>
#   RBDFENCE_TEST_CONF=DIR/client.conf   (fsid, mon host, cephx; no keyring)
#   RBDFENCE_TEST_ADMIN_CONF=DIR/ceph.conf (the cluster's own conf)
#   RBDFENCE_TEST_KEYRING=DIR/ceph.client.libvirt.keyring  RBDFENCE_TEST_USER=libvirt
#   RBDFENCE_TEST_ADMIN_KEYRING=DIR/ceph.client.admin.keyring
#   RBDFENCE_TEST_RMUSER=rbdfence-admin
#   RBDFENCE_TEST_RMUSER_KEYRING=DIR/ceph.client.rbdfence-admin.keyring
#   RBDFENCE_TEST_POOL=one               RBDFENCE_TEST_CEPH_DIR=DIR
# The libvirt and rbdfence-admin keyrings are mode 0644 (test cluster only,
# so that tests can run clients as a non-root user); admin's is 0600.
#
# --addr may be IPv6 (::1 or [::1]): the daemons then bind IPv6 only
# (ms bind ipv6) and RBDFENCE_TEST_MON is [IP]:PORT.
#
# Defaults: DIR ${RBDFENCE_CEPH_DIR:-$RBDFENCE_TEST_ROOT/ceph} (the test root
# defaults to /tmp/rbdfence-test), IP 127.0.0.1, PORT ${RBDFENCE_CEPH_PORT:-16789}
# (test ports are 16780-16799, away from Ceph's own 6789/3300). Several clusters may run at once with
# different DIR and IP:PORT. Concurrent `start`s on one DIR are serialised
# with flock on DIR/.lock: the second one finds the cluster up.
set -euo pipefail

PROG=cluster.sh
BOOT_TIMEOUT=${RBDFENCE_CEPH_BOOT_TIMEOUT:-90}
LOCK_TIMEOUT=${RBDFENCE_CEPH_LOCK_TIMEOUT:-300}
MEMSTORE_BYTES=$((2 * 1024 * 1024 * 1024))
POOL=one

# Never let the caller's Ceph environment leak into what we run.
unset CEPH_ARGS CEPH_CONF CEPH_KEYRING 2>/dev/null || true

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}
usage() {
	printf 'usage: %s start|stop|status|env|pause NAME|resume NAME [--dir DIR] [--addr IP] [--port PORT]\n' "$PROG" >&2
	exit 2
}

CMD=${1:-}
[ $# -gt 0 ] && shift
ARG=
case "$CMD" in
start | stop | status | env) ;;
pause | resume)
	# fault tests: SIGSTOP/SIGCONT one daemon (mon, mgr, osd)
	ARG=${1:-}
	[ $# -gt 0 ] && shift
	;;
-h | --help | help) usage ;;
*) usage ;;
esac

DIR=${RBDFENCE_CEPH_DIR:-${RBDFENCE_TEST_ROOT:-/tmp/rbdfence-test}/ceph}
ADDR=127.0.0.1
PORT=${RBDFENCE_CEPH_PORT:-16789}
while [ $# -gt 0 ]; do
	case "$1" in
	--dir) [ $# -ge 2 ] || usage; DIR=$2; shift 2 ;;
	--dir=*) DIR=${1#--dir=}; shift ;;
	--addr) [ $# -ge 2 ] || usage; ADDR=$2; shift 2 ;;
	--addr=*) ADDR=${1#--addr=}; shift ;;
	--port) [ $# -ge 2 ] || usage; PORT=$2; shift 2 ;;
	--port=*) PORT=${1#--port=}; shift ;;
	*) printf '%s: unknown argument %q\n' "$PROG" "$1" >&2; usage ;;
	esac
done

# --addr: an IPv4 address, or an IPv6 address (e.g. ::1, with or without
# brackets): the cluster then binds IPv6 only, and its clients are IPv6.
ADDR=${ADDR#[}
ADDR=${ADDR%]}
IPV6=
if [[ $ADDR == *:* ]]; then
	[[ $ADDR =~ ^[0-9A-Fa-f:.]+$ ]] && [[ $ADDR != *:::* ]] && [ "${#ADDR}" -le 45 ] ||
		die "--addr must be an IPv4 or IPv6 address, got '$ADDR'"
	IPV6=1
else
	[[ $ADDR =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] ||
		die "--addr must be an IPv4 or IPv6 address, got '$ADDR'"
	for o in "${BASH_REMATCH[@]:1}"; do
		[ "$((10#$o))" -le 255 ] || die "--addr must be an IPv4 or IPv6 address, got '$ADDR'"
	done
fi
[[ $PORT =~ ^[0-9]{1,5}$ ]] && [ "$((10#$PORT))" -ge 1 ] && [ "$((10#$PORT))" -le 65535 ] ||
	die "--port must be a TCP port number, got '$PORT'"
PORT=$((10#$PORT))
[ -n "$DIR" ] || die "--dir must not be empty"
DIR=$(realpath -m -- "$DIR")
case "$DIR" in
/ | /tmp | /var | /var/tmp | /root | /home | /etc | /etc/ceph | /var/lib/ceph | /var/lib/ceph/*)
	die "refusing to use $DIR as the cluster directory" ;;
esac

# HOSTADDR is ADDR as it goes before ":PORT" (IPv6 in brackets).
HOSTADDR=$ADDR
[ -z "$IPV6" ] || HOSTADDR="[$ADDR]"
if [ "$PORT" -eq 6789 ]; then
	MON_ADDRV="[v2:$HOSTADDR:3300,v1:$HOSTADDR:6789]"
	MON_HOST="[v2:$HOSTADDR:3300,v1:$HOSTADDR:6789]"
	MON_PORTS="3300 6789"
else
	MON_ADDRV="[v1:$HOSTADDR:$PORT]"
	MON_HOST="v1:$HOSTADDR:$PORT"
	MON_PORTS="$PORT"
fi
# ms bind: the messengers bind the address family of ADDR only.
MS_BIND="ms bind ipv4 = true
ms bind ipv6 = false"
[ -z "$IPV6" ] || MS_BIND="ms bind ipv4 = false
ms bind ipv6 = true"

CONF=$DIR/ceph.conf
CLIENT_CONF=$DIR/client.conf
ADMIN_KEYRING=$DIR/ceph.client.admin.keyring
LIBVIRT_KEYRING=$DIR/ceph.client.libvirt.keyring
RMUSER=rbdfence-admin
RMUSER_KEYRING=$DIR/ceph.client.$RMUSER.keyring
RUN=$DIR/run
LOGD=$DIR/log
MARKER=$DIR/.rbdfence-ceph
READY=$DIR/.ready
PARAMS=$DIR/.params
LOCKF=$DIR/.lock
PARAMS_LINE="addr=$ADDR port=$PORT"
STARTED=

print_env() {
	local kv k v
	for kv in \
		"RBDFENCE_TEST_MON=$HOSTADDR:$PORT" \
		"RBDFENCE_TEST_MON_HOST=$MON_HOST" \
		"RBDFENCE_TEST_CONF=$CLIENT_CONF" \
		"RBDFENCE_TEST_ADMIN_CONF=$CONF" \
		"RBDFENCE_TEST_KEYRING=$LIBVIRT_KEYRING" \
		"RBDFENCE_TEST_USER=libvirt" \
		"RBDFENCE_TEST_ADMIN_KEYRING=$ADMIN_KEYRING" \
		"RBDFENCE_TEST_RMUSER=$RMUSER" \
		"RBDFENCE_TEST_RMUSER_KEYRING=$RMUSER_KEYRING" \
		"RBDFENCE_TEST_POOL=$POOL" \
		"RBDFENCE_TEST_CEPH_DIR=$DIR"; do
		k=${kv%%=*}
		v=${kv#*=}
		# plain when safe, else single-quoted (brackets: MON_HOST on the
		# default port, and MON and MON_HOST of an IPv6 cluster)
		if [[ $v =~ ^[A-Za-z0-9_./:@%+-]*$ ]]; then
			printf 'export %s=%s\n' "$k" "$v"
		else
			printf "export %s='%s'\n" "$k" "${v//\'/\'\\\'\'}"
		fi
	done
}

# check_params fails if DIR holds a cluster started with another addr/port.
check_params() {
	if [ -f "$PARAMS" ]; then
		local have
		have=$(cat "$PARAMS")
		[ "$have" = "$PARAMS_LINE" ] ||
			die "the cluster in $DIR was started with $have, not $PARAMS_LINE; stop it first or use another --dir"
	fi
}

ceph_admin() { timeout 30 ceph -c "$CONF" --connect-timeout 10 "$@"; }
rbd_libvirt() {
	timeout 30 rbd -c "$CLIENT_CONF" --id libvirt --keyring "$LIBVIRT_KEYRING" "$@"
}

# is_ours PID: true if PID is a live ceph-mon/mgr/osd started with -c DIR/ceph.conf.
is_ours() {
	local pid=$1 exe arg prev=
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	exe=${exe% (deleted)}
	case "${exe##*/}" in
	ceph-mon | ceph-mgr | ceph-osd) ;;
	*) return 1 ;;
	esac
	while IFS= read -r -d '' arg; do
		if [ "$prev" = "-c" ] && [ "$arg" = "$CONF" ]; then
			return 0
		fi
		prev=$arg
	done <"/proc/$pid/cmdline" 2>/dev/null
	return 1
}

# our_pids prints the pids from DIR/run/*.pid that are still our processes.
our_pids() {
	local f pid
	for f in "$RUN"/mon.pid "$RUN"/mgr.pid "$RUN"/osd.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f" 2>/dev/null || true)
		if is_ours "$pid"; then echo "$pid"; fi
	done
}

kill_ours() {
	local pids pid i
	pids=$(our_pids)
	[ -n "$pids" ] || return 0
	log "stopping ceph processes $(echo $pids) in $DIR"
	for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
	for i in $(seq 1 100); do
		pids=$(our_pids)
		[ -n "$pids" ] || return 0
		sleep 0.1
	done
	for pid in $pids; do
		if is_ours "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
	done
	for i in $(seq 1 50); do
		[ -n "$(our_pids)" ] || return 0
		sleep 0.1
	done
	die "could not stop ceph processes $(echo $pids)"
}

# lock takes DIR/.lock on fd 9 (creating DIR), making sure the locked file
# is still the one in DIR (a concurrent stop removes DIR).
lock() {
	local i
	for i in $(seq 1 20); do
		mkdir -p "$DIR"
		exec 9>>"$LOCKF"
		flock -w "$LOCK_TIMEOUT" 9 || die "timed out after ${LOCK_TIMEOUT}s waiting for $LOCKF"
		if [ -e "$LOCKF" ] &&
			[ "$(stat -L -c %d:%i /proc/self/fd/9)" = "$(stat -c %d:%i "$LOCKF")" ]; then
			return 0
		fi
		exec 9>&-
	done
	die "could not lock $LOCKF"
}

# is_up: the cluster in DIR finished booting, its three processes are ours
# and alive, and the monitor answers with the OSD up and in.
is_up() {
	[ -f "$READY" ] || return 1
	[ "$(our_pids | wc -l)" -eq 3 ] || return 1
	local st
	st=$(timeout 15 ceph -c "$CONF" --connect-timeout 5 osd stat -f json 2>/dev/null) || return 1
	[[ $st == *'"num_up_osds":1,'* && $st == *'"num_in_osds":1,'* ]]
}

# port_user IP PORT prints who listens on IP:PORT (or on all addresses), if anyone.
port_user() {
	local ip=$1 port=$2 line who
	[[ $ip != *:* ]] || ip="[$ip]"
	line=$(ss -Hltnp 2>/dev/null | awk -v a="$ip:$port" -v p=":$port" '
		$4 == a || $4 == "0.0.0.0" p || $4 == "*" p || $4 == "[::]" p { print; exit }') || true
	[ -n "$line" ] || return 1
	who=$(printf '%s\n' "$line" | grep -o 'users:(.*)' || true)
	printf '%s\n' "${who:-unknown process}"
}

dump_logs() {
	local f
	for f in "$LOGD"/mon.a.log "$LOGD"/mgr.x.log "$LOGD"/osd.0.log "$LOGD"/*.out; do
		[ -s "$f" ] || continue
		printf '%s: ---- last lines of %s\n' "$PROG" "$f" >&2
		tail -n 15 "$f" >&2
	done
}

boot_fail() {
	log "boot failed: $*"
	dump_logs
	kill_ours || true
	die "could not start the ceph test cluster in $DIR (logs kept in $LOGD)"
}

# wait_for DESC CMD...: retry CMD until it succeeds or the boot deadline.
wait_for() {
	local desc=$1
	shift
	local n pid
	while ! "$@" >/dev/null 2>&1; do
		for n in $STARTED; do
			pid=$(cat "$RUN/$n.pid" 2>/dev/null || true)
			is_ours "$pid" || boot_fail "ceph-$n (pid $pid) exited while waiting for $desc"
		done
		if [ "$SECONDS" -ge "$DEADLINE" ]; then
			boot_fail "timed out waiting for $desc"
		fi
		sleep 0.25
	done
}

# start_daemon NAME CMD...: run CMD in the foreground mode of ceph daemons,
# in its own session, detached from our stdio and lock, and record its pid.
start_daemon() {
	local name=$1
	shift
	# Every other inherited descriptor is closed too: a daemon that kept
	# the caller's flock(1) descriptor (e.g. /tmp/rbdfence-shared.lock as
	# fd 3) would hold that lock for as long as the cluster runs.
	(
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			[[ $fd -gt 2 && $fd != 255 ]] && eval "exec $fd>&-" 2>/dev/null
		done
		exec setsid "$@" -f </dev/null >>"$LOGD/$name.out" 2>&1
	) 9>&- &
	local pid=$!
	echo "$pid" >"$RUN/$name.pid"
	STARTED="$STARTED $name"
	local i
	for i in $(seq 1 40); do
		is_ours "$pid" && return 0
		sleep 0.05
	done
	boot_fail "$name (pid $pid) did not start"
}

write_confs() {
	local fsid=$1
	cat >"$CONF" <<EOF
# rbdfence test cluster (admin/setup conf), made by test/ceph/cluster.sh
[global]
fsid = $fsid
mon host = $MON_HOST
mon initial members = a
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
run dir = $RUN
crash dir = $DIR/crash
log file = $LOGD/\$name.log
mon cluster log file = $LOGD/cluster.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
$MS_BIND
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on msgr2 not enabled = false
mon data avail warn = 2
mon data avail crit = 1
osd objectstore = memstore
memstore device bytes = $MEMSTORE_BYTES

[mon]
mon data = $DIR/mon/\$cluster-\$id
keyring = $DIR/mon/\$cluster-\$id/keyring
admin socket = $RUN/\$name.asok
public addr = $ADDR

[mgr]
mgr data = $DIR/mgr/\$cluster-\$id
keyring = $DIR/mgr/\$cluster-\$id/keyring
admin socket = $RUN/\$name.asok
public addr = $ADDR

[osd]
osd data = $DIR/osd/\$cluster-\$id
keyring = $DIR/osd/\$cluster-\$id/keyring
admin socket = $RUN/\$name.asok
public addr = $ADDR
cluster addr = $ADDR

[client]
keyring = $DIR/\$cluster.\$name.keyring
log to file = false
EOF
	cat >"$CLIENT_CONF" <<EOF
# rbdfence test cluster (client conf): no keyring, pass --keyring/--id.
[global]
fsid = $fsid
mon host = $MON_HOST
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
$MS_BIND
EOF
}

bootstrap() {
	DEADLINE=$((SECONDS + BOOT_TIMEOUT))
	local t0=$SECONDS fsid osd_uuid osd_secret osd_id who p

	if command -v ip >/dev/null && ! ip -o route get "$ADDR" 2>/dev/null | grep -q '^local '; then
		die "$ADDR is not an address of this host (in this network namespace): add it first"
	fi
	for p in $MON_PORTS; do
		if who=$(port_user "$ADDR" "$p"); then
			die "$ADDR:$p is already in use by another process ($who), not by the test cluster in $DIR"
		fi
	done

	log "bootstrapping ceph test cluster in $DIR (mon $MON_HOST)"
	mkdir -p "$RUN" "$LOGD" "$DIR/crash" "$DIR/mon" "$DIR/mgr" "$DIR/osd"
	chmod 755 "$DIR"
	: >"$MARKER"
	echo "$PARAMS_LINE" >"$PARAMS"
	fsid=$(cat /proc/sys/kernel/random/uuid)
	write_confs "$fsid"

	# monitor
	local mon_keyring=$DIR/mon/ceph-a.mkfs.keyring
	ceph-authtool --create-keyring "$mon_keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	ceph-authtool --create-keyring "$ADMIN_KEYRING" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
	ceph-authtool "$mon_keyring" --import-keyring "$ADMIN_KEYRING" >/dev/null
	monmaptool --create --fsid "$fsid" --addv a "$MON_ADDRV" "$DIR/monmap" >/dev/null
	ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" --keyring "$mon_keyring" \
		>>"$LOGD/mon.out" 2>&1 || boot_fail "ceph-mon --mkfs failed"
	rm -f "$mon_keyring"
	start_daemon mon ceph-mon -c "$CONF" -i a
	wait_for "the monitor" ceph_admin mon stat

	# manager
	mkdir -p "$DIR/mgr/ceph-x"
	ceph_admin auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
		-o "$DIR/mgr/ceph-x/keyring" 2>/dev/null || boot_fail "could not create mgr.x"
	start_daemon mgr ceph-mgr -c "$CONF" -i x

	# OSD (memstore)
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)
	osd_secret=$(ceph-authtool --gen-print-key)
	printf '{"cephx_secret": "%s"}\n' "$osd_secret" >"$DIR/osd/new.json"
	osd_id=$(ceph_admin osd new "$osd_uuid" -i "$DIR/osd/new.json" 2>/dev/null) ||
		boot_fail "ceph osd new failed"
	rm -f "$DIR/osd/new.json"
	[ "$osd_id" = 0 ] || boot_fail "unexpected OSD id '$osd_id'"
	mkdir -p "$DIR/osd/ceph-0"
	ceph-authtool --create-keyring "$DIR/osd/ceph-0/keyring" -n osd.0 --add-key "$osd_secret" >/dev/null
	ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$LOGD/osd.out" 2>&1 ||
		boot_fail "ceph-osd --mkfs failed"
	start_daemon osd ceph-osd -c "$CONF" -i 0
	osd_up() {
		local st
		st=$(ceph_admin osd stat -f json 2>/dev/null) || return 1
		[[ $st == *'"num_up_osds":1,'* && $st == *'"num_in_osds":1,'* ]]
	}
	wait_for "the OSD to be up and in" osd_up

	# pool and users
	ceph_admin osd pool create "$POOL" 8 8 replicated >/dev/null 2>&1 ||
		boot_fail "could not create pool $POOL"
	wait_for "rbd pool init $POOL" timeout 20 rbd -c "$CONF" pool init "$POOL"
	ceph_admin auth get-or-create client.libvirt \
		mon 'profile rbd' osd "profile rbd pool=$POOL" -o "$LIBVIRT_KEYRING" 2>/dev/null ||
		boot_fail "could not create client.libvirt"
	ceph_admin auth get-or-create "client.$RMUSER" \
		mon 'profile rbd, allow command "osd blocklist" with blocklistop=rm' \
		osd "profile rbd pool=$POOL" -o "$RMUSER_KEYRING" 2>/dev/null ||
		boot_fail "could not create client.$RMUSER"
	# test cluster only: the user keyrings are world-readable so that tests
	# may run clients as a non-root user (e.g. oneadmin); admin's is not.
	chmod 600 "$ADMIN_KEYRING"
	chmod 644 "$LIBVIRT_KEYRING" "$RMUSER_KEYRING"

	# usable as client.libvirt with the client conf
	local probe="rbdfence-probe-$$"
	probe() {
		rbd_libvirt create "$POOL/$probe" --size 4M && rbd_libvirt rm --no-progress "$POOL/$probe"
	}
	wait_for "an rbd create/rm probe as client.libvirt" probe
	mgr_up() { ceph_admin mgr stat 2>/dev/null | grep -q '"available": *true'; }
	wait_for "the manager" mgr_up
	healthy() { ceph_admin health 2>/dev/null | grep -q '^HEALTH_OK'; }
	local hdead=$((SECONDS + 20))
	[ "$hdead" -le "$DEADLINE" ] || hdead=$DEADLINE
	while ! healthy && [ "$SECONDS" -lt "$hdead" ]; do sleep 0.5; done
	if ! healthy; then
		log "warning: cluster is usable but not HEALTH_OK:"
		ceph_admin health detail >&2 2>&1 || true
	fi

	: >"$READY"
	log "ceph test cluster up in $((SECONDS - t0))s (mon $MON_HOST, dir $DIR)"
}

# signal_daemon NAME SIG: send SIG to our daemon NAME (mon, mgr, osd).
signal_daemon() {
	local name=$1 sig=$2 pid
	case "$name" in mon | mgr | osd) ;; *) die "pause/resume: want mon, mgr or osd, got '$name'" ;; esac
	pid=$(cat "$RUN/$name.pid" 2>/dev/null || true)
	is_ours "$pid" || die "ceph-$name of $DIR is not running"
	kill "-$sig" "$pid"
	log "sent SIG$sig to ceph-$name (pid $pid)"
}

case "$CMD" in
pause)
	check_params
	signal_daemon "${ARG:-}" STOP
	;;
resume)
	check_params
	signal_daemon "${ARG:-}" CONT
	;;
env)
	check_params
	print_env
	;;
status)
	check_params
	if is_up; then
		log "up: $DIR (mon $MON_HOST)"
		exit 0
	fi
	log "down: $DIR"
	exit 1
	;;
start)
	command -v ceph-mon >/dev/null || die "ceph-mon not found: run test/deps.sh"
	if [ ! -e "$DIR" ]; then
		# do not leave an empty DIR (only .lock) behind when start fails
		trap 'if [ -z "$(find "$DIR" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit 2>/dev/null)" ]; then rm -rf -- "$DIR"; fi' EXIT
	fi
	lock
	check_params
	if is_up; then
		log "already up: $DIR (mon $MON_HOST)"
		trap - EXIT
		print_env
		exit 0
	fi
	if [ -e "$MARKER" ]; then
		log "removing stale cluster state in $DIR"
		kill_ours
		find "$DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
	elif [ -n "$(find "$DIR" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit)" ]; then
		die "$DIR is not empty and is not an rbdfence test cluster directory"
	fi
	bootstrap
	trap - EXIT
	print_env
	;;
stop)
	if [ ! -e "$DIR" ]; then
		log "nothing to stop in $DIR"
		exit 0
	fi
	[ -e "$MARKER" ] || [ -z "$(find "$DIR" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit)" ] ||
		die "$DIR is not an rbdfence test cluster directory; not touching it"
	lock
	kill_ours
	rm -rf -- "$DIR"
	log "stopped and removed $DIR"
	;;
esac
