#!/usr/bin/env bash
# Two test "hosts" with their own IP addresses, reachable over ssh, for
# rbdfence tests that need Ceph clients on distinct hosts (OpenNebula's
# front-end reaches KVM hosts over ssh).
#
#   test/netns/hosts.sh up|down|env
#
#   up    create (or find) the hosts and their sshds, print the env
#   nat NAME ADDR / unnat NAME  host NAME reaches the bridge address (the
#         tests' Ceph) through a source NAT, as ADDR (and directly again)
#   down  stop the sshds this script started, delete the namespaces, veths
#         and bridge it made, remove its directory
#   env   print the env (without checking that the hosts are up)
#
# Layout (all names fixed; the 10.77.0.0/24 range lives only on these links):
#
#   root namespace   bridge rbdf0, 10.77.0.1/24 (the "LAN"; a test Ceph
#                    cluster listens here: cluster.sh --addr 10.77.0.1)
#   netns rbdf-a     eth0 10.77.0.11/24 (veth, peer veth-rbdf-a on rbdf0)
#   netns rbdf-b     eth0 10.77.0.12/24 (veth, peer veth-rbdf-b on rbdf0)
#
# Each namespace has lo up and a default route via 10.77.0.1. IP forwarding
# in the root namespace is left as it is (off here), so the hosts reach only
# the bridge address and each other, nothing beyond. A namespace is only a
# network view: the file system, users and processes are the machine's.
#
# In each namespace runs an sshd listening on <IP>:22 with its own config,
# host key, pid file and log in DIR/<name>/ (DIR is
# ${RBDFENCE_NETNS_DIR:-$RBDFENCE_TEST_ROOT/netns}, test root /tmp/rbdfence-test); root logs in with the client
# key DIR/id_ed25519 only (PermitRootLogin prohibit-password, keys listed in
# DIR/authorized_keys). Nothing in /etc/ssh or ~/.ssh is read or written;
# the only file outside DIR is sshd's privilege separation dir /run/sshd,
# created if missing. DIR/ssh_config has `Host rbdf-a` and `Host rbdf-b`:
#
#   ssh -F DIR/ssh_config rbdf-a hostname     # runs inside netns rbdf-a
#
# up and env print only `export NAME=VALUE` lines on stdout
# (`eval "$(test/netns/hosts.sh up)"`); progress and errors go to stderr:
#   RBDFENCE_TEST_BRIDGE_IP=10.77.0.1
#   RBDFENCE_TEST_HOST_A=rbdf-a   RBDFENCE_TEST_HOST_A_IP=10.77.0.11
#   RBDFENCE_TEST_HOST_B=rbdf-b   RBDFENCE_TEST_HOST_B_IP=10.77.0.12
#   RBDFENCE_TEST_SSH_CONFIG=DIR/ssh_config
#   RBDFENCE_TEST_SSH_KEY=DIR/id_ed25519
#
# up and down are idempotent and serialised with flock on
# /run/rbdfence-netns.lock (the namespaces and the bridge are machine-wide,
# whatever DIR is). Objects this script made carry the link alias
# "rbdfence-netns" (bridge, veths) or are listed in DIR/owned (namespaces);
# up refuses to adopt, and down never deletes, objects with these names
# that it did not make.
set -euo pipefail

PROG=hosts.sh
DIR=${RBDFENCE_NETNS_DIR:-${RBDFENCE_TEST_ROOT:-/tmp/rbdfence-test}/netns}
LOCK_TIMEOUT=${RBDFENCE_NETNS_LOCK_TIMEOUT:-120}
LOCKF=/run/rbdfence-netns.lock
SSHD=/usr/sbin/sshd
ALIAS=rbdfence-netns

BRIDGE=rbdf0
BRIDGE_IP=10.77.0.1
PREFIX=24
HOSTS=(rbdf-a rbdf-b)
declare -A IP=([rbdf-a]=10.77.0.11 [rbdf-b]=10.77.0.12)

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}
usage() {
	printf 'usage: %s up|down|env|nat NAME ADDR|unnat NAME\n' "$PROG" >&2
	exit 2
}

CMD=${1:-}
case "$CMD" in
up | down | env) [ $# -le 1 ] || usage ;;
nat) [ $# -eq 3 ] || usage ;;
unnat) [ $# -eq 2 ] || usage ;;
*) usage ;;
esac

