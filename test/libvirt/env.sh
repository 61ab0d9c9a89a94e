#!/usr/bin/env bash
# test/libvirt/env.sh: a real libvirtd + virtlogd for rbdfence tests.
#
# Usage:
#   test/libvirt/env.sh start          start (or reuse) virtlogd + libvirtd, print env
#   test/libvirt/env.sh stop           stop only the daemons this script started
#   test/libvirt/env.sh env            print the export lines (stdout: env only)
#   test/libvirt/env.sh secret USER KEYRING
#                                      define (or update) the libvirt ceph secret
#                                      for client.USER, print its UUID
#
# stdout carries only `export NAME=value` lines (or the secret UUID); progress
# and errors go to stderr. Exported:
#   RBDFENCE_TEST_LIBVIRT_URI   qemu:///system
#   RBDFENCE_TEST_DOMTYPE       kvm when libvirt can run KVM guests, else qemu
#                               (TCG); set it to qemu beforehand to force TCG
#   RBDFENCE_TEST_HOOK_DIR      /etc/libvirt/hooks/qemu.d
#   RBDFENCE_TEST_QEMU_LOG_DIR  /var/log/libvirt/qemu (DOMAIN.log per domain)
#
# Facts this script relies on (libvirt 9.0, Debian 12, no systemd):
# - libvirtd's QEMU driver refuses to start without the libvirt-qemu user.
# - `virsh create` fails when virtlogd's socket is missing: virtlogd first.
# - libvirtd runs qemu hooks only if /etc/libvirt/hooks/qemu or an executable
#   in /etc/libvirt/hooks/qemu.d/ existed when it started; files added to
#   qemu.d/ later run without a restart. So a placeholder hook goes in first.
# - /dev/kvm without udev is root:root 0600, so QEMU (run as libvirt-qemu)
#   cannot use it; we apply what Debian's udev rule does (group kvm, 0660)
#   and add libvirt-qemu to kvm. libvirt then offers domain type kvm.
set -euo pipefail

URI=qemu:///system
STATE_DIR=${RBDFENCE_LIBVIRT_STATE_DIR:-/run/rbdfence-test/libvirt}
HOOK_DIR=/etc/libvirt/hooks/qemu.d
PLACEHOLDER_NEW=0
PLACEHOLDER=$HOOK_DIR/00-rbdfence-placeholder
QEMU_LOG_DIR=/var/log/libvirt/qemu
QEMU_USER=libvirt-qemu
START_TIMEOUT=${RBDFENCE_LIBVIRT_START_TIMEOUT:-30}

log() { echo "env.sh: $*" >&2; }
die() { echo "env.sh: ERROR: $*" >&2; exit 1; }

# lock serialises concurrent start/stop/secret calls of this script.
lock() {
	mkdir -p "$STATE_DIR"
	chmod 0700 "$STATE_DIR"
	exec 9>"$STATE_DIR/lock"
	flock -w 120 9 || die "timed out waiting for $STATE_DIR/lock"
}

virsh_q() { timeout 20 virsh -q -c "$URI" "$@"; }

libvirt_answers() { timeout 5 virsh -c "$URI" version >/dev/null 2>&1; }

# pid_alive PID NAME: PID runs a program called NAME (guards against reuse).
pid_alive() {
	local pid=$1 name=$2
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/comm ]] || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]]
}

# started_pid NAME: the pid we recorded for NAME if it still runs.
started_pid() {
	local name=$1 pid
	[[ -f $STATE_DIR/$name.started ]] || return 1
	pid=$(cat "$STATE_DIR/$name.started")
	pid_alive "$pid" "$name" || return 1
	echo "$pid"
}

ensure_user() {
	if ! getent group "$QEMU_USER" >/dev/null; then
		log "creating system group $QEMU_USER"
		groupadd --system "$QEMU_USER"
	fi
	if ! getent passwd "$QEMU_USER" >/dev/null; then
		log "creating system user $QEMU_USER"
		useradd --system --gid "$QEMU_USER" --home-dir /var/lib/libvirt \
			--no-create-home --shell /usr/sbin/nologin \
			--comment "Libvirt Qemu" "$QEMU_USER"
	fi
}

ensure_dirs() {
	mkdir -p /var/log/libvirt "$QEMU_LOG_DIR" /var/run/libvirt /var/lib/libvirt \
		/var/cache/libvirt "$HOOK_DIR"
}

