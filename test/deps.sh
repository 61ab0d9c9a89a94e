#!/usr/bin/env bash
# Install the Debian packages that rbdfence's tests need (Debian 12, as root).
# Idempotent: does nothing (no apt-get at all) when everything is installed.
#
#   test/deps.sh            install what is missing
#   test/deps.sh --check    exit 1 (and list them) if some are missing
#   test/deps.sh --demo     only what `make demo` needs (DEMO_PKGS: the
#                           Ceph cluster, the C libraries go-ceph links and
#                           the C compiler cgo runs), said before installing
set -euo pipefail

PKGS=(
	# Ceph 16 (Pacific): test cluster, CLI and the C libraries go-ceph links
	ceph-mon ceph-osd ceph-mgr ceph-common librbd-dev librados-dev libradospp-dev
	# libvirt + QEMU with its RBD driver (qemu-block-extra)
	libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
	qemu-system-x86 qemu-block-extra
	# hosts reached over ssh, network namespaces, process tools, flock
	openssh-server openssh-client iproute2 procps util-linux
	# the README's undo reads claims with jq
	jq
	# package tests: rpm, rpm2archive, rpm2cpio; the linters of both formats
	rpm lintian rpmlint
	# a Debian 11 userland for the host platform tests (test/hostcompat)
	debootstrap
	# the real OpenNebula front-end (test/oned): oned, onemonitord and the
	# scheduler built from source with Debian packages only
	scons g++ bison flex pkg-config libxmlrpc-c++8-dev libxml2-dev
	libsqlite3-dev libssl-dev zlib1g-dev libcurl4-openssl-dev
	# ... its Ruby side (drivers, CLI, onehem-server, the HA hook)
	ruby ruby-nokogiri ruby-xmlrpc ruby-sqlite3 ruby-json ruby-ffi-rzmq
	ruby-treetop ruby-ipaddress ruby-parse-cron
	# ... and the tools its drivers call on the front-end and the hosts
	rsync genisoimage pciutils libxml2-utils netcat-openbsd
	# source NAT toward Ceph for the NAT rows of test/oned (hosts.sh nat)
	nftables
	# make bench-oned ONED_TRACE=1: the kernel's process tracepoints, read
	# by perf record (test/bench/onedbench/trace.go)
	linux-perf
)

# DEMO_PKGS: what `make demo` needs (test/demo.sh: a one-node cluster, the
# zombie and rbdfence built with cgo: internal/ceph has C++, clients.cpp, with
# librados.hpp from libradospp-dev).
DEMO_PKGS=(ceph-mon ceph-osd ceph-mgr ceph-common librbd-dev librados-dev libradospp-dev gcc g++ libc6-dev)
MODE=${1:-}
if [ "$MODE" = --demo ]; then
	PKGS=("${DEMO_PKGS[@]}")
fi

missing() {
	local p st
	for p in "${PKGS[@]}"; do
		st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
		case "$st" in
		ii*) ;;
		*) echo "$p" ;;
		esac
	done
}

# libvirtd's QEMU driver looks up its built-in user and group
# (libvirt-qemu) before it reads qemu.conf, and does not start without
# them: Debian's libvirt-daemon-system creates them, but that package also
# enables the machine's own libvirtd, which the tests do not want. The
# tests' qemu.conf files run QEMU as root; the account only has to exist.
qemu_account() {
	getent group libvirt-qemu >/dev/null || addgroup --quiet --system libvirt-qemu
	getent passwd libvirt-qemu >/dev/null ||
		adduser --quiet --system --ingroup libvirt-qemu --home /var/lib/libvirt --no-create-home \
			--disabled-login --disabled-password --gecos "Libvirt Qemu" libvirt-qemu
}
account_missing() { ! getent passwd libvirt-qemu >/dev/null || ! getent group libvirt-qemu >/dev/null; }

mapfile -t MISSING < <(missing)
if [ "${#MISSING[@]}" -eq 0 ] && [ "$MODE" = --demo ]; then
	echo "deps.sh: the demo's ${#PKGS[@]} packages are installed" >&2
	exit 0
fi
if [ "${#MISSING[@]}" -eq 0 ]; then
	if account_missing; then
		[ "${1:-}" != "--check" ] && [ "$(id -u)" -eq 0 ] || {
			echo "deps.sh: missing: the libvirt-qemu user and group (run as root to create them)" >&2
			exit 1
		}
		qemu_account
	fi
	echo "deps.sh: all ${#PKGS[@]} packages are installed" >&2
	exit 0
fi
if [ "${1:-}" = "--check" ]; then
	echo "deps.sh: missing: ${MISSING[*]}" >&2
	exit 1
fi
[ "$(id -u)" -eq 0 ] || {
	echo "deps.sh: missing ${MISSING[*]}; run as root to install them" >&2
	exit 1
}

if [ "$MODE" = --demo ]; then
	echo "deps.sh: the demo needs ${#PKGS[@]} packages (a Ceph cluster, librados/librbd, gcc and g++ for cgo); installing ${MISSING[*]}" >&2
else
	echo "deps.sh: installing ${MISSING[*]}" >&2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
# Do not let package scripts start services (ceph, libvirtd, sshd) on this
# machine: the tests start what they need themselves.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
apt-get install -y --no-install-recommends "${MISSING[@]}"
[ "$MODE" = --demo ] || qemu_account

mapfile -t MISSING < <(missing)
if [ "${#MISSING[@]}" -ne 0 ]; then
	echo "deps.sh: still missing after install: ${MISSING[*]}" >&2
	exit 1
fi
echo "deps.sh: done" >&2