[ -n "$DIR" ] || die "RBDFENCE_NETNS_DIR must not be empty"
DIR=$(realpath -m -- "$DIR")
[[ $DIR =~ ^[A-Za-z0-9_./-]+$ ]] || die "RBDFENCE_NETNS_DIR may hold only letters, digits and _ . / - (it goes into sshd and ssh configs), got '$DIR'"
case "$DIR" in
/ | /tmp | /var | /var/tmp | /root | /root/* | /home | /etc | /etc/* | /run | /run/sshd | /usr | /usr/*)
	die "refusing to use $DIR as the netns directory" ;;
esac
OWNED=$DIR/owned
MARKER=$DIR/.rbdfence-netns
SSH_CONFIG=$DIR/ssh_config
SSH_KEY=$DIR/id_ed25519
AUTH_KEYS=$DIR/authorized_keys

print_env() {
	printf 'export RBDFENCE_TEST_BRIDGE_IP=%s\n' "$BRIDGE_IP"
	printf 'export RBDFENCE_TEST_HOST_A=%s\n' rbdf-a
	printf 'export RBDFENCE_TEST_HOST_A_IP=%s\n' "${IP[rbdf-a]}"
	printf 'export RBDFENCE_TEST_HOST_B=%s\n' rbdf-b
	printf 'export RBDFENCE_TEST_HOST_B_IP=%s\n' "${IP[rbdf-b]}"
	printf 'export RBDFENCE_TEST_SSH_CONFIG=%s\n' "$SSH_CONFIG"
	printf 'export RBDFENCE_TEST_SSH_KEY=%s\n' "$SSH_KEY"
}

lock() {
	exec 9>>"$LOCKF"
	flock -w "$LOCK_TIMEOUT" 9 || die "timed out after ${LOCK_TIMEOUT}s waiting for $LOCKF"
}

# run a command with a bound time and its output on stderr.
q() { timeout 20 "$@" >&2; }

link_exists() { ip link show dev "$1" >/dev/null 2>&1; }
link_alias() { ip -d -o link show dev "$1" 2>/dev/null | sed -n 's/.* alias \([^ ]*\).*/\1/p'; }
link_ours() { [ "$(link_alias "$1")" = "$ALIAS" ]; }
ns_exists() { [ -e "/run/netns/$1" ] && ip netns list 2>/dev/null | awk '{print $1}' | grep -qx -- "$1"; }
# ns_ours NS: NS was made by this script (listed in DIR/owned, or its eth0
# carries our alias when DIR was removed behind our back).
ns_ours() {
	local ns=$1
	if [ -f "$OWNED" ] && grep -qx "netns $ns" "$OWNED"; then return 0; fi
	[ "$(ip -n "$ns" -d -o link show dev eth0 2>/dev/null | sed -n 's/.* alias \([^ ]*\).*/\1/p')" = "$ALIAS" ]
}
own() { grep -qx "$1" "$OWNED" 2>/dev/null || echo "$1" >>"$OWNED"; }

# is_our_sshd PID NAME [NS]: PID is /usr/sbin/sshd run with our config for
# host NAME (and, with NS, lives in network namespace NS).
is_our_sshd() {
	local pid=$1 name=$2 exe cmd
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	[ "${exe% (deleted)}" = "$SSHD" ] || return 1
	# sshd rewrites its argv as "sshd: /usr/sbin/sshd -f CONF ... [listener] ..."
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	[[ " $cmd " == *" -f $DIR/$name/sshd_config "* ]] || return 1
	[ $# -lt 3 ] || [ "$(ip netns identify "$pid" 2>/dev/null)" = "$3" ]
}

# sshd_pid NAME prints the pid of our live sshd for host NAME: the process
# in DIR/NAME/sshd.pid, if it is our sshd and lives in namespace NAME.
sshd_pid() {
	local name=$1 pidf=$DIR/$1/sshd.pid pid
	[ -f "$pidf" ] || return 1
	pid=$(cat "$pidf" 2>/dev/null || true)
	is_our_sshd "$pid" "$name" "$name" || return 1
	echo "$pid"
}

# stray_sshds NAME prints the pids of sshd listeners that this script
# started for host NAME but that are not (or no longer) the one in the pid
# file: left behind when DIR was removed, or still running in a namespace
# that was deleted behind our back.
stray_sshds() {
	local name=$1 p pid cur cmd
	cur=$(sshd_pid "$name" || true)
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[ "$pid" != "$cur" ] || continue
		cmd=
		IFS= read -r -d '' cmd <"$p/cmdline" 2>/dev/null || true
		[[ $cmd == "sshd: $SSHD -f $DIR/$name/sshd_config "*"[listener]"* ]] || continue
		if is_our_sshd "$pid" "$name"; then echo "$pid"; fi
	done
}

# kill_sshd NAME PID: stop PID, which must stay our sshd for host NAME.
kill_sshd() {
	local name=$1 pid=$2 i
	is_our_sshd "$pid" "$name" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 50); do
		is_our_sshd "$pid" "$name" || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 20); do
		is_our_sshd "$pid" "$name" || return 0
		sleep 0.1
	done
	die "could not stop sshd of $name (pid $pid)"
}

