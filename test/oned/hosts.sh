#!/usr/bin/env bash
# test/oned/hosts.sh: the KVM hosts of the real-OpenNebula suite.
#
#   test/oned/hosts.sh up NAME...        bridge, then each host (idempotent)
#   test/oned/hosts.sh down              stop every host, delete what up made
#   test/oned/hosts.sh libvirtd NAME start|stop|restart|hang|cont
#                                        (hang: SIGSTOP, libvirtd hung with
#                                        its sockets open; cont: SIGCONT)
#   test/oned/hosts.sh exec NAME CMD...  run CMD on host NAME (as root)
#   test/oned/hosts.sh cut|heal NAME     cut the host off the front-ends'
#                                        network (and heal it): libvirtd,
#                                        QEMU and their Ceph clients go on
#   test/oned/hosts.sh cephcut|cephheal NAME  cut the host off the Ceph
#                                        cluster (and heal it)
#   test/oned/hosts.sh sshstall|sshheal NAME  drop every packet the host's
#                                        sshd sends (and stop dropping)
#   test/oned/hosts.sh nat NAME ADDR|unnat NAME  the host reaches Ceph
#                                        through a source NAT, as ADDR (and
#                                        directly again)
#
# NAME is one of rbdo-a, rbdo-b, rbdo-e (the 7.4.0 front-end's hosts; e is
# the one the host-failure tests cut off), rbdo-c, rbdo-d, rbdo-f (6.10.5's).
# Layout (apart from test/netns/hosts.sh's rbdf-a/rbdf-b,
# rbdf0 and 10.77.0.0/24, which this suite does not touch):
#
#   root namespace   bridge rbdo0, 10.78.0.1/24: the front-ends' address
#                    (monitord listens there) and the suite's Ceph cluster's
#   host rbdo-X      network namespace rbdo-X, eth0 10.78.0.1N/24 (veth, peer
#                    veth-rbdo-X on rbdo0), hostname rbdo-X, and a mount
#                    namespace (lib.sh) with its own /etc/libvirt,
#                    /var/lib/libvirt, /var/cache/libvirt, /run (so
#                    /run/libvirt), /var/log (so /var/log/libvirt),
#                    /var/tmp (so /var/tmp/one, where `onehost sync` puts
#                    the drivers, and /var/tmp/one_db, monitord's client),
#                    /tmp (lib.sh private_tmp: OpenNebula's monitoring
#                    client's pid file), /var/lib/one (datastores,
#                    rbdfence's spool), /etc/one,
#                    /var/lib/rbdfence, /usr/local/libexec (the hook binary),
#                    /etc/ceph (ceph.conf and the client.libvirt keyring, as
#                    OpenNebula's Ceph hosts have them), /etc/hosts and /root
#                    (root's ssh key and config: hosts reach each other for
#                    `virsh migrate ... qemu+ssh://`). Each runs its own sshd
#                    (10.78.0.1N:22), virtlogd and libvirtd; libvirtd's QEMU
#                    runs as root (OpenNebula's documented qemu.conf has
#                    user/group oneadmin, here the front-end runs as root),
#                    without per-domain mount namespaces or cgroups (each
#                    libvirtd would name its domains' cgroups alike), and
#                    listens for incoming migrations on its own address,
#                    ports 16797-16798.
#
# Everything lives in $RBDFENCE_ONED_DIR (default $RBDFENCE_TEST_ROOT/oned):
# ssh keys (ssh/), the hosts' private trees (rbdo-X/fs/...), their logs.
# Objects made here carry the link alias "rbdfence-oned" (bridge, veths) or
# are listed in $ONED_DIR/owned (namespaces): down never touches another's.
set -euo pipefail

PROG=hosts.sh
SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/hosts.sh
# shellcheck source=lib.sh
source "$(dirname "$SCRIPT")/lib.sh"

