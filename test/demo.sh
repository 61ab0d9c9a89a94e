#!/usr/bin/env bash
# The rbdfence demo: a private one-node Ceph cluster, a VM disk image, a real
# librbd "zombie" writing to it, then rbdfence check and fence before your
# eyes. Everything it starts, it stops. Run it as root with `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${RBDFENCE_DEMO_DIR:-/tmp/rbdfence-demo}
PORT=${RBDFENCE_DEMO_PORT:-16799}
BIN=bin
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

ZPID=""
cleanup() {
	[ -n "$ZPID" ] && kill "$ZPID" 2>/dev/null && wait "$ZPID" 2>/dev/null || true
	bash test/ceph/cluster.sh stop --dir "$DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "Booting a private one-node Ceph cluster on 127.0.0.1:$PORT (cephx on, pool 'one')"
eval "$(bash test/ceph/cluster.sh start --dir "$DIR" --port "$PORT")"
go build -tags pacific -o "$BIN/zombie" ./test/zombie

IMG=one/one-42-disk-0
rbd -c "$RBDFENCE_TEST_ADMIN_CONF" create "$IMG" --size 64M
cat >"$DIR/rbdfence.yaml" <<YAML
ceph:
  mon_host: "$RBDFENCE_TEST_MON_HOST"
  user: $RBDFENCE_TEST_USER
  keyring: $RBDFENCE_TEST_KEYRING
fence:
  expire: 1h
audit_log: $DIR/audit.log
spool_dir: $DIR/spool
state_dir: $DIR/state
YAML

say "A zombie QEMU (a real librbd client) writes to $IMG every 100 ms"
"$BIN/zombie" --mon "$RBDFENCE_TEST_MON_HOST" --id "$RBDFENCE_TEST_USER" --keyring "$RBDFENCE_TEST_KEYRING" \
	--image "$IMG" --mode write >"$DIR/zombie.log" 2>&1 &
ZPID=$!
for _ in $(seq 50); do grep -q '"ok":true' "$DIR/zombie.log" 2>/dev/null && break; sleep 0.2; done
head -n 3 "$DIR/zombie.log"

say "What Ceph shows (as client.libvirt): the lock and the watch"
rbd -c "$RBDFENCE_TEST_CONF" --id libvirt --keyring "$RBDFENCE_TEST_KEYRING" lock ls "$IMG"
rbd -c "$RBDFENCE_TEST_CONF" --id libvirt --keyring "$RBDFENCE_TEST_KEYRING" status "$IMG"

say "rbdfence check: a dry run (exit 5 = something would be fenced)"
set +e
"$BIN/rbdfence" check --config "$DIR/rbdfence.yaml" --image "$IMG"
echo "exit code: $?"
set -e

say "rbdfence fence: blocklist the zombie's exact address, wait for the OSD map, break its lock"
"$BIN/rbdfence" fence --config "$DIR/rbdfence.yaml" --image "$IMG"

# The zombie's OSD refuses it once it has the new map (usually within a second).
for _ in $(seq 150); do grep -q '"errno":108' "$DIR/zombie.log" && break; sleep 0.2; done
say "The zombie's writes now fail with error 108 (blocklisted)"
grep '"ok":false' "$DIR/zombie.log" | head -n 3
grep -q '"errno":108' "$DIR/zombie.log" || { echo "demo FAILED: the zombie still writes"; exit 1; }

say "The lock is gone, the blocklist holds the exact address, the audit log has the fence"
rbd -c "$RBDFENCE_TEST_CONF" --id libvirt --keyring "$RBDFENCE_TEST_KEYRING" lock ls "$IMG"
ceph -c "$RBDFENCE_TEST_ADMIN_CONF" osd blocklist ls 2>/dev/null
cat "$DIR/audit.log"
say "Demo done: the zombie was fenced. Cleaning up."
