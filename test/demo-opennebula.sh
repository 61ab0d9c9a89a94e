#!/usr/bin/env bash
# make demo-opennebula: rbdfence on a real OpenNebula 7.4.0 (test/oned's
# stack: a front-end and two KVM hosts in namespaces, each host with its
# own libvirtd and sshd, and a Ceph cluster): a zombie on a persistent
# image fenced by `onevm deploy`, what the operator sees of it, then a live
# migration that fences nothing (test/oned TestDemoOpenNebula, asserted).
# Everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${RBDFENCE_TEST_ROOT:-/tmp/rbdfence-test}
CACHE=${RBDFENCE_ONED_CACHE:-/var/cache/rbdfence-test/opennebula}
if ! ls "$CACHE"/7.4.0-*/install >/dev/null 2>&1; then
	echo "demo-opennebula: building OpenNebula 7.4.0 from ../shared/opennebula first (about 5 minutes on 2 cores, once: cached in $CACHE)"
fi
rc=0
RBDFENCE_DEMO_OPENNEBULA=1 go test -tags pacific -count=1 -timeout 40m -v -run '^TestDemoOpenNebula$' ./test/oned || rc=$?
echo "demo-opennebula: stopping the front-end, the hosts and the Ceph cluster"
RBDFENCE_ONED_DIR=$ROOT/oned bash test/oned/frontend.sh down >/dev/null || rc=1
RBDFENCE_ONED_DIR=$ROOT/oned bash test/oned/hosts.sh down >/dev/null || rc=1
for d in "$ROOT"/ceph-oned*; do
	[ -d "$d" ] && { bash test/ceph/cluster.sh stop --dir "$d" >/dev/null || rc=1; }
done
[ "$rc" -eq 0 ] && echo "demo-opennebula: done: the zombie was fenced by onevm deploy, the live migration fenced nothing"
exit "$rc"