BRIDGE=rbdo0
BRIDGE_IP=10.78.0.1
PREFIX=24
ALIAS=rbdfence-oned
ALL_HOSTS=(rbdo-a rbdo-b rbdo-c rbdo-d rbdo-e rbdo-f)
declare -A IP=([rbdo-a]=10.78.0.11 [rbdo-b]=10.78.0.12 [rbdo-c]=10.78.0.13 [rbdo-d]=10.78.0.14 [rbdo-e]=10.78.0.15 [rbdo-f]=10.78.0.16)
MIGRATION_PORTS=(16797 16798)
SSH_KEY=$ONED_DIR/ssh/id_ed25519
OWNED=$ONED_DIR/owned

q() { timeout 20 "$@" >&2; }
link_exists() { ip link show dev "$1" >/dev/null 2>&1; }
link_ours() { ip -d -o link show dev "$1" 2>/dev/null | grep -q " alias $ALIAS\b"; }
own() { grep -qx "$1" "$OWNED" 2>/dev/null || echo "$1" >>"$OWNED"; }

# keys: one client key (root's on the front-ends and on the hosts, as
# oneadmin's is shared in an OpenNebula cloud) and /etc/hosts for every
# machine of the suite.
setup_common() {
	mkdir -p "$ONED_DIR/ssh"
	chmod 700 "$ONED_DIR/ssh"
	if [ ! -s "$SSH_KEY" ]; then
		rm -f "$SSH_KEY" "$SSH_KEY.pub"
		ssh-keygen -q -t ed25519 -N '' -C rbdfence-oned -f "$SSH_KEY" </dev/null
	fi
	install -m 0600 "$SSH_KEY.pub" "$ONED_DIR/ssh/authorized_keys"
	ssh_config
	{
		echo "127.0.0.1 localhost"
		echo "::1 localhost ip6-localhost ip6-loopback"
		# the front-ends (frontend.sh) are on the bridge address; oned
		# resolves its own hostname at start
		echo "$BRIDGE_IP rbdo-fe rbdo-fe74 rbdo-fe74b rbdo-fe610"
		local h
		for h in "${ALL_HOSTS[@]}"; do echo "${IP[$h]} $h"; done
	} >"$ONED_DIR/etc-hosts"
	chmod 644 "$ONED_DIR/etc-hosts"
}

# ssh_config: the ssh client config of every machine of the suite (root's
# on the hosts and front-ends): the suite's key, no host key checks (the
# test hosts are made anew every run), and OpenNebula's own
# ServerAliveInterval (share/ssh/etc/config in 7.4.0), so that a session to
# a host that was cut off ends.
ssh_config() {
	cat >"$ONED_DIR/ssh/config" <<EOF
# fe74's sshd (frontend.sh), where OpenNebula's TM copies a VM's directory
# back to the front-end (undeploy, stop).
Host rbdo-fe74
	Port 16799
Host *
	User root
	IdentityFile ~/.ssh/id_ed25519
	IdentitiesOnly yes
	StrictHostKeyChecking no
	UserKnownHostsFile /dev/null
	GlobalKnownHostsFile /dev/null
	BatchMode yes
	ConnectTimeout 10
	ServerAliveInterval 10
	LogLevel ERROR
EOF
	chmod 600 "$ONED_DIR/ssh/config"
}

# ssh_home DIR: root's ~/.ssh of a machine.
ssh_home() {
	local home=$1
	mkdir -p "$home/.ssh"
	chmod 700 "$home" "$home/.ssh"
	install -m 0600 "$SSH_KEY" "$home/.ssh/id_ed25519"
	install -m 0644 "$SSH_KEY.pub" "$home/.ssh/id_ed25519.pub"
	install -m 0600 "$ONED_DIR/ssh/config" "$home/.ssh/config"
}

setup_bridge() {
	if link_exists "$BRIDGE"; then
		link_ours "$BRIDGE" || die "a link named $BRIDGE exists and was not made by $PROG"
	else
		log "creating bridge $BRIDGE ($BRIDGE_IP/$PREFIX)"
		q ip link add "$BRIDGE" type bridge
		q ip link set dev "$BRIDGE" alias "$ALIAS"
	fi
	own "link $BRIDGE"
	ip -4 -o addr show dev "$BRIDGE" | grep -q " $BRIDGE_IP/$PREFIX " ||
		q ip addr add "$BRIDGE_IP/$PREFIX" dev "$BRIDGE"
	q ip link set dev "$BRIDGE" up
}

