#!/bin/bash
# qemuexit.sh: how long a QEMU with an RBD disk takes to exit on SIGTERM,
# started by hand on the test cluster (docs/PERFORMANCE.md, Dec 8: a live
# migration's source QEMU, killed by libvirt's Confirm phase, took 1.0-2.0 s
# in the test/oned stack). Five runs each: no disk, an RBD disk with the
# cluster's conf file, and one as libvirt gives it (-blockdev, monitor and
# key inline, no conf file). Root, the test cluster's tools; hold
# /tmp/rbdfence-machine.lock on a shared machine. It stops what it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d /tmp/rbdfence-qemuexit.XXXXXX)
trap 'bash test/ceph/cluster.sh stop --dir "$dir/ceph" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
eval "$(bash test/ceph/cluster.sh start --dir "$dir/ceph" 2>/dev/null)"
rbd -c "$RBDFENCE_TEST_ADMIN_CONF" create one/qemuexit --size 64M
awk '/key =/{printf "%s", $3}' "$RBDFENCE_TEST_KEYRING" >"$dir/key"
mon=$RBDFENCE_TEST_MON
run() { # label, QEMU's arguments
	local label=$1 p t0 t1
	shift
	for _ in 1 2 3 4 5; do
		qemu-system-x86_64 -machine pc,accel=tcg -m 256 -display none -nodefaults -serial none -monitor none "$@" 2>/dev/null &
		p=$!
		sleep 3
		t0=$(date +%s%N)
		kill -TERM "$p"
		wait "$p" || true
		t1=$(date +%s%N)
		echo "$label: exit $(((t1 - t0) / 1000000)) ms after SIGTERM"
	done
}
run "no disk"
run "rbd disk, conf file" -drive "file=rbd:one/qemuexit:conf=$RBDFENCE_TEST_ADMIN_CONF,format=raw,if=virtio,cache=none"
run "rbd disk as libvirt gives it" -object "secret,id=sec0,file=$dir/key,format=base64" \
	-blockdev '{"driver":"rbd","pool":"one","image":"qemuexit","server":[{"host":"'"${mon%:*}"'","port":"'"${mon#*:}"'"}],"user":"libvirt","auth-client-required":["cephx","none"],"key-secret":"sec0","node-name":"d0","cache":{"direct":true,"no-flush":false}}' \
	-device virtio-blk-pci,drive=d0