stop_sshd() {
	local ns=$1 pid
	if pid=$(sshd_pid "$ns"); then
		log "stopping sshd of $ns (pid $pid)"
		kill_sshd "$ns" "$pid"
	fi
	for pid in $(stray_sshds "$ns"); do
		log "stopping stray sshd of $ns (pid $pid)"
		kill_sshd "$ns" "$pid"
	done
	rm -f "$DIR/$ns/sshd.pid"
}

# listening NAME: something in namespace NAME listens on its IP port 22.
listening() {
	local name=$1
	ip netns exec "$name" ss -Hltn "src ${IP[$name]}:22" 2>/dev/null | grep -q .
}

setup_bridge() {
	if link_exists "$BRIDGE"; then
		link_ours "$BRIDGE" || die "a link named $BRIDGE exists and was not made by $PROG; not touching it"
	else
		log "creating bridge $BRIDGE ($BRIDGE_IP/$PREFIX)"
		q ip link add "$BRIDGE" type bridge
		q ip link set dev "$BRIDGE" alias "$ALIAS"
	fi
	own "link $BRIDGE"
	if ! ip -4 -o addr show dev "$BRIDGE" | grep -q " $BRIDGE_IP/$PREFIX "; then
		q ip addr add "$BRIDGE_IP/$PREFIX" dev "$BRIDGE"
	fi
	q ip link set dev "$BRIDGE" up
}

setup_host() {
	local ns=$1 ip=${IP[$1]} veth=veth-$1 peer=$1-eth0
	if ns_exists "$ns"; then
		ns_ours "$ns" || die "network namespace $ns exists and was not made by $PROG; not touching it"
	else
		log "creating network namespace $ns ($ip)"
		q ip netns add "$ns"
	fi
	own "netns $ns"
	q ip -n "$ns" link set dev lo up

	# the veth pair: veth-NS on the bridge, eth0 in NS
	if ! ip -n "$ns" link show dev eth0 >/dev/null 2>&1; then
		if link_exists "$veth"; then
			link_ours "$veth" || die "a link named $veth exists and was not made by $PROG; not touching it"
			q ip link del "$veth"
		fi
		if link_exists "$peer"; then
			link_ours "$peer" || die "a link named $peer exists and was not made by $PROG; not touching it"
			q ip link del "$peer"
		fi
		q ip link add "$veth" type veth peer name "$peer"
		q ip link set dev "$veth" alias "$ALIAS"
		q ip link set dev "$peer" alias "$ALIAS"
		q ip link set dev "$peer" netns "$ns"
		q ip -n "$ns" link set dev "$peer" name eth0
	fi
	link_exists "$veth" || die "$veth is missing although eth0 exists in $ns; run '$PROG down' first"
	link_ours "$veth" || die "a link named $veth exists and was not made by $PROG; not touching it"
	own "link $veth"
	q ip link set dev "$veth" master "$BRIDGE"
	q ip link set dev "$veth" up
	if ! ip -n "$ns" -4 -o addr show dev eth0 | grep -q " $ip/$PREFIX "; then
		q ip -n "$ns" addr add "$ip/$PREFIX" dev eth0
	fi
	q ip -n "$ns" link set dev eth0 up
	q ip -n "$ns" route replace default via "$BRIDGE_IP" dev eth0
}

