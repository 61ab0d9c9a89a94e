#!/usr/bin/env bash
# test/oned/build.sh: build and install OpenNebula (oned, onemonitord, the
# scheduler, the drivers, the CLI and onehem-server) from source, once per
# source, into the build cache; print the installed tree's path.
#
#   test/oned/build.sh VERSION        VERSION: 7.4.0 or 6.10.5
#
# Source: $RBDFENCE_OPENNEBULA_SRC (default ../shared/opennebula beside the
# repository, or beside its main checkout for a git worktree) /one-release-VERSION.tar.gz, an unmodified `git archive` of
# OpenNebula/one at tag release-VERSION; when that file is absent, a shallow
# `git clone --branch release-VERSION` of https://github.com/OpenNebula/one
# (a developer machine with internet).
#
# The cache: ${RBDFENCE_ONED_CACHE:-/var/cache/rbdfence-test/opennebula}/
# VERSION-KEY/, KEY being the first 16 hex digits of the tarball's sha256 (or
# of the cloned commit). It holds the installed tree (install/, ~120 MB, as
# `install.sh -d` lays it out with ONE_LOCATION) and the build log; the build
# tree (~800 MB) is deleted once installed. Like the Debian packages that
# test/deps.sh installs, the cache is set-up, not test state: it lives outside
# the test root, test/machine.sh does not watch it and teardown keeps it, so
# that the next `make test` starts oned without rebuilding (cold: ~4.5 min on
# 2 cores; warm: nothing to do). Remove it with
#   rm -rf /var/cache/rbdfence-test/opennebula
# A half-built entry is never used: install/ appears (by rename) only when
# the build and install succeeded; a failed or interrupted build keeps its
# tree in VERSION-KEY/work and the next call resumes it. Concurrent calls
# are serialised with flock.
#
# The build: Debian packages only (test/deps.sh), no Go, Node or gem bundle:
#   scons -j$(nproc) sqlite=yes mysql=no grpc=no svncterm=no fireedge=no
#         systemd=no rubygems=no context=no parsers=no
# then `install.sh -d DEST -u root -g root` (the tree's own installer; it
# prints ~110 "cannot stat" lines for the parts not built). The installed Ruby
# files load a gem bundle that the official packages ship, through
# `require 'load_opennebula_paths'` inside %%RUBYGEMS_SETUP_BEGIN/END%%
# markers (e.g. src/cli/onevm:29-31 in release-7.4.0) and once without them
# (src/vmm_mad/remotes/lib/opennebula_vm.rb:17); without that bundle those
# lines are removed, so that Debian's ruby-* gems are used.
set -euo pipefail

PROG=build.sh
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

CHECK=
if [ "${1:-}" = --check ]; then
	CHECK=1
	shift
