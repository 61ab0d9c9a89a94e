#!/usr/bin/env bash
# Build rbdfence's packages, a .deb and an .rpm of each:
#   rbdfence           the CLI / host-side step, install.sh, /etc/one/rbdfence.yaml, docs
#   rbdfence-frontend  the OpenNebula front-end drivers, install-frontend.sh
#   rbdfence-host      the libvirt qemu hook, install-host.sh
# Each carries the license (Apache-2.0) and the copyright file
# (packaging/copyright.sh): /usr/share/doc/<pkg>/copyright in the .deb,
# /usr/share/licenses/<pkg>/{LICENSE,copyright} (%license) in the .rpm.
#
#   packaging/package.sh [--bin DIR] [--out DIR] [--version VERSION] [--formats "deb rpm"]
#   packaging/package.sh --print-version                  the version it would use
#   packaging/package.sh --sanitize-version DESCRIBE      DESCRIBE made a deb/rpm version
#
# --bin: the built binaries (default ./bin, `make build`; or $RBDFENCE_BIN).
# --out: where the packages go (default ./dist).
# --version: default from `git describe` (see sanitize_version), or
#   $RBDFENCE_VERSION.
# The package maintainer field comes from $RBDFENCE_PKG_MAINTAINER.
#
# nfpm runs as `go run github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION`
# (its own pinned dependencies, the project's go.mod untouched; the go
# command caches the binary), or from $NFPM when that names an nfpm binary.
# File times are the last commit's ($SOURCE_DATE_EPOCH when set), so the
# same tree gives the same packages.
set -euo pipefail

NFPM_VERSION=v2.45.2
NFPM_PKG=github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)

die() {
	echo "package.sh: ERROR: $*" >&2
	exit 1
}
usage() {
	echo "usage: packaging/package.sh [--bin DIR] [--out DIR] [--version VERSION] [--formats \"deb rpm\"]" >&2
	echo "       packaging/package.sh --print-version | --sanitize-version DESCRIBE" >&2
	exit 2
}

