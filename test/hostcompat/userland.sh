#!/usr/bin/env bash
# test/hostcompat/userland.sh SUITE: print the directory of a Debian SUITE
# userland (debootstrap --variant=minbase, plus librados2 from that suite),
# made once from Debian's mirror and kept in the test suite's cache:
#
#   ${RBDFENCE_TEST_CACHE:-/var/cache/rbdfence-test}/userland-SUITE
#
# The cache is set-up, like the Debian packages test/deps.sh installs: it
# is outside the test root, so teardown leaves it, and the next run starts
# in seconds (the first takes about 3 minutes: debootstrap downloads ~60 MB).
# It is never changed after it is made: tests copy it. Remove it with
# `rm -rf /var/cache/rbdfence-test/userland-*`.
#
# Made under an flock in a .tmp directory and renamed when complete, so a
# killed or concurrent run never leaves a half-made userland in its place.
# Mirror: $RBDFENCE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
suite=${1:?usage: userland.sh SUITE}
[[ $suite =~ ^[a-z]+$ ]] || { echo "userland.sh: bad suite '$suite'" >&2; exit 2; }
cache=${RBDFENCE_TEST_CACHE:-/var/cache/rbdfence-test}
dir=$cache/userland-$suite
mirror=${RBDFENCE_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ -f "$dir/.complete" ]; then
	echo "$dir"
	exit 0
fi
command -v debootstrap >/dev/null || { echo "userland.sh: debootstrap is missing (test/deps.sh installs it)" >&2; exit 1; }
mkdir -p "$cache"
exec 9>>"$cache/userland-$suite.lock"
flock -w 900 9 || { echo "userland.sh: timed out waiting for $cache/userland-$suite.lock" >&2; exit 1; }
if [ ! -f "$dir/.complete" ]; then
	tmp=$dir.tmp
	# A killed debootstrap may leave its proc and sys mounts.
	for m in proc sys; do mountpoint -q "$tmp/$m" 2>/dev/null && umount -l "$tmp/$m"; done
	rm -rf -- "$tmp" "$dir"
	echo "userland.sh: making a Debian $suite userland from $mirror (once; cached in $dir)" >&2
	if ! debootstrap --variant=minbase --include=librados2 "$suite" "$tmp" "$mirror" >"$cache/userland-$suite.log" 2>&1; then
		for m in proc sys; do mountpoint -q "$tmp/$m" 2>/dev/null && umount -l "$tmp/$m"; done
		echo "userland.sh: debootstrap $suite failed (log: $cache/userland-$suite.log):" >&2
		tail -5 "$cache/userland-$suite.log" >&2
		exit 1
	fi
	for m in proc sys; do mountpoint -q "$tmp/$m" 2>/dev/null && umount -l "$tmp/$m"; done
	rm -f "$tmp"/var/cache/apt/archives/*.deb
	touch "$tmp/.complete"
	mv -- "$tmp" "$dir"
fi
echo "$dir"
