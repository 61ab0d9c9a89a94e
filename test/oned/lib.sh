# test/oned/lib.sh: machines in namespaces for the real-OpenNebula suite
# (sourced by hosts.sh and frontend.sh; bash).
#
# A "machine" here is a mount + UTS namespace (and, for a KVM host, a network
# namespace too) whose private directories are bind mounts of directories
# under $ONED_DIR/<machine>/fs. The rest of the file system is the machine's
# own, as for test/netns/hosts.sh. A directory that must be private but whose
# mount point does not exist on this machine (/etc/one, /var/lib/one,
# /usr/local/libexec) is made by "shadowing" its parent inside the namespace:
# the parent becomes a tmpfs holding bind mounts of its original entries, plus
# the private ones. Nothing is created outside $ONED_DIR, and no mount is
# visible outside the namespace (mounts are made after `unshare
# --propagation slave`).
#
# Each namespace is held by an anchor process ($ONED_DIR/bin/
# rbdfence-oned-anchor, a copy of sleep(1); comm "rbdfence-oned-a", which
# test/machine.sh's process check matches); ns_exec enters it with nsenter.
# ns_kill ends every process in the namespace (found by its mount namespace,
# and for a host by its network namespace too), the namespace with them.

ONED_DIR=${RBDFENCE_ONED_DIR:-${RBDFENCE_TEST_ROOT:-/tmp/rbdfence-test}/oned}
ANCHOR=$ONED_DIR/bin/rbdfence-oned-anchor

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

# daemon CMD...: run CMD with no descriptor above 2 inherited (a daemon
# keeps what it inherits: our locks, the caller's pipes).
daemon() {
	(daemon_exec "$@")
}