setup_netns() {
	local ns=$1 ip=${IP[$1]} veth=veth-$1
	if [ -e "/run/netns/$ns" ]; then
		grep -qx "netns $ns" "$OWNED" 2>/dev/null || die "network namespace $ns exists and was not made by $PROG"
	else
		q ip netns add "$ns"
	fi
	own "netns $ns"
	q ip -n "$ns" link set dev lo up
	if ! ip -n "$ns" link show dev eth0 >/dev/null 2>&1; then
		if link_exists "$veth"; then
			link_ours "$veth" || die "a link named $veth exists and was not made by $PROG"
			q ip link del "$veth"
		fi
		q ip link add "$veth" type veth peer name "$ns-e0"
		q ip link set dev "$veth" alias "$ALIAS"
		q ip link set dev "$ns-e0" alias "$ALIAS"
		q ip link set dev "$ns-e0" netns "$ns"
		q ip -n "$ns" link set dev "$ns-e0" name eth0
	fi
	own "link $veth"
	q ip link set dev "$veth" master "$BRIDGE"
	q ip link set dev "$veth" up
	ip -n "$ns" -4 -o addr show dev eth0 | grep -q " $ip/$PREFIX " || q ip -n "$ns" addr add "$ip/$PREFIX" dev eth0
	q ip -n "$ns" link set dev eth0 up
	q ip -n "$ns" route replace default via "$BRIDGE_IP" dev eth0
}