# ensure_hook_placeholder: libvirtd only runs qemu hooks when one existed at
# its start; install a harmless one unless a real hook is already there.
ensure_hook_placeholder() {
	local f
	if [[ -x /etc/libvirt/hooks/qemu && -f /etc/libvirt/hooks/qemu ]]; then
		return 0
	fi
	for f in "$HOOK_DIR"/*; do
		if [[ -f $f && -x $f ]]; then
			return 0
		fi
	done
	log "installing $PLACEHOLDER"
	PLACEHOLDER_NEW=1
	# Remembered so that stop removes it again (and only if we put it there).
	: >"$STATE_DIR/placeholder.ours"
	cat >"$PLACEHOLDER.tmp" <<'HOOK'
#!/bin/sh
# Installed by rbdfence test/libvirt/env.sh: libvirtd runs qemu.d hooks only
# if one existed when it started. Harmless: reads the domain XML, exits 0.
cat >/dev/null
exit 0
HOOK
	chmod 0755 "$PLACEHOLDER.tmp"
	mv -f "$PLACEHOLDER.tmp" "$PLACEHOLDER"
}

# daemon CMD...: run a daemon with no descriptor but 0-2 inherited. A
# daemon keeps every descriptor it inherits, and so holds every lock open on
# them: our own (fd 9) and the caller's (e.g. `flock FILE make test`, whose
# lock libvirtd would otherwise hold until it stops).
daemon() {
	(
		local fd
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
		done
		exec "$@"
	)
}

# ensure_kvm_access: what Debian's udev rule does on a real KVM host.
ensure_kvm_access() {
	[[ ${RBDFENCE_TEST_DOMTYPE:-} == qemu ]] && return 0
	[[ -c /dev/kvm ]] || return 0
	if setpriv --reuid "$QEMU_USER" --regid "$QEMU_USER" --init-groups \
		test -r /dev/kvm -a -w /dev/kvm 2>/dev/null; then
		return 0
	fi
	log "giving group kvm access to /dev/kvm (as udev does on KVM hosts)"
	getent group kvm >/dev/null || groupadd --system kvm
	if [[ $(stat -c %G /dev/kvm) == root ]]; then
		chgrp kvm /dev/kvm
		chmod g+rw /dev/kvm
	fi
	usermod -a -G "$(stat -c %G /dev/kvm)" "$QEMU_USER"
}

start_virtlogd() {
	if started_pid virtlogd >/dev/null; then
		return 0
	fi
	if [[ -S /run/libvirt/virtlogd-sock ]] && pgrep -x virtlogd >/dev/null; then
		log "virtlogd already running (not started by this script): reusing it"
		return 0
	fi
	log "starting virtlogd"
	rm -f /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock
	daemon virtlogd --daemon --pid-file "$STATE_DIR/virtlogd.pid" \
		>>"$STATE_DIR/virtlogd.out" 2>&1 </dev/null ||
		die "virtlogd failed to start: $(tail -n 5 "$STATE_DIR/virtlogd.out" | tr '\n' ' ')"
	local i
	for ((i = 0; i < 100; i++)); do
		[[ -s $STATE_DIR/virtlogd.pid && -S /run/libvirt/virtlogd-sock ]] && break
		sleep 0.1
	done
	[[ -S /run/libvirt/virtlogd-sock ]] || die "virtlogd did not create /run/libvirt/virtlogd-sock"
	cp "$STATE_DIR/virtlogd.pid" "$STATE_DIR/virtlogd.started"
}

start_libvirtd() {
	if started_pid libvirtd >/dev/null || libvirt_answers; then
		if ! started_pid libvirtd >/dev/null; then
			log "libvirtd already answers on $URI (not started by this script): reusing it;" \
				"qemu hooks run only if a hook existed when it started"
			if ((PLACEHOLDER_NEW)); then
				log "warning: $HOOK_DIR had no hook until now: this libvirtd will not run" \
					"qemu hooks until it is restarted"
			fi
		fi
	else
		log "starting libvirtd"
		: >"$STATE_DIR/libvirtd.log"
		LIBVIRT_LOG_OUTPUTS="3:file:$STATE_DIR/libvirtd.log" \
			daemon libvirtd --daemon --pid-file "$STATE_DIR/libvirtd.pid" \
			>>"$STATE_DIR/libvirtd.out" 2>&1 </dev/null ||
			die "libvirtd failed to start: $(tail -n 20 "$STATE_DIR/libvirtd.out" "$STATE_DIR/libvirtd.log" 2>&1)"
		local i
		for ((i = 0; i < 50; i++)); do
			[[ -s $STATE_DIR/libvirtd.pid ]] && break
			sleep 0.1
		done
		[[ -s $STATE_DIR/libvirtd.pid ]] && cp "$STATE_DIR/libvirtd.pid" "$STATE_DIR/libvirtd.started"
	fi
	local deadline=$((SECONDS + START_TIMEOUT))
	until libvirt_answers; do
		if ((SECONDS >= deadline)); then
			die "libvirtd does not answer on $URI after ${START_TIMEOUT}s; log tail:
$(tail -n 30 "$STATE_DIR/libvirtd.log" "$STATE_DIR/libvirtd.out" 2>&1)"
		fi
		sleep 0.2
	done
}

# domtype prints kvm when libvirt offers KVM guests for x86_64, else qemu.
domtype() {
	if [[ ${RBDFENCE_TEST_DOMTYPE:-} == qemu ]]; then
		echo qemu
	elif virsh_q domcapabilities --virttype kvm --arch x86_64 >/dev/null 2>&1; then
		echo kvm
	else
		echo qemu
	fi
}

print_env() {
	libvirt_answers || die "libvirtd does not answer on $URI: run '$0 start' first"
	echo "export RBDFENCE_TEST_LIBVIRT_URI=$URI"
	echo "export RBDFENCE_TEST_DOMTYPE=$(domtype)"
	echo "export RBDFENCE_TEST_HOOK_DIR=$HOOK_DIR"
	echo "export RBDFENCE_TEST_QEMU_LOG_DIR=$QEMU_LOG_DIR"
}

cmd_start() {
	for bin in libvirtd virtlogd virsh qemu-system-x86_64; do
		command -v "$bin" >/dev/null || die "$bin not found: install libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-block-extra"
	done
	[[ -e /usr/lib/x86_64-linux-gnu/qemu/block-rbd.so ]] ||
		log "warning: QEMU's RBD driver (qemu-block-extra) not found"
	lock
	ensure_user
	ensure_dirs
	ensure_hook_placeholder
	if ! started_pid libvirtd >/dev/null && ! libvirt_answers; then
		ensure_kvm_access
	fi
	start_virtlogd
	start_libvirtd
	print_env
}

# stop_pid NAME: stop the daemon NAME if this script started it.
stop_pid() {
	local name=$1 pid i
	if ! pid=$(started_pid "$name"); then
		rm -f "$STATE_DIR/$name.started"
		return 0
	fi
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		pid_alive "$pid" "$name" || break
		sleep 0.1
	done
	if pid_alive "$pid" "$name"; then
		log "$name did not stop in 10s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$STATE_DIR/$name.started"
}

cmd_stop() {
	lock
	if started_pid libvirtd >/dev/null; then
		# Domains of the libvirtd we started are test domains: do not leave
		# their QEMU processes behind.
		local dom
		while read -r dom; do
			[[ -n $dom ]] || continue
			log "destroying test domain $dom"
			virsh_q destroy "$dom" >/dev/null 2>&1 || true
		done < <(virsh_q list --name 2>/dev/null || true)
	fi
	stop_pid libvirtd
	stop_pid virtlogd
	if [[ -f $STATE_DIR/placeholder.ours ]]; then
		log "removing $PLACEHOLDER"
		rm -f "$PLACEHOLDER" "$STATE_DIR/placeholder.ours"
	fi
}

# cmd_secret USER KEYRING: libvirt ceph secret holding client.USER's key.
cmd_secret() {
	local user=${1:-} keyring=${2:-}
	[[ -n $user && -n $keyring ]] || die "usage: $0 secret USER KEYRING_PATH"
	user=${user#client.}
	[[ -r $keyring ]] || die "keyring $keyring not readable"
	local key
	key=$(awk -v sect="[client.$user]" '
		/^[[:space:]]*\[/ { in_sect = ($1 == sect) ; next }
		in_sect && $1 == "key" && $2 == "=" { print $3; exit }
	' "$keyring")
	[[ -n $key ]] || die "no key for client.$user in $keyring"
	libvirt_answers || die "libvirtd does not answer on $URI: run '$0 start' first"
	lock
	local usage="client.$user secret" uuid="" u
	for u in $(virsh_q secret-list 2>/dev/null | awk '{print $1}'); do
		if virsh_q secret-dumpxml "$u" 2>/dev/null | grep -qF "<name>$usage</name>"; then
			uuid=$u
			break
		fi
	done
	if [[ -z $uuid ]]; then
		local xml
		uuid=$(cat /proc/sys/kernel/random/uuid)
		# ephemeral: kept in libvirtd's memory only, never written to
		# /etc/libvirt/secrets (a test leaves no secret on the machine).
		xml=$(mktemp "$STATE_DIR/secret.XXXXXX.xml")
		cat >"$xml" <<XML
<secret ephemeral='yes' private='yes'>
  <uuid>$uuid</uuid>
  <description>rbdfence test: cephx key of client.$user</description>
  <usage type='ceph'>
    <name>$usage</name>
  </usage>
</secret>
XML
		if ! virsh_q secret-define "$xml" >/dev/null; then
			rm -f "$xml"
			die "virsh secret-define for client.$user failed"
		fi
		rm -f "$xml"
	fi
	# Always (re)set the value: a recreated test cluster has new keys.
	local keyfile
	keyfile=$(mktemp "$STATE_DIR/key.XXXXXX")
	printf '%s' "$key" >"$keyfile"
	if ! virsh_q secret-set-value "$uuid" --file "$keyfile" >/dev/null; then
		rm -f "$keyfile"
		die "virsh secret-set-value $uuid failed"
	fi
	rm -f "$keyfile"
	echo "$uuid"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
env) print_env ;;
secret)
	shift
	cmd_secret "$@"
	;;
*)
	echo "usage: $0 start|stop|env|secret USER KEYRING_PATH" >&2
	exit 2
	;;
esac