# daemon_exec CMD...: close every descriptor above 2, then become CMD. For
# a daemon started in the background, `( daemon_exec CMD & )`: with daemon
# there, the background bash that waits for its subshell would keep the
# caller's descriptors as long as CMD runs (a flock on the machine lock
# stayed held by a stack left up).
daemon_exec() {
	local fd
	for fd in /proc/self/fd/*; do
		fd=${fd##*/}
		((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
	done
	exec "$@"
}

# shadow DIR NAME=SRC...: inside a namespace, make DIR a tmpfs holding bind
# mounts of DIR's original entries, except each NAME, which becomes a bind
# mount of SRC (a directory or a file, created if missing as a directory).
shadow() {
	local dir=$1 stage e n src
	shift
	stage=$(mktemp -d "$ONED_DIR/.stage.XXXXXX")
	mount --rbind "$dir" "$stage"
	mount -t tmpfs -o mode=0755 rbdfence-oned "$dir"
	declare -A priv=()
	for e in "$@"; do priv[${e%%=*}]=${e#*=}; done
	for e in "$stage"/* "$stage"/.[!.]*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		n=${e##*/}
		[ -z "${priv[$n]+x}" ] || continue
		if [ -L "$e" ]; then
			cp -P "$e" "$dir/$n"
		elif [ -d "$e" ]; then
			mkdir "$dir/$n"
			mount --rbind "$e" "$dir/$n"
		else
			: >"$dir/$n"
			mount --bind "$e" "$dir/$n"
		fi
	done
	for n in "${!priv[@]}"; do
		src=${priv[$n]}
		[ -e "$src" ] || mkdir -p "$src"
		if [ -d "$src" ]; then mkdir -p "$dir/$n"; else : >"$dir/$n"; fi
		mount --bind "$src" "$dir/$n"
	done
	# The staging view is no longer needed in this namespace.
	umount -l "$stage"
	rmdir "$stage"
}

# CHECKOUT is the rbdfence checkout these scripts run from: the machines
# install from it (install.sh) wherever it lies.
CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# keep_checkout / restore_checkout: inside a namespace, around the private
# mounts of a machine (/run, /tmp, /var/tmp, /var/log, /root), so that a
# checkout under one of them (a clone in /tmp, in /root, in a path with a
# space) is still where it was: keep_checkout opens it (fd 7) before,
# restore_checkout binds that very directory back over its path after.
keep_checkout() { exec 7<"$CHECKOUT"; }
restore_checkout() {
	if [ ! -e "$CHECKOUT/install.sh" ]; then
		mkdir -p "$CHECKOUT"
		# not canonicalized: the link names the directory opened before,
		# its path here is the new, empty one
		mount --no-canonicalize --bind /proc/self/fd/7 "$CHECKOUT"
	fi
	exec 7<&-
	[ -e "$CHECKOUT/install.sh" ] || die "the checkout $CHECKOUT is not visible inside the namespace"
}

# private DIR SRC: bind SRC (made if missing) over the existing DIR.
private() {
	mkdir -p "$2"
	mount --bind "$2" "$1"
}

# private_tmp: inside a namespace, a /tmp of its own (a tmpfs) in which
# only the top directory of $ONED_DIR under /tmp (the test root, e.g.
# /tmp/rbdfence-test: the suite's files, rbdfence's binaries, the Ceph
# cluster's conf) is the machine's. OpenNebula's monitoring client keeps
# /tmp/one-monitord-<host ID>.pid and .error there
# (src/im_mad/remotes/common.d/monitord-client_control.sh:45-52), the
# drivers their temporary files: without this they would land in the
# machine's /tmp, and two front-ends' host 0 would share one file. Needs
# the private /run (the staging point).
private_tmp() {
	local top="" rest stage=/run/.rbdfence-oned-tmp
	case "$ONED_DIR" in
	/tmp/?*)
		rest=${ONED_DIR#/tmp/}
		top=${rest%%/*}
		;;
	esac
	mkdir -p "$stage"
	mount --rbind /tmp "$stage"
	mount -t tmpfs -o mode=1777 rbdfence-oned-tmp /tmp
	if [ -n "$top" ]; then
		mkdir -p "/tmp/$top"
		mount --rbind "$stage/$top" "/tmp/$top"
	fi
	umount -l "$stage"
	rmdir "$stage"
}

# sshd_files NAME ADDR:PORT: machine NAME's sshd_config ($ONED_DIR/NAME/
# sshd_config: root logs in with the suite's key only) and its host key.
sshd_files() {
	local name=$1 listen=$2 d=$ONED_DIR/$1
	cat >"$d/sshd_config" <<EOF
# sshd of $name (test/oned)
ListenAddress $listen
AddressFamily inet
HostKey $d/ssh_host_ed25519_key
PidFile /run/sshd.pid
AuthorizedKeysFile $ONED_DIR/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowAgentForwarding yes
MaxStartups 100:30:200
MaxSessions 100
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
EOF
	[ -s "$d/ssh_host_ed25519_key" ] ||
		ssh-keygen -q -t ed25519 -N '' -C "rbdfence-oned-$name" -f "$d/ssh_host_ed25519_key" </dev/null
}

anchor_pid() {
	local f=$ONED_DIR/$1/anchor.pid pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	[[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = rbdfence-oned-a ] || return 1
	echo "$pid"
}

# ns_start NAME NETNS HOSTNAME FUNC ARGS...: a new machine NAME (in network
# namespace NETNS, "" for the machine's own network) whose namespace is set
# up by the function FUNC of the script $SCRIPT, which is sourced inside it
# (its main part must not run when sourced); returns once FUNC has run. FUNC
# must start its daemons with `daemon`.
ns_start() {
	local name=$1 netns=$2 hn=$3 fn=$4 d=$ONED_DIR/$1 pid i
	shift 4
	if anchor_pid "$name" >/dev/null; then return 0; fi
	mkdir -p "$d" "$ONED_DIR/bin"
	[ -x "$ANCHOR" ] || install -m 0755 "$(command -v sleep)" "$ANCHOR"
	rm -f "$d/ready" "$d/ready.tmp" "$d/setup.log" "$d/mntns"
	local pre=()
	[ -z "$netns" ] || pre=(ip netns exec "$netns")
	# A subshell that closes every descriptor above 2 and execs: env, ip
	# netns exec, unshare, bash and finally the anchor all exec in turn, so
	# that $! is the anchor's pid.
	(
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
		done
		exec env NAME="$name" ONED_DIR="$ONED_DIR" ANCHOR="$ANCHOR" "${pre[@]}" unshare --mount --uts --propagation slave -- \
			bash -c 'hostname "$1"; shift; source "$1"; shift; fn=$1; shift
				exec 3>&2 2>>"$ONED_DIR/$NAME/setup.log"
				set -x; "$fn" "$@"; rc=$?; set +x
				exec 2>&3 3>&-
				[ $rc -eq 0 ] || exit $rc
				: >"$ONED_DIR/$NAME/ready.tmp"
				exec "$ANCHOR" infinity' \
			ns-setup "$hn" "$SCRIPT" "$fn" "$@"
	) </dev/null >>"$d/setup.log" 2>&1 &
	pid=$!
	echo "$pid" >"$d/anchor.pid"
	for i in $(seq 1 1800); do
		if [ -e "$d/ready.tmp" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = rbdfence-oned-a ]; then
			# the mount namespace's identity, for ns_kill after an anchor crash
			local mnt
			mnt=$(readlink "/proc/$pid/ns/mnt")
			[ -n "$mnt" ] && [ "$mnt" != "$(readlink /proc/1/ns/mnt)" ] && [ "$mnt" != "$(readlink /proc/self/ns/mnt)" ] ||
				die "$name's anchor (pid $pid) is not in a mount namespace of its own"
			echo "$mnt" >"$d/mntns"
			mv "$d/ready.tmp" "$d/ready"
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 30 "$d/setup.log" >&2
	die "setting up $name failed (log: $d/setup.log)"
}

# ns_exec NAME CMD...: run CMD inside machine NAME.
ns_exec() {
	local name=$1 pid
	shift
	pid=$(anchor_pid "$name") || die "$name is not running (no anchor)"
	nsenter -t "$pid" -m -u -n -- "$@"
}

# ns_pids NAME [NETNS]: every process of machine NAME: in its mount
# namespace, or in network namespace NETNS. Never the machine's own
# namespaces (pid 1's, or this script's): those are refused.
ns_pids() {
	local name=$1 netns=${2:-} mnt net= p
	mnt=$(cat "$ONED_DIR/$name/mntns" 2>/dev/null || true)
	if [ -n "$netns" ] && [ -e "/run/netns/$netns" ]; then
		net="net:[$(stat -L -c %i "/run/netns/$netns")]"
	fi
	if [ -n "$mnt" ] && { [ "$mnt" = "$(readlink /proc/1/ns/mnt)" ] || [ "$mnt" = "$(readlink /proc/self/ns/mnt)" ]; }; then
		die "refusing to stop $name: its recorded mount namespace $mnt is the machine's own"
	fi
	if [ -n "$net" ] && { [ "$net" = "$(readlink /proc/1/ns/net)" ] || [ "$net" = "$(readlink /proc/self/ns/net)" ]; }; then
		die "refusing to stop $name: network namespace $netns is the machine's own"
	fi
	[ -n "$mnt$net" ] || return 0
	for p in /proc/[0-9]*; do
		if { [ -n "$mnt" ] && [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$mnt" ]; } ||
			{ [ -n "$net" ] && [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$net" ]; }; then
			echo "${p#/proc/}"
		fi
	done
}

# ns_kill NAME [NETNS]: stop every process of machine NAME; the namespace
# goes with the last of them. Each pass freezes every process found
# (SIGSTOP) before it kills them (SIGKILL): oned restarts a driver that
# dies (and onemonitord its probes) by forking, so a TERM to all at once,
# or a kill of the drivers before oned, makes new processes (a front-end
# whose tree was deleted under it forked without end: each child, unable
# to exec, stayed). A frozen process forks nothing. Nothing here is
# worth a clean shutdown: the machine's state goes with the test root.
ns_kill() {
	local name=$1 netns=${2:-} pids i
	pids=$(ns_pids "$name" "$netns")
	[ -n "$pids" ] || return 0
	log "stopping $name ($(echo $pids | wc -w) processes)"
	for i in $(seq 1 50); do
		# shellcheck disable=SC2086
		kill -STOP $pids 2>/dev/null || true
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null || true
		sleep 0.2
		pids=$(ns_pids "$name" "$netns")
		[ -n "$pids" ] || return 0
	done
	die "processes of $name survive SIGKILL: $pids"
}