setup_keys() {
	mkdir -p "$DIR"
	chmod 700 "$DIR"
	: >>"$MARKER"
	if [ ! -s "$SSH_KEY" ] || [ ! -s "$SSH_KEY.pub" ]; then
		rm -f "$SSH_KEY" "$SSH_KEY.pub"
		ssh-keygen -q -t ed25519 -N '' -C "rbdfence-netns-client" -f "$SSH_KEY" >/dev/null </dev/null
	fi
	install -m 600 "$SSH_KEY.pub" "$AUTH_KEYS.tmp"
	mv -f "$AUTH_KEYS.tmp" "$AUTH_KEYS"

	local ns
	{
		echo "# made by test/netns/hosts.sh: ssh -F $SSH_CONFIG rbdf-a CMD"
		for ns in "${HOSTS[@]}"; do
			cat <<EOF
Host $ns
	HostName ${IP[$ns]}
	Port 22
	User root
	IdentityFile $SSH_KEY
	IdentitiesOnly yes
	StrictHostKeyChecking no
	UserKnownHostsFile /dev/null
	GlobalKnownHostsFile /dev/null
	BatchMode yes
	ConnectTimeout 5
	LogLevel ERROR
EOF
		done
	} >"$SSH_CONFIG.tmp"
	chmod 644 "$SSH_CONFIG.tmp"
	mv -f "$SSH_CONFIG.tmp" "$SSH_CONFIG"
}

start_sshd() {
	local ns=$1 ip=${IP[$1]} d=$DIR/$1 pid i
	mkdir -p "$d"
	chmod 700 "$d"
	if [ ! -s "$d/ssh_host_ed25519_key" ]; then
		rm -f "$d/ssh_host_ed25519_key" "$d/ssh_host_ed25519_key.pub"
		ssh-keygen -q -t ed25519 -N '' -C "rbdfence-netns-$ns" -f "$d/ssh_host_ed25519_key" >/dev/null </dev/null
	fi
	# StrictModes no: DIR lives under /tmp (mode 1777), which sshd's
	# path check for AuthorizedKeysFile would reject.
	cat >"$d/sshd_config.tmp" <<EOF
# sshd of test host $ns, made by test/netns/hosts.sh (runs in netns $ns)
ListenAddress $ip:22
AddressFamily inet
HostKey $d/ssh_host_ed25519_key
PidFile $d/sshd.pid
AuthorizedKeysFile $AUTH_KEYS
AuthorizedPrincipalsFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowAgentForwarding no
PermitTunnel no
MaxStartups 100:30:200
MaxSessions 100
LogLevel INFO
Subsystem sftp internal-sftp
EOF
	mv -f "$d/sshd_config.tmp" "$d/sshd_config"
	for pid in $(stray_sshds "$ns"); do
		log "stopping stray sshd of $ns (pid $pid)"
		kill_sshd "$ns" "$pid"
	done
	if sshd_pid "$ns" >/dev/null && listening "$ns"; then
		return 0
	fi
	stop_sshd "$ns"
	"$SSHD" -t -f "$d/sshd_config" >&2 || die "sshd rejects $d/sshd_config"
	log "starting sshd in $ns on $ip:22"
	# sshd daemonises and writes its pid file; keep our lock fd out of it.
	ip netns exec "$ns" "$SSHD" -f "$d/sshd_config" -E "$d/sshd.log" </dev/null >&2 9>&- ||
		die "sshd in $ns did not start (log: $d/sshd.log)"
	for i in $(seq 1 100); do
		if sshd_pid "$ns" >/dev/null && listening "$ns"; then
			return 0
		fi
		sleep 0.05
	done
	tail -n 20 "$d/sshd.log" >&2 2>/dev/null || true
	die "sshd in $ns is not listening on $ip:22 after 5s (log: $d/sshd.log)"
}

check_ssh() {
	local ns=$1 out
	out=$(timeout 20 ssh -F "$SSH_CONFIG" "$ns" 'ip -4 -o addr show dev eth0' </dev/null 2>&1) ||
		die "ssh $ns failed: $out (log: $DIR/$ns/sshd.log)"
	[[ $out == *" inet ${IP[$ns]}/$PREFIX "* ]] ||
		die "ssh $ns does not land in namespace $ns: eth0 there is '$out'"
}

up() {
	command -v "$SSHD" >/dev/null || die "$SSHD not found (apt-get install openssh-server)"
	command -v ssh >/dev/null || die "ssh not found (apt-get install openssh-client)"
	local t0=$SECONDS ns
	if [ -e "$DIR" ] && [ ! -e "$MARKER" ] &&
		[ -n "$(find "$DIR" -mindepth 1 -maxdepth 1 -print -quit)" ]; then
		die "$DIR is not empty and is not a $PROG directory"
	fi
	setup_keys
	# sshd's privilege separation directory (Debian's init script makes it)
	if [ ! -d /run/sshd ]; then
		mkdir -p /run/sshd
		chmod 755 /run/sshd
	fi
	setup_bridge
	for ns in "${HOSTS[@]}"; do
		setup_host "$ns"
		start_sshd "$ns"
	done
	for ns in "${HOSTS[@]}"; do check_ssh "$ns"; done
	log "hosts up in $((SECONDS - t0))s: rbdf-a ${IP[rbdf-a]}, rbdf-b ${IP[rbdf-b]} (bridge $BRIDGE $BRIDGE_IP, dir $DIR)"
}