fi
VERSION=${1:-}
case "$VERSION" in
7.4.0 | 6.10.5) ;;
*) die "usage: $PROG [--check] 7.4.0|6.10.5" ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shared/ lies beside the clone (CI) or beside the main checkout (a git
# worktree elsewhere).
SRC_DIR=${RBDFENCE_OPENNEBULA_SRC:-}
if [ -z "$SRC_DIR" ]; then
	SRC_DIR=$repo/../shared/opennebula
	common=$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
	if [ ! -d "$SRC_DIR" ] && [ -n "$common" ] && [ -d "$common/../../shared/opennebula" ]; then
		SRC_DIR=$(cd "$common/../../shared/opennebula" && pwd)
	fi
fi
TARBALL=$SRC_DIR/one-release-$VERSION.tar.gz
CACHE=${RBDFENCE_ONED_CACHE:-/var/cache/rbdfence-test/opennebula}
GIT_URL=${RBDFENCE_OPENNEBULA_GIT:-https://github.com/OpenNebula/one}

# --check: say at once (test/run.sh's first second) whether the source can
# be had: the tarball, else the git repository answering within 15 s.
if [ -n "$CHECK" ]; then
	[ -r "$TARBALL" ] && exit 0
	timeout 15 git ls-remote --exit-code --heads "$GIT_URL" "release-$VERSION" >/dev/null 2>&1 && exit 0
	die "no OpenNebula $VERSION source for test/oned: neither $TARBALL nor $GIT_URL (no network?); put one-release-$VERSION.tar.gz in ../shared/opennebula beside the checkout, or set RBDFENCE_OPENNEBULA_SRC to its directory"
fi

for p in scons g++ bison flex ruby; do
	command -v "$p" >/dev/null || die "$p not found: run test/deps.sh (as root)"
done

mkdir -p "$CACHE"
exec 9>>"$CACHE/.lock-$VERSION"
flock -w 1800 9 || die "timed out waiting for $CACHE/.lock-$VERSION (another build of $VERSION?)"

# key: the tarball's hash, or the cloned commit.
clone=
if [ -r "$TARBALL" ]; then
	key=$(sha256sum "$TARBALL" | cut -c1-16)
else
	log "$TARBALL not found: cloning release-$VERSION from $GIT_URL"
	clone=$(mktemp -d "$CACHE/clone-$VERSION.XXXXXX")
	trap 'rm -rf "$clone"' EXIT
	git clone -q --depth 1 --branch "release-$VERSION" "$GIT_URL" "$clone/one-release-$VERSION" >&2 ||
		die "git clone of release-$VERSION failed"
	key=$(git -C "$clone/one-release-$VERSION" rev-parse HEAD | cut -c1-16)
fi
ENTRY=$CACHE/$VERSION-$key
if [ -x "$ENTRY/install/bin/oned" ]; then
	echo "$ENTRY/install"
	exit 0
fi

t0=$SECONDS
# An interrupted or failed build leaves its tree in ENTRY/work: scons goes on
# from there (it rebuilds only what changed), after the cause is fixed.
work=$ENTRY/work
tree=$work/one-release-$VERSION
if [ ! -e "$work/.extracted" ]; then
	rm -rf "$ENTRY"
	mkdir -p "$work"
	if [ -n "$clone" ]; then
		mv "$clone/one-release-$VERSION" "$work/"
	else
		tar -xzf "$TARBALL" -C "$work"
	fi
	: >"$work/.extracted"
else
	log "resuming the build in $tree"
fi
[ -f "$tree/SConstruct" ] || die "no SConstruct in $tree"

buildlog=$ENTRY/build.log
[ ! -e "$buildlog" ] || mv -f "$buildlog" "$buildlog.prev"
log "building OpenNebula $VERSION in $tree (log: $buildlog; ~4.5 min on 2 cores)"
jobs=$(nproc)
if ! (cd "$tree" && scons -j"$jobs" sqlite=yes mysql=no grpc=no svncterm=no fireedge=no \
	systemd=no rubygems=no context=no parsers=no) >"$buildlog" 2>&1; then
	tail -n 40 "$buildlog" >&2
	die "scons failed (log: $buildlog)"
fi
log "built in $((SECONDS - t0))s; installing"
dest=$ENTRY/install.tmp
rm -rf "$dest"
# install.sh copies what exists and complains about the rest (not built).
if ! (cd "$tree" && ./install.sh -d "$dest" -u root -g root) >>"$buildlog" 2>&1; then
	tail -n 40 "$buildlog" >&2
	die "install.sh failed (log: $buildlog)"
fi
[ -x "$dest/bin/oned" ] && [ -x "$dest/lib/mads/onemonitord" ] || die "install.sh left no bin/oned or lib/mads/onemonitord in $dest"
# No gem bundle: let Debian's ruby-* gems be found (see the header).
grep -rlZ --include='*' -e '%%RUBYGEMS_SETUP_BEGIN%%' -e "^require 'load_opennebula_paths'" "$dest" 2>/dev/null |
	xargs -0 -r sed -i -e '/%%RUBYGEMS_SETUP_BEGIN%%/,/%%RUBYGEMS_SETUP_END%%/d' -e "/^require 'load_opennebula_paths'\$/d"
if grep -rlq -e "require 'load_opennebula_paths'" "$dest/bin" "$dest/lib" "$dest/var/remotes" 2>/dev/null; then
	grep -rl -e "require 'load_opennebula_paths'" "$dest/bin" "$dest/lib" "$dest/var/remotes" | head -5 >&2
	die "files still load the gem bundle"
fi
echo "$VERSION $key $(date -u +%FT%TZ) built in $((SECONDS - t0))s" >"$dest/.rbdfence-build"
mv "$dest" "$ENTRY/install"
rm -rf "$work" "$buildlog.prev"
log "OpenNebula $VERSION installed in $ENTRY/install ($((SECONDS - t0))s)"
echo "$ENTRY/install"