# sanitize_version DESCRIBE: a `git describe --tags --long --dirty` string
# (vX.Y.Z[-pre]-N-gHASH[-dirty]) as a version that dpkg and rpm both accept
# and order by release, then commits since it:
#   v1.2.3-0-gabc1234        -> 1.2.3
#   v1.2.3-4-gabc1234        -> 1.2.3+4.gabc1234
#   v1.2.3-4-gabc1234-dirty  -> 1.2.3+4.gabc1234.dirty
#   v1.3.0-rc1-0-gabc1234    -> 1.3.0~rc1          (before 1.3.0)
# A base that does not start with a digit gets 0.0.0+ in front; characters
# other than letters, digits, . + ~ become '.'.
sanitize_version() {
	local d=$1 base n="" hash="" dirty=""
	d=${d#v}
	if [[ $d =~ ^(.*)-dirty$ ]]; then
		dirty=1
		d=${BASH_REMATCH[1]}
	fi
	if [[ $d =~ ^(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		base=${BASH_REMATCH[1]}
		n=${BASH_REMATCH[2]}
		hash=${BASH_REMATCH[3]}
	else
		base=$d
	fi
	base=${base//-/\~}
	base=$(printf '%s' "$base" | sed -e 's/[^A-Za-z0-9.+~]/./g')
	[[ $base =~ ^[0-9] ]] || base=0.0.0+$base
	local extra=""
	if [[ -n $n && ($n != 0 || -n $dirty) ]]; then
		extra=$n.g$hash
	fi
	[[ -n $dirty ]] && extra=${extra:+$extra.}dirty
	if [[ -n $extra ]]; then
		if [[ $base == *+* ]]; then
			base=$base.$extra
		else
			base=$base+$extra
		fi
	fi
	printf '%s\n' "$base"
}

# git_version: the version of the work tree. Without a vX.Y tag it counts
# from v0.0.0, so that every commit gets a larger version (0.0.0+N.gHASH).
git_version() {
	local d
	git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || die "$src is not a git work tree: pass --version"
	if d=$(git -C "$src" describe --tags --long --dirty --match 'v[0-9]*' 2>/dev/null); then
		:
	else
		local n h dirty=""
		n=$(git -C "$src" rev-list --count HEAD)
		h=$(git -C "$src" rev-parse --short=7 HEAD)
		[[ -z $(git -C "$src" status --porcelain --untracked-files=no) ]] || dirty=-dirty
		d=v0.0.0-$n-g$h$dirty
	fi
	sanitize_version "$d"
}

BIN=${RBDFENCE_BIN:-$src/bin}
OUT=$src/dist
VERSION=${RBDFENCE_VERSION:-}
FORMATS="deb rpm"

while [[ $# -gt 0 ]]; do
	case $1 in
	--bin)
		[[ $# -ge 2 ]] || usage
		BIN=$2
		shift 2
		;;
	--out)
		[[ $# -ge 2 ]] || usage
		OUT=$2
		shift 2
		;;
	--version)
		[[ $# -ge 2 ]] || usage
		VERSION=$2
		shift 2
		;;
	--formats)
		[[ $# -ge 2 ]] || usage
		FORMATS=$2
		shift 2
		;;
	--print-version)
		if [[ -n $VERSION ]]; then
			sanitize_version "$VERSION"
		else
			git_version
		fi
		exit 0
		;;
	--sanitize-version)
		[[ $# -ge 2 ]] || usage
		sanitize_version "$2"
		exit 0
		;;
	-h | --help) usage ;;
	*)
		echo "package.sh: unknown argument '$1'" >&2
		usage
		;;
	esac
done

if [[ -n $VERSION ]]; then
	VERSION=$(sanitize_version "$VERSION")
else
	VERSION=$(git_version)
fi

[[ -d $BIN ]] || die "binaries directory $BIN not found: run 'make build' or pass --bin"
BIN=$(cd "$BIN" && pwd)
for b in rbdfence rbdfence-hook deploy-rbdfence restore-rbdfence migrate-rbdfence attach-rbdfence onedconf-rbdfence prestart; do
	[[ -f $BIN/$b && -x $BIN/$b ]] || die "$BIN/$b not found: run 'make build' or pass --bin"
done
for f in $FORMATS; do
	case $f in
	deb | rpm) ;;
	*) die "unknown format '$f' (deb, rpm)" ;;
	esac
done

ARCH=$(go env GOARCH 2>/dev/null || true)
[[ -n $ARCH ]] || die "cannot tell the architecture (go env GOARCH)"
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
	SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/scripts" "$OUT"
OUT=$(cd "$OUT" && pwd)

# The maintainer scripts, one pair per role, from one template each.
for role in frontend host; do
	for s in postinstall preremove; do
		sed "s/@ROLE@/$role/g" "$here/nfpm/scripts/$s.sh" >"$work/scripts/$role-$s.sh"
		chmod 0755 "$work/scripts/$role-$s.sh"
	done
done

if [[ -n ${NFPM:-} ]]; then
	nfpm=("$NFPM")
else
	command -v go >/dev/null || die "the go command is needed to run nfpm (or set NFPM to an nfpm binary)"
	nfpm=(go run "$NFPM_PKG")
fi

# The copyright file: rbdfence and every Go module in the binaries.
bash "$here/copyright.sh" >"$work/copyright" || die "packaging/copyright.sh failed"

export RBDFENCE_PKG_VERSION=$VERSION RBDFENCE_PKG_ARCH=$ARCH RBDFENCE_PKG_BIN=$BIN RBDFENCE_PKG_SRC=$src
export RBDFENCE_PKG_COPYRIGHT=$work/copyright
export RBDFENCE_PKG_MAINTAINER=${RBDFENCE_PKG_MAINTAINER:-rbdfence maintainers <rbdfence@users.noreply.github.com>}
export SOURCE_DATE_EPOCH

echo "package.sh: rbdfence $VERSION ($ARCH) into $OUT" >&2
built=()
for pkg in rbdfence rbdfence-frontend rbdfence-host; do
	for f in $FORMATS; do
		# nfpm reads the scripts relative to its working directory.
		(cd "$work" && "${nfpm[@]}" package --config "$here/nfpm/$pkg.nfpm.yaml" --packager "$f" --target "$OUT/") >"$work/nfpm.log" 2>&1 ||
			die "nfpm $pkg ($f) failed: $(cat "$work/nfpm.log")"
		new=$(sed -n 's/^created package: //p' "$work/nfpm.log")
		[[ -n $new && -f $new ]] || die "nfpm $pkg ($f) did not say which package it created: $(cat "$work/nfpm.log")"
		built+=("$new")
	done
done
printf '%s\n' "${built[@]}"