# host_files NAME: the host's private trees and configs (written from the
# root namespace, before the host starts).
host_files() {
	local name=$1 ip=${IP[$1]} d=$ONED_DIR/$1 fs=$ONED_DIR/$1/fs
	mkdir -p "$fs"/{etc-libvirt/hooks/qemu.d,etc-one,etc-ceph,var-lib-libvirt,var-cache-libvirt,var-lib-one,var-lib-rbdfence,usr-local-libexec,run,var-tmp,var-log,root}
	chmod 1777 "$fs/var-tmp"
	ssh_home "$fs/root"
	echo "$name" >"$d/hostname"
	# libvirt: OpenNebula's KVM node set-up (qemu.conf user/group, no dynamic
	# ownership) with root as oneadmin; a host UUID of its own (libvirt refuses
	# a migration to a host with its own UUID or hostname).
	local uuid
	uuid=$(printf '%s' "rbdfence-oned-$name" | sha256sum | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')
	cat >"$fs/etc-libvirt/libvirtd.conf" <<EOF
# rbdfence test host $name (test/oned/hosts.sh)
host_uuid = "$uuid"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
EOF
	cat >"$fs/etc-libvirt/qemu.conf" <<EOF
# rbdfence test host $name (test/oned/hosts.sh)
user = "root"
group = "root"
dynamic_ownership = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
migration_address = "$ip"
migration_host = "$ip"
migration_port_min = ${MIGRATION_PORTS[0]}
migration_port_max = ${MIGRATION_PORTS[1]}
EOF
	: >"$fs/etc-libvirt/virtlogd.conf"
	sshd_files "$name" "$ip:22"
}

# host_ns NAME: runs inside the host's new namespaces (ns_start).
host_ns() {
	local name=$1 d=$ONED_DIR/$1 fs=$ONED_DIR/$1/fs
	shadow /etc libvirt="$fs/etc-libvirt" one="$fs/etc-one" ceph="$fs/etc-ceph" \
		hosts="$ONED_DIR/etc-hosts" hostname="$d/hostname"
	shadow /var/lib libvirt="$fs/var-lib-libvirt" one="$fs/var-lib-one" rbdfence="$fs/var-lib-rbdfence"
	shadow /var/cache libvirt="$fs/var-cache-libvirt"
	shadow /usr/local libexec="$fs/usr-local-libexec"
	keep_checkout
	private /run "$fs/run"
	private_tmp
	private /var/tmp "$fs/var-tmp"
	private /var/log "$fs/var-log"
	private /root "$fs/root"
	restore_checkout
	mkdir -p /run/sshd /run/libvirt /run/lock /var/log/libvirt/qemu /var/lib/libvirt/qemu
	chmod 755 /run/sshd
	/usr/sbin/sshd -t -f "$d/sshd_config"
	daemon /usr/sbin/sshd -f "$d/sshd_config" -E /var/log/sshd.log
	libvirt_start
}

libvirt_answers() { timeout 5 virsh -c qemu:///system version >/dev/null 2>&1; }

# libvirt_start / libvirt_stop: run inside a host (host_ns, or ns_exec).
libvirt_start() {
	local i
	local pid
	pid=$(cat /run/libvirt/virtlogd.pid 2>/dev/null || true)
	if [ ! -S /run/libvirt/virtlogd-sock ] || ! [[ $pid =~ ^[0-9]+$ ]] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != virtlogd ]; then
		rm -f /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock
		daemon virtlogd --daemon --pid-file /run/libvirt/virtlogd.pid
		for i in $(seq 1 100); do
			[ -S /run/libvirt/virtlogd-sock ] && break
			sleep 0.1
		done
		[ -S /run/libvirt/virtlogd-sock ] || die "virtlogd did not start"
	fi
	if ! libvirt_answers; then
		daemon libvirtd --daemon --pid-file /run/libvirt/libvirtd.pid
		for i in $(seq 1 300); do
			libvirt_answers && return 0
			sleep 0.1
		done
		tail -n 20 /var/log/libvirt/libvirtd.log >&2 || true
		die "libvirtd does not answer after 30s"
	fi
}

# libvirt_stop: stop this host's libvirtd (its QEMU domains keep running,
# as on a real host).
libvirt_stop() {
	local pid i
	pid=$(cat /run/libvirt/libvirtd.pid 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = libvirtd ] || return 0
	kill -TERM "$pid"
	for i in $(seq 1 100); do
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = libvirtd ] || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# libvirt_signal SIG: send SIG (STOP: libvirtd hangs, its sockets still
# accept; CONT: it goes on) to the host's libvirtd; an error when none runs.
libvirt_signal() {
	local pid
	pid=$(cat /run/libvirt/libvirtd.pid 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = libvirtd ] ||
		die "libvirtd: none runs on $(hostname) to send SIG$1"
	kill "-$1" "$pid"
}

# cut / heal NAME: a network partition between the front-ends and host NAME
# that leaves its path to Ceph alone. In the host's network namespace,
# policy rules (ip rule, no netfilter needed) blackhole what the host sends
# to the front-ends' address from its sshd (port 22) and to their oned,
# monitord and hook manager ports (16780-16783, 16785-16797, 16799); the
# Ceph clusters share that address (ports 16784 and 16798, and Ceph's own
# 6800-7300) and are still reached. The front-end's new ssh connections time out
# (ConnectTimeout), its open ones stall (ServerAliveInterval ends them), the
# host's monitoring messages are lost: what oned sees of a failed host. The
# host's libvirtd and QEMUs go on writing to Ceph. Heal removes the rules.
CUT_RULES=(
	"pref 1090 to $BRIDGE_IP ipproto tcp sport 22 blackhole"
	"pref 1091 to $BRIDGE_IP dport 16780-16783 blackhole"
	"pref 1092 to $BRIDGE_IP dport 16785-16797 blackhole"
	"pref 1093 to $BRIDGE_IP dport 16799 blackhole"
)
# cephcut / cephheal NAME: the other partition: host NAME no longer reaches
# the Ceph clusters (their monitors, 16784 and 16798, their OSDs and
# managers, Ceph's 6800-7300), the front-ends still reach the host.
CEPH_CUT_RULES=(
	"pref 1094 to $BRIDGE_IP dport 16784 blackhole"
	"pref 1095 to $BRIDGE_IP dport 16798 blackhole"
	"pref 1096 to $BRIDGE_IP dport 6800-7300 blackhole"
)
# sshstall / sshheal NAME: every packet host NAME's sshd sends (tcp sport
# 22, to the front-ends and to the other hosts' migration tunnels) is
# dropped until sshheal: its ssh sessions stall, new connections wait in
# SYN retransmission, and TCP resumes them once healed: a slowed ssh
# (the kernel here has no netem to delay packets).
SSH_STALL_RULES=(
	"pref 1097 to 0.0.0.0/0 ipproto tcp sport 22 blackhole"
)

# nat NAME ADDR / unnat NAME: host NAME reaches the Ceph clusters through a
# source NAT (and no longer does). Ceph runs in the root namespace, so the
# NAT is there, in nftables table ip rbdfence_oned_nat (hook input: what a
# NAT router in front of Ceph does to the packets it forwards): every new
# connection of the host to the monitors and OSDs comes from ADDR, an
# address the host does not have, as every client of a host behind NAT
# shows Ceph the NAT's address; several hosts given one ADDR share it.
# Connections open before stay as they were (conntrack). The table goes
# when its last rule does, and with down.
NAT_TABLE=rbdfence_oned_nat
nat_add() {
	local h=$1 addr=$2
	[[ $addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "nat: '$addr' is not an IPv4 address"
	if ! nft list table ip "$NAT_TABLE" >/dev/null 2>&1; then
		printf 'table ip %s {\n\tchain in {\n\t\ttype nat hook input priority 100; policy accept;\n\t}\n}\n' "$NAT_TABLE" |
			nft -f - || die "nft: cannot create table ip $NAT_TABLE"
	fi
	nat_del "$h" keep
	nft add rule ip "$NAT_TABLE" in ip saddr "${IP[$h]}" ip daddr "$BRIDGE_IP" tcp dport '{ 16784, 16798, 6800-7300 }' snat to "$addr" comment "\"$h\"" ||
		die "nft: cannot add the NAT of $h"
	log "$h reaches Ceph as $addr"
}

# nat_del NAME [keep]: remove NAME's NAT; the table too once it has none
# left, unless keep.
nat_del() {
	local h=$1 handle
	nft list table ip "$NAT_TABLE" >/dev/null 2>&1 || return 0
	for handle in $(nft -a list chain ip "$NAT_TABLE" in | sed -n "s/.*comment \"$h\" # handle \([0-9]*\)$/\1/p"); do
		nft delete rule ip "$NAT_TABLE" in handle "$handle" || die "nft: cannot delete the NAT of $h"
	done
	[ "${2:-}" = keep ] || nft list chain ip "$NAT_TABLE" in | grep -q ' snat to ' || nft delete table ip "$NAT_TABLE"
}

# rules_add NS RULE...: add each policy rule (its "pref N" first) unless
# its preference is taken; rules_del NS RULE...: delete them.
rules_add() {
	local ns=$1 r
	shift
	[ -e "/run/netns/$ns" ] || die "$ns is not up"
	for r in "$@"; do
		# shellcheck disable=SC2086 # a rule is words
		ip -n "$ns" rule show ${r%% to *} | grep -q . || q ip -n "$ns" rule add $r
	done
}

rules_del() {
	local ns=$1 r
	shift
	[ -e "/run/netns/$ns" ] || die "$ns is not up"
	for r in "$@"; do
		# shellcheck disable=SC2086
		while ip -n "$ns" rule show ${r%% to *} | grep -q .; do q ip -n "$ns" rule del ${r%% to *}; done
	done
}

valid_host() {
	local h
	for h in "${ALL_HOSTS[@]}"; do [ "$h" = "$1" ] && return 0; done
	die "unknown host '$1' (one of ${ALL_HOSTS[*]})"
}

cmd_up() {
	[ $# -gt 0 ] || die "usage: $PROG up NAME..."
	local h
	for h in "$@"; do valid_host "$h"; done
	mkdir -p "$ONED_DIR"
	exec 8>>"$ONED_DIR/.hosts.lock"
	flock -w 120 8 || die "timed out waiting for $ONED_DIR/.hosts.lock"
	setup_common
	setup_bridge
	for h in "$@"; do
		setup_netns "$h"
		if ! anchor_pid "$h" >/dev/null; then
			host_files "$h"
			ns_start "$h" "$h" "$h" host_ns "$h"
		fi
	done
	for h in "$@"; do
		timeout 20 ssh -F "$ONED_DIR/ssh/config" -i "$SSH_KEY" "root@${IP[$h]}" true </dev/null ||
			die "ssh root@${IP[$h]} ($h) does not work (log: $ONED_DIR/$h/fs/var-log/sshd.log)"
	done
	log "hosts up: $*"
}

# cmd_down: every host goes, even when one of them does not: a host whose
# processes survive is reported and the others are still removed (a down
# that stopped at the first failure left netns and the bridge behind).
cmd_down() {
	local h failed=()
	[ -d "$ONED_DIR" ] || { link_exists "$BRIDGE" && link_ours "$BRIDGE" && q ip link del "$BRIDGE"; return 0; }
	for h in "${ALL_HOSTS[@]}"; do
		if ! (
			ns_kill "$h" "$h"
			if [ -e "/run/netns/$h" ] && grep -qx "netns $h" "$OWNED" 2>/dev/null; then
				q ip netns del "$h"
			fi
			if link_exists "veth-$h" && link_ours "veth-$h"; then q ip link del "veth-$h"; fi
		); then
			failed+=("$h")
		fi
	done
	if link_exists "$BRIDGE" && link_ours "$BRIDGE"; then q ip link del "$BRIDGE" || failed+=("$BRIDGE"); fi
	if command -v nft >/dev/null && nft list table ip "$NAT_TABLE" >/dev/null 2>&1; then
		nft delete table ip "$NAT_TABLE" || failed+=("nftables table $NAT_TABLE")
	fi
	[ ${#failed[@]} -eq 0 ] || die "not removed: ${failed[*]}"
}

main() {
	local cmd=${1:-}
	[ $# -gt 0 ] && shift
	case "$cmd" in
	up) cmd_up "$@" ;;
	down) cmd_down ;;
	exec)
		[ $# -ge 2 ] || die "usage: $PROG exec NAME CMD..."
		valid_host "$1"
		ns_exec "$@"
		;;
	libvirtd)
		[ $# -eq 2 ] || die "usage: $PROG libvirtd NAME start|stop|restart|hang|cont"
		valid_host "$1"
		case "$2" in
		start) ns_exec "$1" bash -c "source '$SCRIPT'; libvirt_start" ;;
		stop) ns_exec "$1" bash -c "source '$SCRIPT'; libvirt_stop" ;;
		restart) ns_exec "$1" bash -c "source '$SCRIPT'; libvirt_stop; libvirt_start" ;;
		hang) ns_exec "$1" bash -c "source '$SCRIPT'; libvirt_signal STOP" ;;
		cont) ns_exec "$1" bash -c "source '$SCRIPT'; libvirt_signal CONT" ;;
		*) die "usage: $PROG libvirtd NAME start|stop|restart|hang|cont" ;;
		esac
		;;
	cut | heal | cephcut | cephheal | sshstall | sshheal)
		[ $# -eq 1 ] || die "usage: $PROG $cmd NAME"
		valid_host "$1"
		case "$cmd" in
		cut) rules_add "$1" "${CUT_RULES[@]}" ;;
		heal) rules_del "$1" "${CUT_RULES[@]}" ;;
		cephcut) rules_add "$1" "${CEPH_CUT_RULES[@]}" ;;
		cephheal) rules_del "$1" "${CEPH_CUT_RULES[@]}" ;;
		sshstall) rules_add "$1" "${SSH_STALL_RULES[@]}" ;;
		sshheal) rules_del "$1" "${SSH_STALL_RULES[@]}" ;;
		esac
		;;
	nat)
		[ $# -eq 2 ] || die "usage: $PROG nat NAME ADDR"
		valid_host "$1"
		nat_add "$1" "$2"
		;;
	unnat)
		[ $# -eq 1 ] || die "usage: $PROG unnat NAME"
		valid_host "$1"
		nat_del "$1"
		;;
	*) die "usage: $PROG up NAME...|down|exec NAME CMD...|libvirtd NAME start|stop|restart|hang|cont|cut|heal|cephcut|cephheal|sshstall|sshheal NAME|nat NAME ADDR|unnat NAME" ;;
	esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