down() {
	local ns veth
	for ns in "${HOSTS[@]}"; do
		stop_sshd "$ns"
	done
	for ns in "${HOSTS[@]}"; do
		if ns_exists "$ns"; then
			if ns_ours "$ns"; then
				# sessions still running in it (ssh logins) keep it alive
				# as a network stack, but the name goes away.
				log "deleting network namespace $ns"
				q ip netns del "$ns"
			else
				log "not deleting network namespace $ns: not made by $PROG"
			fi
		fi
		for veth in "veth-$ns" "$ns-eth0"; do
			# Deleting the namespace deletes its eth0 and, a moment later,
			# the peer: a veth gone meanwhile is done, not a failure.
			if link_exists "$veth" && link_ours "$veth"; then
				q ip link del "$veth" 2>/dev/null || ! link_exists "$veth" || die "cannot delete link $veth"
			fi
		done
	done
	if link_exists "$BRIDGE"; then
		if link_ours "$BRIDGE"; then
			if ss -Hltn "src $BRIDGE_IP" 2>/dev/null | grep -q .; then
				log "warning: processes still listen on $BRIDGE_IP (a Ceph cluster started with --addr $BRIDGE_IP?); they lose their address"
			fi
			log "deleting bridge $BRIDGE"
			q ip link del "$BRIDGE"
		else
			log "not deleting link $BRIDGE: not made by $PROG"
		fi
	fi
	if command -v nft >/dev/null && nft list table ip "$NAT_TABLE" >/dev/null 2>&1; then
		nft delete table ip "$NAT_TABLE" || die "cannot delete nftables table ip $NAT_TABLE"
	fi
	if [ -e "$MARKER" ]; then
		rm -rf -- "$DIR"
	fi
	log "down"
}

# nat NAME ADDR / unnat NAME: host NAME reaches the bridge address (where
# the tests' Ceph cluster listens, cluster.sh --addr) through a source NAT,
# and directly again. The NAT is in the root namespace, where Ceph runs:
# nftables table ip rbdfence_netns_nat, hook input; every new TCP
# connection of the host to the bridge address but ssh comes from ADDR, an
# address the host does not have, as every client of a host behind NAT
# shows Ceph the NAT's address. Open connections stay as they were. The
# table goes with its last rule, and with down.
NAT_TABLE=rbdfence_netns_nat
nat_add() {
	local h=$1 addr=$2
	[ -n "${IP[$h]:-}" ] || die "unknown host '$h' (one of ${HOSTS[*]})"
	[[ $addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "nat: '$addr' is not an IPv4 address"
	if ! nft list table ip "$NAT_TABLE" >/dev/null 2>&1; then
		printf 'table ip %s {\n\tchain in {\n\t\ttype nat hook input priority 100; policy accept;\n\t}\n}\n' "$NAT_TABLE" |
			nft -f - || die "nft: cannot create table ip $NAT_TABLE"
	fi
	nat_del "$h" keep
	nft add rule ip "$NAT_TABLE" in ip saddr "${IP[$h]}" ip daddr "$BRIDGE_IP" tcp dport != 22 snat to "$addr" comment "\"$h\"" ||
		die "nft: cannot add the NAT of $h"
	log "$h reaches $BRIDGE_IP as $addr"
}

# nat_del NAME [keep]: remove NAME's NAT; the table too once it has none
# left, unless keep.
nat_del() {
	local h=$1 handle
	command -v nft >/dev/null && nft list table ip "$NAT_TABLE" >/dev/null 2>&1 || return 0
	for handle in $(nft -a list chain ip "$NAT_TABLE" in | sed -n "s/.*comment \"$h\" # handle \([0-9]*\)$/\1/p"); do
		nft delete rule ip "$NAT_TABLE" in handle "$handle" || die "nft: cannot delete the NAT of $h"
	done
	[ "${2:-}" = keep ] || nft list chain ip "$NAT_TABLE" in | grep -q ' snat to ' || nft delete table ip "$NAT_TABLE"
}

case "$CMD" in
nat)
	lock
	nat_add "$2" "$3"
	;;
unnat)
	lock
	nat_del "$2"
	;;
env) print_env ;;
up)
	lock
	up
	print_env
	;;
down)
	lock
	down
	;;
esac
